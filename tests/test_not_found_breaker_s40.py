"""A wrong base_url path or model id on a local server or a gateway stops the model after K answers, not the plan.

walk39 #6: a model pointing at a vLLM/Ollama server or a gateway (OpenRouter, LiteLLM) with a wrong path or a wrong
model id is answered HTTP 404 (or a 400 "not a valid model ID") on every call; each request used to be
dead-lettered one by one, so a campaign burnt its whole plan into dead letters. The model caller now counts such
answers per model (:meth:`geoagent.workers.model_caller.AuthBreaker.not_found`) and after
:data:`~geoagent.workers.model_caller.NOT_FOUND_TO_STOP` in a row stops the model the way a refused key does: its
tasks held, none dead-lettered, the other models run to the end, the run ends ``incomplete`` naming the model, host,
status and body; the same command with the config fixed sends them, each request key paid once.

Every campaign runs the real engine against the local OpenAI-compatible fake (``geoagent/sandbox/llm_openai``),
which answers a path outside ``/v1`` as api.openai.com does, and with ``unknown_model=`` a model id it does not
serve as OpenAI, vLLM, Ollama, OpenRouter or LiteLLM does.
"""

from __future__ import annotations

import anyio
import pytest
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table, paid_keys

from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from geoagent.workers.model_caller import NOT_FOUND_TO_STOP, AuthBreaker, is_not_found_failure

KEY = made_up_key("sk-", 40, seed="notfound40")
N = 40
CONCURRENCY = 4
QUEUE = {"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05}


def _write(tmp_path, models: str, n: int = N):
    return generic_campaign(tmp_path, name="nf", n=n, cap_usd=5.0, queue=QUEUE, models=models)


def _table(name: str, base: str, model: str) -> str:
    return model_table(name, base_url=base, key_var="NF_KEY", model=model, max_output_tokens=64,
                       concurrency=CONCURRENCY, rate_requests=5000)


def test_a_wrong_base_url_path_stops_the_model_after_k_and_the_fixed_config_sends_every_task_once(tmp_path,
                                                                                                   monkeypatch):
    app = llm_openai.make_app()
    monkeypatch.setenv("NF_KEY", KEY)

    async def main():
        async with serve(app) as base:
            good = _table("gpt", base, "sim-gpt")
            # the path without /v1 (a local server's root): POST /chat/completions, answered 404 "Invalid URL"
            path = _write(tmp_path, good.replace(f'"{base}/v1"', f'"{base}"'))
            cfg = load_config(path)
            first = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            status_text = format_status(campaign_status(cfg))
            calls_wrong = len(app["calls"])
            statuses_wrong = {r["status"] for r in app["calls"]}
            path.write_text(path.read_text().replace(f'base_url = "{base}"', f'base_url = "{base}/v1"'))
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            return base, first, status_text, calls_wrong, statuses_wrong, second

    base, first, status_text, calls_wrong, statuses_wrong, second = anyio.run(main)
    host = base.removeprefix("http://")
    assert first.status == "incomplete" and first.exit_code == EXIT_INCOMPLETE
    text = first.summary()
    # the message names the model, its host and the path asked, the status and the body, never the key
    assert f"model gpt: host {host} (POST /chat/completions) answered HTTP 404 (path or model not found)" in text
    assert f"to {NOT_FOUND_TO_STOP} requests in a row" in text
    assert "Invalid URL (POST /chat/completions)" in text
    assert "check [[models]] base_url (its path) and model" in text
    assert KEY not in text and KEY not in status_text
    # every task kept (the failures before the breaker opened were nacked, the rest held): none dead-lettered,
    # none done; only the calls under way while the first K answers came back went out, not one per task
    c = first.counts["requests"]
    assert c.dead == 0 and c.done == 0 and c.ready + c.leased == N
    assert NOT_FOUND_TO_STOP <= calls_wrong <= 4 * CONCURRENCY
    assert statuses_wrong == {404}
    assert first.spend["spent_usd"] == 0 and first.spend["unknown_usd"] == 0  # a 404 is not billed
    # `run.py status` names the model and why, from the progress record (not only from a last error)
    assert (f"model gpt stopped: host {host} (POST /chat/completions) answered HTTP 404 (path or model not found) to "
            f"{NOT_FOUND_TO_STOP} requests in a row: its tasks were left queued, re-run to resume once its base_url or "
            "model is fixed") in status_text
    # the same command with the path fixed sends every task, each request key paid once
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"].done == N and second.counts["requests"].dead == 0
    paid = paid_keys(app)
    assert len(paid) == N and set(paid.values()) == {1}


@pytest.mark.parametrize(("style", "status"), [("openai", 404), ("vllm", 404), ("ollama", 404), ("openrouter", 400),
                                               ("litellm", 400)])
def test_a_model_id_the_server_does_not_serve_stops_that_model_only(tmp_path, monkeypatch, style, status):
    # the server serves "served-a" and "served-b"; model b names an id it does not serve
    app = llm_openai.make_app(models=["served-a", "served-b"], unknown_model=style)
    monkeypatch.setenv("NF_KEY", KEY)
    n = 20

    async def main():
        async with serve(app) as base:
            path = _write(tmp_path, _table("a", base, "served-a") + _table("b", base, "no-such-model"), n=n)
            first = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            paid_first = paid_keys(app)
            path.write_text(path.read_text().replace('"no-such-model"', '"served-b"'))
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            return first, paid_first, second

    first, paid_first, second = anyio.run(main)
    assert first.exit_code == EXIT_INCOMPLETE
    text = first.summary()
    assert "model b: host " in text and f"answered HTTP {status} (path or model not found)" in text
    assert "no-such-model" in text  # the body excerpt: the server's own words name the id
    assert "model a:" not in text
    c = first.counts["requests"]
    # model a's work ran to the end; model b's tasks all kept, none dead-lettered
    assert c.dead == 0 and c.done == n and c.ready + c.leased == n
    assert len(paid_first) == n
    refused = [r for r in app["calls"] if r.get("error") == "model_not_found"]
    assert NOT_FOUND_TO_STOP <= len(refused) <= 4 * CONCURRENCY
    # fixed: b's tasks are sent, a's stored answers are not paid again
    assert second.status == "complete" and second.counts["requests"].done == 2 * n
    paid = paid_keys(app)
    assert len(paid) == 2 * n and set(paid.values()) == {1}


@pytest.mark.parametrize(("status", "body", "found"), [
    (404, '{"error": {"message": "Invalid URL (POST /chat/completions)", "type": "invalid_request_error"}}', True),
    (404, '{"detail": "Not Found"}', True),  # a FastAPI server's root without /v1
    (405, '{"detail": "Method Not Allowed"}', True),
    (400, '{"error": {"message": "gpt-4o is not a valid model ID", "code": 400}}', True),
    (400, '{"error": {"message": "/chat/completions: Invalid model name passed in model=x. Call `/v1/models`"}}', True),
    (400, '{"error": {"message": "Model Not Exist", "type": "invalid_request_error"}}', True),
    # a 400 about the request itself, though it names the model: never counted
    (400, '{"error": {"message": "Unsupported value: \'temperature\' does not support 0 with this model."}}', False),
    (400, '{"error": {"message": "Invalid content type. image_url is only supported by certain models."}}', False),
    (400, '{"error": {"message": "This model\'s maximum context length is 8192 tokens."}}', False),
    (400, '{"error": {"message": "Invalid image: the file does not exist or could not be decoded."}}', False),
    (422, '{"detail": [{"msg": "model not found", "input": "..."}]}', False),  # may echo a prompt's words
    (401, '{"error": {"code": "invalid_api_key"}}', False),
    (503, '{"error": "model not found"}', False),  # a 5xx is the host's, retried
])
def test_not_found_answers_are_told_apart_from_a_request_s_own_refusals(status, body, found):
    assert is_not_found_failure(status, body) is found


def test_the_breaker_counts_not_found_in_a_row_per_model_and_an_answer_resets_it():
    b = AuthBreaker(threshold=5, not_found_threshold=3)
    assert b.not_found("a", 404, "h:1 (POST /v1/chat/completions)", "x") is None
    assert b.not_found("a", 404, "h:1", "x") is None
    b.success("a")  # an answer between: the count starts over
    assert b.not_found("a", 404, "h:1", "x") is None
    assert b.not_found("a", 404, "h:1", "x") is None
    # a refused key has its own count, and another model's not-found do not add to a's
    assert b.failure("a", 401, "A_KEY") is None
    assert b.not_found("b", 404, "h:1", "x") is None
    # a model that answered earlier is not stopped by one task's last attempt: that request is dead-lettered
    assert b.not_found("a", 404, "h:1", "x", last_attempt=True) is not None  # but this is the third in a row
    opened = b.is_open("a")
    assert opened is not None and opened.not_found and opened.failures == 3
    assert b.report_lines() == [] and len(b.report_lines(not_found=True)) == 1  # incomplete, not an auth failure
    # a model that never answered in this run stops on a task's last attempt (a re-run still misconfigured) once
    # two tasks met the refusal (one alone may be its own: review40a #3)
    c = AuthBreaker(not_found_threshold=5)
    assert c.not_found("c", 400, "h:2", "x is not a valid model ID", key="t1") is None
    assert c.not_found("c", 400, "h:2", "x is not a valid model ID", last_attempt=True, key="t2") is not None
    d = AuthBreaker(not_found_threshold=5)
    d.success("d")
    assert d.not_found("d", 404, "h:3", "x", last_attempt=True) is None


def test_the_fake_serves_only_the_listed_ids_under_unknown_model_and_refuses_another_style():
    import aiohttp

    with pytest.raises(ValueError, match="unknown_model"):
        llm_openai.make_app(unknown_model="tgi")
    app = llm_openai.make_app(models=["served-a"], unknown_model="openrouter", require_auth=False)

    async def main():
        async with serve(app) as base, aiohttp.ClientSession() as s:
            body = {"model": "other", "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(base + "/v1/chat/completions", json=body) as r:
                refused = (r.status, await r.json())
            async with s.post(base + "/v1/chat/completions", json={**body, "model": "served-a"}) as r:
                served = r.status
            async with s.get(base + "/v1/models/other") as r:
                retrieved = r.status
            return refused, served, retrieved

    refused, served, retrieved = anyio.run(main)
    assert refused == (400, {"error": {"message": "other is not a valid model ID", "code": 400},
                             "user_id": "user_sandbox"})
    assert served == 200 and retrieved == 404
    assert [c["error"] for c in app["calls"]] == ["model_not_found", None]  # refused calls are logged, not billed


def test_one_tasks_own_not_found_on_its_last_attempt_does_not_stop_the_model():
    """review40a #3: a gateway's per-request 404 ("No endpoints found that support image input") on one task's last
    attempt stopped a model that had not answered yet, again in every run (that 404 comes back in milliseconds);
    the last-attempt rule now needs the streak to hold answers to two different tasks."""
    from geoagent.workers.model_caller import AuthBreaker, is_not_found_failure

    b = AuthBreaker()
    assert b.not_found("g", 404, "h", "No endpoints found that support image input", last_attempt=True, key="a") is None
    assert b.not_found("g", 404, "h", "No endpoints found", last_attempt=True, key="a") is None  # the same task again
    assert b.not_found("g", 404, "h", "Invalid URL", last_attempt=True, key="b") is not None  # two tasks: the model
    # a 400 about the request, not the model, is no not-found at all
    assert not is_not_found_failure(400, "this model does not support image inputs; image_url field not found")
    assert not is_not_found_failure(400, "provider error: model gpt-4o: tool not found")
    assert is_not_found_failure(400, 'model "llama9" not found, try pulling it first')


def test_one_tasks_own_retries_never_reach_the_threshold():
    """review40b #3: the threshold (5) equals the default max_attempts, so one task retried alone at the end of a
    run (or after dead --requeue) stopped the model on its own; a quoted Ollama tag with ":" is a model not found."""
    from geoagent.workers.model_caller import AuthBreaker, is_not_found_failure

    b = AuthBreaker()
    b.success("g")
    assert [b.not_found("g", 404, "h", "x", last_attempt=i == 4, key="task-1") for i in range(5)] == [None] * 5
    assert is_not_found_failure(400, 'model "llava:13b" not found, try pulling it first')
    assert is_not_found_failure(400, "the model `llama3.1` does not exist")
