"""The Anthropic and Gemini fakes list their models as the real APIs do, behind the same key checks as
their model endpoints.

Expected shapes are written out here from the API docs (not read from the fakes): Anthropic "List Models"
(https://docs.anthropic.com/en/api/models-list: ``data`` of ``ModelInfo`` ``{type: "model", id,
display_name, created_at (RFC 3339)}``, ``has_more``, ``first_id``, ``last_id``; ``limit`` 1-1000,
``after_id`` / ``before_id`` cursors) and Gemini ``models.list`` (https://ai.google.dev/api/models:
``{"models": [Model], "nextPageToken"}``, ``name`` ``models/<id>``, ``supportedGenerationMethods``,
``pageSize`` / ``pageToken``). Every request goes over HTTP (aiohttp) to the fake running on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt

import aiohttp

from geoagent.sandbox import llm_anthropic, llm_gemini
from geoagent.sandbox.server import serve

KEY = "sk-ant-" "listing-0123456789abcdef"
GKEY = "AIza" "listing0123456789abcdefghijklmnop"
IDS = ["claude-a", "claude-b", "claude-c"]


def _rfc3339(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_anthropic_list_models_shape_paging_and_headers():
    async def go() -> dict:
        out: dict = {}
        app = llm_anthropic.make_app(api_keys=[KEY], models=IDS)
        hdr = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        async with serve(app) as base, aiohttp.ClientSession() as s:
            async def get(name: str, headers: dict, **params: str) -> None:
                async with s.get(f"{base}/v1/models", headers=headers, params=params) as r:
                    out[name] = (r.status, await r.json())

            await get("nokey", {"anthropic-version": "2023-06-01"})
            await get("badkey", {**hdr, "x-api-key": "sk-ant-wrong-000000000000"})
            await get("noversion", {"x-api-key": KEY})
            await get("all", hdr)
            await get("p1", hdr, limit="2")
            await get("p2", hdr, limit="2", after_id="claude-b")
            await get("before", hdr, limit="1", before_id="claude-c")
            await get("limit0", hdr, limit="0")
            await get("limit_big", hdr, limit="1001")
            out["calls_before"] = len(app["calls"])
            body = {"model": "claude-new", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
            async with s.post(f"{base}/v1/messages", headers=hdr, json=body) as r:
                out["msg"] = r.status
            await get("after_msg", hdr)
            out["calls_after"] = len(app["calls"])
        return out

    out = asyncio.run(go())
    for name in ("nokey", "badkey"):
        status, err = out[name]
        assert status == 401 and err["type"] == "error" and err["error"]["type"] == "authentication_error", name
    assert out["noversion"][0] == 400 and out["noversion"][1]["error"]["type"] == "invalid_request_error"
    status, page = out["all"]
    assert status == 200 and set(page) == {"data", "has_more", "first_id", "last_id"}
    assert [m["id"] for m in page["data"]] == IDS
    assert page["has_more"] is False and (page["first_id"], page["last_id"]) == ("claude-a", "claude-c")
    for m in page["data"]:
        assert set(m) == {"type", "id", "display_name", "created_at"} and m["type"] == "model"
        assert isinstance(m["display_name"], str) and m["display_name"]
        assert _rfc3339(m["created_at"]).tzinfo is not None
    # paging by hand: 3 ids, pages of 2
    assert [m["id"] for m in out["p1"][1]["data"]] == ["claude-a", "claude-b"] and out["p1"][1]["has_more"] is True
    assert out["p1"][1]["last_id"] == "claude-b"
    assert [m["id"] for m in out["p2"][1]["data"]] == ["claude-c"] and out["p2"][1]["has_more"] is False
    assert [m["id"] for m in out["before"][1]["data"]] == ["claude-b"] and out["before"][1]["has_more"] is True
    for name in ("limit0", "limit_big"):
        assert out[name][0] == 400 and out[name][1]["error"]["type"] == "invalid_request_error", name
    # listing is not a model call; a model the fake has answered is listed after the configured ones
    assert out["calls_before"] == 0 and out["msg"] == 200 and out["calls_after"] == 1
    assert [m["id"] for m in out["after_msg"][1]["data"]] == [*IDS, "claude-new"]


def test_gemini_list_models_shape_paging_and_key():
    gids = ["gemini-a", "gemini-b", "gemini-c"]

    async def go() -> dict:
        out: dict = {}
        app = llm_gemini.make_app(api_keys=[GKEY], models=gids)
        async with serve(app) as base, aiohttp.ClientSession() as s:
            async def get(name: str, headers: dict | None = None, **params: str) -> None:
                async with s.get(f"{base}/v1beta/models", headers=headers or {}, params=params) as r:
                    out[name] = (r.status, await r.json())

            await get("nokey")
            await get("badkey", key="AIza-not-a-valid-key")
            await get("header", {"x-goog-api-key": GKEY})
            await get("query", key=GKEY)
            await get("p1", key=GKEY, pageSize="2")
            token = out["p1"][1].get("nextPageToken", "")
            await get("p2", key=GKEY, pageSize="2", pageToken=token)
            await get("badtoken", key=GKEY, pageToken="not-a-token")
            await get("badsize", key=GKEY, pageSize="-3")
            out["calls_before"] = len(app["calls"])
            png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
            body = {"contents": [{"role": "user", "parts": [{"text": "where?"},
                                                            {"inlineData": {"mimeType": "image/png", "data": png}}]}]}
            async with s.post(f"{base}/v1beta/models/gemini-new:generateContent", params={"key": GKEY}, json=body) as r:
                out["gen"] = r.status
            await get("after_gen", {"x-goog-api-key": GKEY})
            out["calls_after"] = len(app["calls"])
        return out

    out = asyncio.run(go())
    assert out["nokey"][0] == 403 and out["nokey"][1]["error"]["status"] == "PERMISSION_DENIED"
    status, err = out["badkey"]
    assert status == 400 and err["error"]["status"] == "INVALID_ARGUMENT"
    assert [d.get("reason") for d in err["error"]["details"]] == ["API_KEY_INVALID"]
    status, listing = out["header"]
    assert status == 200 and listing == out["query"][1]  # key by header or by ?key=, same answer
    assert set(listing) == {"models"}  # one page: no nextPageToken
    assert [m["name"] for m in listing["models"]] == [f"models/{g}" for g in gids]
    for m, g in zip(listing["models"], gids):
        assert m["baseModelId"] == g and isinstance(m["displayName"], str) and m["displayName"]
        assert "generateContent" in m["supportedGenerationMethods"]
        assert isinstance(m["inputTokenLimit"], int) and isinstance(m["outputTokenLimit"], int)
    # paging by hand: 3 models, pages of 2, the token of page 1 leads to the last one
    assert [m["name"] for m in out["p1"][1]["models"]] == ["models/gemini-a", "models/gemini-b"]
    assert out["p1"][1]["nextPageToken"]
    assert [m["name"] for m in out["p2"][1]["models"]] == ["models/gemini-c"] and "nextPageToken" not in out["p2"][1]
    for name in ("badtoken", "badsize"):
        assert out[name][0] == 400 and out[name][1]["error"]["status"] == "INVALID_ARGUMENT", name
    assert out["calls_before"] == 0 and out["gen"] == 200 and out["calls_after"] == 1
    assert [m["name"] for m in out["after_gen"][1]["models"]][-1] == "models/gemini-new"


def test_default_model_ids_listed_without_auth_when_not_required():
    async def go() -> tuple:
        async with serve(llm_anthropic.make_app(require_auth=False)) as a, \
                serve(llm_gemini.make_app(require_auth=False)) as g, aiohttp.ClientSession() as s:
            async with s.get(f"{a}/v1/models", headers={"anthropic-version": "2023-06-01"}) as r:
                ra = (r.status, await r.json())
            async with s.get(f"{g}/v1beta/models") as r:
                rg = (r.status, await r.json())
        return ra, rg

    (sa, ba), (sg, bg) = asyncio.run(go())
    assert sa == 200 and [m["id"] for m in ba["data"]] == list(llm_anthropic.DEFAULT_MODEL_IDS)
    assert sg == 200 and [m["name"] for m in bg["models"]] == [f"models/{m}" for m in llm_gemini.DEFAULT_MODEL_IDS]
