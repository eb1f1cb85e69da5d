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

from _made_up_keys import made_up_key
from geoagent.sandbox import llm_anthropic, llm_gemini
from geoagent.sandbox.server import serve
from _docs import docs_text

# made-up keys in the providers' shapes, drawn at run time (tests/_made_up_keys): no key-shaped literal in the source
KEY = made_up_key("sk-ant-", 32, seed="listing")
GKEY = made_up_key("AIza", 35, seed="listing")
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
            await get("badkey", {**hdr, "x-api-key": made_up_key("sk-ant-", 32, seed="wrong")})
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


def test_anthropic_get_a_model_shape_and_errors():
    """"Get a Model" (https://platform.claude.com/docs/en/api/models/retrieve): ``GET /v1/models/{model_id}``
    answers one ModelInfo ``{type: "model", id, display_name, created_at}``; an unknown id is 404
    ``not_found_error``; the same headers as every request (``x-api-key``, ``anthropic-version``)."""

    async def go() -> dict:
        out: dict = {}
        app = llm_anthropic.make_app(api_keys=[KEY], models=IDS)
        hdr = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        async with serve(app) as base, aiohttp.ClientSession() as s:
            async def get(name: str, model_id: str, headers: dict) -> None:
                async with s.get(f"{base}/v1/models/{model_id}", headers=headers) as r:
                    out[name] = (r.status, await r.json(), r.headers.get("request-id", ""))

            await get("b", "claude-b", hdr)
            await get("unknown", "claude-zzz", hdr)
            await get("nokey", "claude-b", {"anthropic-version": "2023-06-01"})
            await get("noversion", "claude-b", {"x-api-key": KEY})
            async with s.get(f"{base}/v1/models", headers=hdr) as r:
                out["listing"] = (await r.json())["data"]
            body = {"model": "claude-new", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
            async with s.post(f"{base}/v1/messages", headers=hdr, json=body) as r:
                assert r.status == 200
            await get("new", "claude-new", hdr)
            out["calls"] = [c["status"] for c in app["calls"]]
        return out

    out = asyncio.run(go())
    status, info, rid = out["b"]
    assert status == 200 and rid.startswith("req_")
    assert set(info) == {"type", "id", "display_name", "created_at"}
    assert info["type"] == "model" and info["id"] == "claude-b" and info["display_name"]
    assert _rfc3339(info["created_at"]).tzinfo is not None
    assert info == next(m for m in out["listing"] if m["id"] == "claude-b")  # the listing's own object
    status, err, _ = out["unknown"]
    assert status == 404 and err["type"] == "error" and err["error"]["type"] == "not_found_error"
    assert "claude-zzz" in err["error"]["message"]
    assert out["nokey"][0] == 401 and out["nokey"][1]["error"]["type"] == "authentication_error"
    assert out["noversion"][0] == 400 and out["noversion"][1]["error"]["type"] == "invalid_request_error"
    assert out["new"][0] == 200 and out["new"][1]["id"] == "claude-new"  # an answered model is known
    assert out["calls"] == [200]  # only the message is a call


def test_gemini_models_get_shape_and_errors():
    """``models.get`` (https://ai.google.dev/api/models, "Method: models.get"): ``GET /v1beta/models/{model}``
    answers one Model resource (``name`` ``models/<id>``, ``supportedGenerationMethods``, token limits); an
    unknown model is 404 ``NOT_FOUND``; the key as for every method."""
    gids = ["gemini-a", "gemini-b"]

    async def go() -> dict:
        out: dict = {}
        app = llm_gemini.make_app(api_keys=[GKEY], models=gids)
        async with serve(app) as base, aiohttp.ClientSession() as s:
            async def get(name: str, model: str, headers: dict | None = None, **params: str) -> None:
                async with s.get(f"{base}/v1beta/models/{model}", headers=headers or {}, params=params) as r:
                    out[name] = (r.status, await r.json())

            await get("header", "gemini-b", {"x-goog-api-key": GKEY})
            await get("query", "gemini-b", key=GKEY)
            await get("unknown", "gemini-zzz", key=GKEY)
            await get("method", "gemini-b:generateContent", key=GKEY)
            await get("nokey", "gemini-b")
            await get("badkey", "gemini-b", key="AIza-not-a-valid-key")
            async with s.get(f"{base}/v1beta/models", params={"key": GKEY}) as r:
                out["listing"] = (await r.json())["models"]
            out["calls"] = len(app["calls"])
        return out

    out = asyncio.run(go())
    status, model = out["header"]
    assert status == 200 and model == out["query"][1]  # key by header or by ?key=, same answer
    assert model["name"] == "models/gemini-b" and model["baseModelId"] == "gemini-b"
    assert "generateContent" in model["supportedGenerationMethods"]
    assert isinstance(model["inputTokenLimit"], int) and isinstance(model["outputTokenLimit"], int)
    assert model == next(m for m in out["listing"] if m["name"] == "models/gemini-b")  # the listing's own object
    for name in ("unknown", "method"):
        assert out[name][0] == 404 and out[name][1]["error"]["status"] == "NOT_FOUND", name
    assert out["nokey"][0] == 403 and out["nokey"][1]["error"]["status"] == "PERMISSION_DENIED"
    assert out["badkey"][0] == 400 and out["badkey"][1]["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert out["calls"] == 0  # not model calls


def test_readme_curl_examples_of_the_models_endpoints_work():
    """Each ``curl`` line of the README, sent with its own headers to the fake of its port (8002 Anthropic,
    8003 Gemini, as the lines above them start them): 200 in the documented shape. Without the
    ``anthropic-version`` header the Anthropic fake answers 400, as the real API does."""
    import re
    import shlex
    from urllib.parse import urlsplit

    readme = docs_text()
    lines = [ln for ln in readme.splitlines() if ln.startswith("curl ")]
    assert len(lines) >= 3, lines
    reqs = []
    for ln in lines:
        argv = shlex.split(ln)
        url = next(a for a in argv[1:] if a.startswith("http"))
        headers = dict(argv[i + 1].split(": ", 1) for i, a in enumerate(argv) if a == "-H")
        reqs.append((urlsplit(url), headers))
    assert {u.port for u, _ in reqs} == {8002, 8003}
    assert all("anthropic-version" in h for u, h in reqs if u.port == 8002)

    async def go() -> list:
        out = []
        async with serve(llm_anthropic.make_app()) as a, serve(llm_gemini.make_app()) as g, \
                aiohttp.ClientSession() as s:
            base = {8002: a, 8003: g}
            for u, headers in reqs:
                url = base[u.port] + u.path + (f"?{u.query}" if u.query else "")
                async with s.get(url, headers=headers) as r:
                    out.append((u.port, u.path, r.status, await r.json()))
                if u.port == 8002:
                    bare = {k: v for k, v in headers.items() if k != "anthropic-version"}
                    async with s.get(url, headers=bare) as r:
                        out.append((u.port, "no version", r.status, await r.json()))
        return out

    for port, path, status, body in asyncio.run(go()):
        if path == "no version":
            assert status == 400 and body["error"]["type"] == "invalid_request_error"
            continue
        assert status == 200, (port, path, body)
        if path == "/v1/models":
            assert [m["id"] for m in body["data"]] == list(llm_anthropic.DEFAULT_MODEL_IDS)
        elif port == 8002:
            assert body["type"] == "model" and path == f"/v1/models/{body['id']}"
        else:
            assert re.fullmatch(r"/v1beta/models/[\w.-]+", path) and path.endswith(body["name"])
