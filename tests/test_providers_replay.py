"""Replay provider: answers and token usage from recorded JSONL files (the GeoContext release and our own)."""

from __future__ import annotations

import asyncio
import json

import pytest

from geoagent.providers import ModelRequest, ProviderSettings, ReplayMiss, make_provider
from geoagent.providers.errors import ReplayRecordedError
from geoagent.providers.replay import ReplayIndex

RELEASE_SETTINGS = {"replay_key_fields": ("trial_id", "model"), "replay_text_field": "raw", "replay_usage_field": "usage"}


def _release_provider(release_dir, key_field="replay_key"):
    s = ProviderSettings(
        kind="replay", model="any", replay_path=str(release_dir / "verify_raw_sample.jsonl"), replay_key_field=key_field, **RELEASE_SETTINGS
    )
    return make_provider(s)


def test_replays_every_release_record_verbatim(release_dir):
    # independent read of the file with the json module
    records = [json.loads(line) for line in (release_dir / "verify_raw_sample.jsonl").read_text().splitlines() if line.strip()]
    assert len(records) == 336
    prov = _release_provider(release_dir)

    async def run():
        outs = []
        for r in records:
            req = ModelRequest(provider="replay", model=r["model"], prompt="(not used)", meta={"replay_key": [r["trial_id"], r["model"]]})
            outs.append(await prov.generate(req))
        return outs

    outs = asyncio.run(run())
    for r, out in zip(records, outs, strict=True):
        assert out.text == r["raw"]
        assert out.usage.input_tokens == r["usage"]["input_tokens"]
        assert out.usage.output_tokens == r["usage"]["output_tokens"]
        assert out.finish_reason == r["usage"]["stop_reason"]
        assert out.provider_model == r["model"]
        assert out.latency_s == 0.0
    # totals per model equal the file's totals
    for model in {r["model"] for r in records}:
        want = sum(r["usage"]["input_tokens"] for r in records if r["model"] == model)
        got = sum(o.usage.input_tokens for r, o in zip(records, outs, strict=True) if r["model"] == model)
        assert got == want
    assert len(prov.index) == 336 and prov.index.n_duplicates == 0


def test_release_string_key_and_miss_names_the_key(release_dir):
    prov = _release_provider(release_dir)
    first = json.loads((release_dir / "verify_raw_sample.jsonl").read_text().splitlines()[0])
    key = f"{first['trial_id']}|{first['model']}"
    out = asyncio.run(prov.generate(ModelRequest(provider="replay", model="x", prompt="", meta={"replay_key": key})))
    assert out.text == first["raw"]
    missing = f"{first['trial_id']}|no-such-model"
    with pytest.raises(ReplayMiss) as ei:
        asyncio.run(prov.generate(ModelRequest(provider="replay", model="x", prompt="", meta={"replay_key": missing})))
    assert missing in str(ei.value) and "verify_raw_sample.jsonl" in str(ei.value)
    assert ei.value.retryable is False
    with pytest.raises(ReplayMiss, match="replay_key"):
        asyncio.run(prov.generate(ModelRequest(provider="replay", model="x", prompt="", meta={})))


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_default_lookup_by_request_key(tmp_path):
    reqs = [ModelRequest(provider="openai", model="m", prompt=f"p{i}", image_id=str(i), params={"max_output_tokens": 9}) for i in range(5)]
    rows = [{"key": r.key(), "text": f"answer {i}", "input_tokens": 100 + i, "output_tokens": i, "finish_reason": "stop"} for i, r in enumerate(reqs)]
    path = _write(tmp_path / "rec.jsonl", rows)
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))

    async def run():
        return [await prov.generate(r) for r in reqs]

    for i, out in enumerate(asyncio.run(run())):
        assert (out.text, out.usage.input_tokens, out.usage.output_tokens, out.finish_reason) == (f"answer {i}", 100 + i, i, "stop")
    other = ModelRequest(provider="openai", model="m", prompt="p0", image_id="0", params={"max_output_tokens": 10})
    with pytest.raises(ReplayMiss) as ei:
        asyncio.run(prov.generate(other))
    assert other.key() in str(ei.value)


def test_duplicates_prefer_success_then_first(tmp_path):
    """The first record answers; a recorded failure gives way to a later answer. Break32 #2: among equals the later
    line used to win, while the release importer's report said it kept the first, so a trial was scored from a
    record the report said was dropped."""
    rows = [
        {"key": "a", "text": "first", "error": None},
        {"key": "a", "text": "", "error": "HTTP 500"},  # a later failure does not hide a success
        {"key": "b", "text": "", "error": "timeout"},
        {"key": "b", "text": "retry ok", "error": None},  # a later success replaces a failure
        {"key": "c", "text": "old", "error": None},
        {"key": "c", "text": "new", "error": None},  # among equals the first line wins (the importer's rule)
        {"key": "d", "text": "", "error": "HTTP 429"},
    ]
    path = _write(tmp_path / "dup.jsonl", rows)
    idx = ReplayIndex(path, ("key",))
    assert len(idx) == 4 and idx.n_lines == 7 and idx.n_duplicates == 3
    assert idx.get("a")["text"] == "first" and idx.get("b")["text"] == "retry ok" and idx.get("c")["text"] == "old"
    prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_key_field="k"))
    with pytest.raises(ReplayRecordedError, match="HTTP 429"):
        asyncio.run(prov.generate(ModelRequest(provider="replay", model="m", prompt="", meta={"k": "d"})))


def test_bad_file_errors_name_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"key": "a", "text": "x"}\n\n{"key": \n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:3"):
        ReplayIndex(p, ("key",))
    p.write_text('{"key": "a", "text": "x"}\n{"text": "no key"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2.*key"):
        ReplayIndex(p, ("key",))
    with pytest.raises(ValueError, match="replay_path"):
        make_provider(ProviderSettings(kind="replay", model="m"))


def test_index_keeps_offsets_not_texts(tmp_path):
    big = "x" * 100_000
    path = _write(tmp_path / "big.jsonl", [{"key": str(i), "text": big + str(i)} for i in range(20)])
    idx = ReplayIndex(path, ("key",))
    assert all(isinstance(v, tuple) and all(isinstance(x, (int, bool)) for x in v) for v in idx._loc.values())
    assert idx.get("13")["text"] == big + "13"


def test_a_line_of_other_bytes_than_utf8_is_named_so(tmp_path):
    """reports36 #6: invalid bytes read "not valid JSON (str is not valid UTF-8: surrogates not allowed)"."""
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"key": "a", "text": "x"}\n{"key": "b", "text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not UTF-8 text"):
        ReplayIndex(p, ("key",))
