"""Walk30 #1: a GeoVerify config whose ``[campaign] kind`` line was lost ran as the default ``generic`` kind,
ignored the whole ``[geoverify]`` table, made 200 paid model calls and exited 0. A task table of another kind
than the campaign's is now refused at load, naming the table, the kind in force and both fixes."""

from __future__ import annotations

import pytest

from geoagent.config import ConfigError, config_from_dict
from geoagent.engine import load_kind

for _kind in ("geoverify", "geohint", "crawl", "generic"):  # each registers its table's schema on import
    load_kind(_kind)

BASE = {"campaign": {"name": "x", "seed": 1, "contact": "me@example.org"}, "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "simulated", "model": "sim"}]}


TABLES = {"geoverify": {}, "geohint": {}, "crawl": {"contact": "me@example.org"}}


@pytest.mark.parametrize("table", list(TABLES))
def test_a_kind_table_without_its_kind_is_refused(table):
    with pytest.raises(ConfigError) as ei:
        config_from_dict({**BASE, table: TABLES[table]})
    msg = str(ei.value)
    assert (f"[{table}]: the table of a {table} campaign, but the file sets no [campaign] kind, so the campaign "
            f"would run as the default kind, generic, which ignores [{table}]: set [campaign] kind = \"{table}\"") \
        in msg, msg


def test_a_file_that_writes_its_kind_may_hold_other_kinds_tables():
    """geoagent/configs/example.toml writes kind = "geoverify" and shows every kind's table: each kind reads its own."""
    cfg = config_from_dict({**BASE, "campaign": {**BASE["campaign"], "kind": "geoverify"}, "geoverify": {},
                            "crawl": TABLES["crawl"]})
    assert cfg.campaign.kind == "geoverify"


def test_the_kinds_own_table_and_the_generic_table_load():
    assert config_from_dict({**BASE, "generic": {}}).campaign.kind == "generic"
    cfg = config_from_dict({**BASE, "campaign": {**BASE["campaign"], "kind": "geoverify"}, "geoverify": {}})
    assert cfg.campaign.kind == "geoverify"
