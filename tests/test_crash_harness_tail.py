"""The crash harness polls the model fake's call log for its kill moments with an incremental reader
(:class:`tests._crash_harness.CallLogTail`); it must count what :meth:`CallLog.read` returns, per model too."""

from __future__ import annotations

import orjson

from geoagent.sandbox.llm_common import CallLog
from tests._crash_harness import CallLogTail


def test_the_tail_counts_what_a_full_read_returns_as_the_log_grows(tmp_path):
    path = tmp_path / "calls.jsonl"
    tail = CallLogTail(path)
    assert tail.count() == 0 and tail.count("a") == 0  # no log yet
    log = CallLog(path)
    try:
        for i in range(25):
            log.append({"model": "a" if i % 3 else "b", "key": f"k{i}", "status": 200})
            if i % 4 == 0:
                assert tail.count() == len(CallLog.read(path)) == i + 1
        assert tail.count("a") == sum(r["model"] == "a" for r in CallLog.read(path)) == 16
        assert tail.count("b") == 9
    finally:
        log.close()
    with path.open("ab") as fh:  # a record half written: counted once its line is complete
        line = orjson.dumps({"model": "b", "key": "late"}) + b"\n"
        fh.write(line[:10])
        fh.flush()
        assert tail.count() == 25
        fh.write(line[10:])
        fh.write(b"not json\n\n")  # a line a full read skips too
    assert tail.count() == len(CallLog.read(path)) == 26
    assert tail.count("b") == 10
