"""The shape of a Wikidata item id (QID), one rule for every place that tests one.

``Q`` then ASCII digits without a leading zero (``Q42``, ``Q1140620``), as Wikidata mints them
(https://www.wikidata.org/wiki/Wikidata:Identifiers). ``str.isdigit()`` and the regex ``\\d`` also accept
other digits (superscript ``"Q²"``, Arabic-Indic ``"Q٣"``), which are no id. Whether a *label* is an item's
missing name is another question, answered by comparing it with the item's own id
(:func:`geoagent.crawl.referenceability.has_no_label`, :func:`geoagent.crawl.sampler.unnamed`,
:func:`geoagent.crawl.ladder.hint_name`), never by this shape: a place may be named "Q1".
"""

from __future__ import annotations

import re
from typing import Any

#: a Wikidata item id: ``Q`` and ASCII digits, no leading zero (use with ``fullmatch``)
QID_RE = re.compile(r"Q[1-9][0-9]*")


def is_qid(value: Any) -> bool:
    """Whether ``value`` is a string shaped like a Wikidata item id (:data:`QID_RE`, the whole string, no
    surrounding space): ``"Q42"`` True; ``"Q0"``, ``"Q042"``, ``"q42"``, ``"Q²"``, ``"Q٣"``, ``"Q42\\n"`` False."""
    return isinstance(value, str) and QID_RE.fullmatch(value) is not None
