"""Model-caller worker: ``requests`` -> (store, ledger, provider) -> ``responses``.

Issue 2 points 6, 7 and 10. For each task (payload below) the worker:

1. builds the :class:`~geoagent.providers.base.ModelRequest` (model defaults from config, then the payload's
   params) and its request key;
2. loads the image bytes (if any) and hands the request to the provider with a *send gate* as its
   ``before_send`` hook. The HTTP layer awaits the gate once the model's host admitted the request (its
   concurrency slot and rate slot are held), right before the first byte is written. In one database
   job the gate then
3. looks the key up in the store: if a response is stored, the request is abandoned unsent (its host
   slots are given back) and the stored response is emitted (exactly-once spend: a redelivered or re-run
   task never pays twice);
4. otherwise reserves the worst case in the ledger (estimated input tokens x input-estimate factor x input
   price + max output tokens x output price; the input counts the prompt and the ``params.system`` prompt
   at chars / 3 + 16, and the image at max(``image_input_tokens``, what the provider's documented rule bills
   for its size, read from the loaded image's header): :func:`geoagent.config.reserved_input_tokens`) and
   lets the request go. If the cap is only reached because
   of other calls' open reservations, the request is abandoned unsent and the task waits for them to
   settle (they usually cost far less than their worst case), then tries again; the waits of one model are
   first come first served (fifo42: a later call of the model queues behind a waiting one instead of taking
   the room it waits for, :class:`_BudgetLines`); once
   spent + unknown + this worst case exceeds the cap by itself, it raises
   :class:`~geoagent.runtime.stage.BudgetStop` (the runner releases the task and stops dispatching);
5. when the provider answers, stores the response and settles the reservation in ONE transaction and emits.

Before step 2, a paid model's call of a kind (with an image, or without) that has no bill yet in this process waits,
when the run is near its cap, for the kind's first call (a probe) to be billed and settled, so calls in flight cannot
all pass the cap on a reservation that a provider billing above it made too low (money39 #3;
:meth:`geoagent.workers.billing.OverrunGuard.first_bill`, with when it applies). A stored answer does not wait.

Crash safety (issue 2, "Crash safety"; design choice): the reservation is made at send time, not
before the request queues behind the host's rate limit or concurrency cap. After a SIGKILL the ledger's
recovery counts every open reservation of the dead process as unknown-outcome spend; because of the
gate those are only requests that had passed the host's limits, i.e. requests on the wire or within the
last step before it, never the (possibly many) requests still queued behind a slow host. The ledger
stays conservative: the reservation is durable (committed) before the gate returns, so no request can
be sent without one. A crash in the short window between that commit and the request's bytes
reaching the socket (the event loop resuming the task and opening or reusing a connection: microseconds
to milliseconds, longer only when a Retry-After pause began meanwhile) counts a request that was
never sent; that errs on the safe side. Retries keep the reservation made before the first attempt
(which normally reached the server; if it failed before sending, e.g. connection refused, a crash
during the retry backoff counts it too: again the safe side). The alternative, a durable "sent" mark
on a reservation made earlier, would cost a second database round trip before every call; the gate
keeps one lookup-or-reserve job and one store-and-settle job per call (and one store read, below, for a
request that has to wait for its host). Its price: a task whose response is already stored loads its image and
takes a host slot before it learns so (the slot is given back at once, unsent, and uses none of the host's
rate); where it would have to WAIT (for a concurrency or rate slot another request holds, a pause, its
processes' turn), the gate's ``before_wait`` reads the store first (a read, no reservation) and a stored
response answers the task there, instead of after up to one rate period. If the image cannot be loaded, the
gate is passed without sending: a stored response still answers the task, else the reservation is released.
Providers that send nothing over HTTP (replay, offline simulated) get the gate awaited just before
``generate``.

Failures, and what they do to the reservation and the task:

==========================  ==================================  =========================================
provider raised             reservation                         task
==========================  ==================================  =========================================
PermanentHTTPError (4xx)    released (not billed)               ``PermanentFailure`` -> dead letter
404/405, or a 400 "model    released (not billed)               ``CallFailed`` -> nack (retried); once the
not found" (see below)                                           breaker is open ``AuthStop`` -> held, then
                                                                 released untouched
401/403 (auth, see below)   released (not billed)               ``CallFailed`` -> nack (retried); once the
                                                                 breaker is open ``AuthStop`` -> held, then
                                                                 released untouched
RetriesExhausted, the host  released (no attempt may have      ``CallFailed`` -> nack (retried later, an
could not be reached        been billed: ``possibly_billed``     attempt counted; never dead-lettered: on a
(``unreachable``: refused,  0, so nothing was billed)            task's last attempt the host breaker opens);
DNS, connect timeout) and                                        once the model's host breaker is open
nothing possibly billed                                          ``HostStop`` -> held, then released untouched
RetriesExhausted stopped    released (a 429/503 is not billed)  ``CallFailed`` (``paused``) -> nack with
for a Retry-After longer                                         ``backoff_s`` = the pause: redelivered after
than backoff_max_s                                               it, an attempt counted ([queue] max_attempts)
(``paused``)
PausedUnsent (the host      released (nothing sent)             ``Deferred`` -> back to the queue for after
paused, for longer than                                          the pause, no attempt counted (it holds no
backoff_max_s, after the                                         reservation through the pause; the next
gate reserved)                                                   delivery reserves again)
RetriesExhausted (any       released; or unknown-outcome spend  ``Missing`` -> dead letter, reported as
other: a host that answers  if an attempt may have been billed   missing (never a wrong answer)
with errors, or an attempt
that may have been billed)
OutcomeUnknown              unknown-outcome spend               re-raised -> nack, retried (reserves again)
MalformedResponse (2xx)     unknown-outcome spend (or settled   retried (nack)
                            with the usage the API reported)
an answer without a usable  settled at the reservation (the      answered: stored once, emitted (never
usage (``Usage.reported``   worst case), ledger note             asked again); the run's summary warns
False: usage left out,      ``USAGE_NOT_REPORTED``               once per model with the count
null, impossible counts)
ContentBlocked (a withheld   settled with reported usage, else   ``PermanentFailure`` (its reason kept in
answer, a blocked prompt)   at the reservation as usage not     the dead letter)
                            reported (answered with HTTP 200:
                            billed; ``USAGE_NOT_REPORTED``)
ReplayMiss / recorded error released (replay is free)           ``Missing``
UnsupportedRequest (an      none made (raised before            ``PermanentFailure`` -> dead letter
image to o1-mini)           the gate: nothing sent)
cancelled while in flight   unknown-outcome spend               (runner releases the task)
cancelled while queued      none made (or released: not sent)   (runner releases the task)
stop requested before the  none made (or released: not sent)   ``Abandoned`` -> released untouched at
gate passed (queued for a                                        once (no attempt counted); requests
host slot, budget wait)                                          already sent finish in the grace period
RetriesStopped (stop while  as RetriesExhausted                 ``Abandoned`` -> released untouched (no
backing off to retry)                                            further attempt is sent)
cancelled, or any other     released when the HTTP layer        (runner releases / nacks the task)
error, before sending       proves no attempt was sent
                            (``http.never_sent``: e.g. while
                            the connection was opening), else
                            unknown-outcome spend
image file missing/invalid  released (nothing sent)             ``PermanentFailure``
==========================  ==================================  =========================================

Authentication circuit breaker (issue 2, "a wrong API key does not stop the run"): an HTTP 401 or 403
(or Gemini's 400 ``API_KEY_INVALID``, its answer to a wrong key) answered to a model call (so by that model's
own host, ``base_url``: the only host this stage talks to; 403 from other APIs, e.g. a crawl's map services,
is never counted) counts as an authentication failure of that model. A 403 whose body says the INPUT was
flagged by moderation (OpenRouter's "Your chosen model requires moderation and your input was flagged",
``error.metadata.flagged_input`` / ``reasons``; OpenRouter API reference, "Errors"; other gateways' content
policy 403s) is not: it is that request's own permanent failure (dead-lettered with its reason) and leaves
the streak alone (:func:`is_auth_failure`). After :attr:`ModelCaller.auth_failures_to_stop` (default
:data:`AUTH_FAILURES_TO_STOP`) consecutive authentication failures, with no success of that model in
between (or as soon as a task's last attempt fails so while the model has not answered once in the run),
that model's breaker opens (:class:`AuthBreaker`, service :data:`AUTH_BREAKER_SERVICE`; per model, per
process, for the rest of the run). From then on that task and every task of THAT model raise
:class:`AuthStop`, a :class:`~geoagent.runtime.stage.Held`: nothing is sent, no reservation is made, and the
runner holds the task's lease untouched (no attempt counted, never dead-lettered, no spend) without handing
it out again, so nothing spins on it (:mod:`geoagent.runtime.worker`, "Held tasks"); requests of that model
already waiting for a host slot are stopped at the send gate the same way. Every other model's tasks keep
being dispatched to completion. The stage ends when only held tasks remain; the runner then releases them
(ready again, attempts as they were), and the engine ends the run ``authentication failed`` (exit 5) with
one line per refused model, ``authentication failed for model X (HTTP 401): check OPENAI_API_KEY`` (the
variable's NAME, never its value) followed by how many of its requests this process left queued
(:meth:`AuthBreaker.report_lines`). The auth failures seen before the breaker opened are *nacked*
(retryable, one attempt counted), not dead-lettered, so re-running with the right key completes every task
with no ``--requeue``, each request key paid once (the other models' answers are stored); an isolated
401/403 between successes is retried up to ``max_attempts`` and then dead-lettered with its reason as before.

Not-found breaker (walk39 #6; the authentication breaker's own count, :meth:`AuthBreaker.not_found`): a model whose
``base_url`` has a wrong path, or whose ``model`` id its server does not serve (a local vLLM/Ollama server, a
gateway such as OpenRouter or LiteLLM: first-party hosts' paths are checked at config load), is answered the same
refusal on every call: HTTP 404 or 405, or a 400 whose body says the model is unknown (:func:`is_not_found_failure`).
Each used to be dead-lettered at once, one by one, a whole plan burnt into dead letters. Now such an answer
(reservation released: a 4xx is not billed) is nacked like an authentication failure, and after
:attr:`ModelCaller.not_found_to_stop` (default :data:`NOT_FOUND_TO_STOP`, 5) in a row with no answer of that model
in between (an answer resets the count), or on a task's last attempt while the model has not answered once in the
run, the model stops exactly as a refused key stops it: its tasks raise :class:`AuthStop` (held, nothing sent,
released untouched when the stage ends; the nacked ones keep their counted attempt, none is dead-lettered), the
other models run to the end, and the engine ends the run ``incomplete`` (exit 3, not 5: a config to fix, not a
credential) with ``model X: host H (POST /path) answered HTTP 404 (path or model not found) to 5 requests in a row,
none answered: <body excerpt>; check [[models]] base_url (its path) and model ...; N request(s) of model X not sent
(left queued)`` (:meth:`AuthBreaker.report_lines` with ``not_found``). Re-running the same command once the config
is fixed sends them, each request key paid once. Only this stage's calls count, all to the model's own host: a 404
about one item of a data API (a Mapillary image id in a crawl) never reaches it; an isolated not-found between
answers of the model is retried and then dead-lettered with its reason.

Unreachable-host breaker (per host, like the authentication breaker): a call none of whose attempts got
through to its model's host (the HTTP layer's :class:`~geoagent.runtime.http.RetriesExhausted` with
``unreachable`` and ``possibly_billed`` 0: connection refused, DNS failure, connect timeout on every attempt,
e.g. a local vLLM/Ollama server not started or a typo in ``base_url``) billed nothing, so its reservation is
released and the task is NOT dead-lettered as missing. Before the breaker opens it is nacked (retried later,
one queue attempt counted): an isolated failure of a host that otherwise answers is retried like any
transient error, and a campaign whose server comes back within the queue's backoff loses nothing. Once
:attr:`ModelCaller.unreachable_after` (default :data:`geoagent.runtime.worker.UNREACHABLE_AFTER`) requests
in a row to that host failed so, with none reaching it in between
(:meth:`~geoagent.runtime.http.HttpClient.unreachable_streak`, counted per host by the HTTP client, so two
models on one host stop together), or as soon as a task's last attempt fails so (a queue attempt spent on a
host that cannot be reached must never dead-letter the task), the host's breaker opens (:class:`HostBreaker`,
service :data:`HOST_BREAKER_SERVICE`; per process, for the rest of a burst run): every task of every model on that
host raises :class:`HostStop`, a :class:`~geoagent.runtime.stage.Held` (nothing sent, no reservation, no
attempt counted, released untouched when the stage ends), requests of those models waiting for a host slot
are stopped at the send gate, and the other models' tasks run to the end. Held rather than nacked once open:
nacking would spend one queue attempt per task on a host known to be down and dead-letter the whole queue of
that model after ``max_attempts`` rounds (a 100,000-request campaign burning through into dead letters);
held, its tasks stay ready for the re-run, which needs no ``--requeue``. The attempts that the nacked failures of
the streak that opened the breaker cost are then given back (the stage runner's refunds,
:mod:`geoagent.runtime.worker`, "Refunds": the :class:`CallFailed` of each carries ``unreachable_streak``, the
:class:`HostStop` of the failure that opened it ``tripped_streak``), so a re-run while the host is still down finds its tasks with the
attempts they had before the outage. When every model is stopped (host
unreachable or key refused), :meth:`ModelCaller.runnable` turns False and the runner stops leasing at once.
The engine ends the run ``incomplete`` (exit 3) with one line per host (:meth:`HostBreaker.report_lines`):
``model X: host H unreachable (connection refused on 5 consecutive requests); check [[models]] base_url of
'X' / is the server running?; 40 request(s) of model X left queued; re-run the same command to resume``.
The model caller handles this itself instead of leaving it to the stage runner's stage-wide breaker
(:mod:`geoagent.runtime.worker`, "Unreachable hosts"), which would stop every model of the campaign; the
errors it raises hide the HTTP error (``from None``), so the runner's breaker never sees them. A call that
may have been sent (read timeout, connection reset after sending: ``OutcomeUnknown``, or a
``RetriesExhausted`` with ``possibly_billed``) keeps the handling of the table above. Requests already in
their HTTP retries when the breaker opens finish those retries (bounded by the model's ``max_attempts`` and
backoff, or its ``connect_timeout_s`` for a host that does not answer) and are then held too.

That is for burst runs. In watch mode (``run --watch``: the runner tells the stage through
:meth:`~geoagent.runtime.stage.Stage.runner_mode`) the open breaker goes *half-open* with the runner's own
settings (``[queue] watch_probe_after_s`` / ``watch_probe_max_s``; :mod:`geoagent.runtime.worker`, "Unreachable
hosts"), so a model whose server was down for a while resumes without a restart. After the cool-down the model
caller hands ONE held task of that host back to the runner (:meth:`ModelCaller.resumed_holds`: released
untouched, leased again), or the first task of its models to arrive becomes the probe
(:meth:`HostBreaker.try_probe`); it alone passes the open breaker, through the same send gate (store lookup,
reservation) as every call. If its request got through to the host (whatever the host answered), the breaker
closes: every task its models had held is handed back to the queue (ready again, no attempt counted) and leased
again, and ``host H reachable again; model(s) M resumed`` is logged. If it failed unreachable again (nothing
billed, reservation released), it is held again and the breaker re-opens with the cool-down doubled, up to
``watch_probe_max_s``. A probe with no verdict (stopped, answered from the store, never sent) lets the next
task probe at once. Meanwhile the model's tasks stay held (never nacked), the other models go on, and
:meth:`ModelCaller.runnable` stays True (the stage keeps polling); a stop request ends the wait at once (the
runner's lease loop), releasing the held tasks untouched. While a model waits, the progress stream records it at
every tick (:meth:`ModelCaller.host_waits`, :meth:`HostBreaker.waiting`: host, unreachable since, next probe time,
tasks held), so ``status`` from another terminal and the live display say ``model X waiting for host H (next probe
in N s, at ...; unreachable since T: ...; K task(s) held)``, and nothing once the breaker closed.

Payload (``requests`` edge)::

    {"model": "<models[].name>", "prompt": "<rendered text>",
     "image_ref": "<path> | blank:gray | synthetic:<seed> | null", "image_id": "<id> | null",
     "params": {...overrides of the model's defaults...}, "meta": {...carried through, not hashed...}}

Output (``responses`` edge, keyed by the input task key)::

    {"request_key", "model", "provider", "model_id", "image_id", "text", "input_tokens", "output_tokens",
     "latency_s", "finish_reason", "cost_usd", "cached", "meta"}

Services used from the :class:`~geoagent.runtime.stage.StageContext`: ``config`` (CampaignConfig),
``providers`` (model name -> Provider), ``ledger``, ``store``; optional ``image_base_dir``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from geoagent import constants as C
from geoagent.config import image_size_px, output_limit_keys, reservation_usd
from geoagent.providers.base import PLACEHOLDER_PIXELS, ModelRequest, ModelResponse, ProviderError, request_key
from geoagent.runtime.http import (
    OutcomeUnknown,
    PausedUnsent,
    PermanentHTTPError,
    QUOTA_429_MARKERS,
    RetriesExhausted,
    RetriesStopped,
    daily_quota_failure,
    exception_text,
    host_key,
)
from geoagent.runtime.errors import PicklableError
from geoagent.runtime.ledger import BudgetExhausted, with_worst_tokens
from geoagent.runtime.queue import LANE_FIELD, Task
from geoagent.runtime.stage import (Abandoned, BudgetStop, Held, Lane, Message, Missing, PermanentFailure, Stage,
                                    StageContext)
from geoagent.runtime.worker import PAUSED_BY_HOST, PROBE_AFTER_S, PROBE_MAX_S, UNREACHABLE_AFTER
from geoagent.secrets import redact
from geoagent.textfmt import count_text
from geoagent.workers.billing import OverrunGuard, booked_answer, close_failed_call, far_from_cap, worst_case_usage
from geoagent.workers.cutoff_breaker import (CUT_OFF_EMPTY_TO_STOP, CUT_OFF_RECORD, CUTOFF_BREAKER_SERVICE, CutOffBreaker,
                                             CutOffStop, empty_cut_off, request_settings_id)
from geoagent.workers.held import HeldTasks
from geoagent.workers.images import ImageNotFound, load_image, resolve_image_path

log = logging.getLogger(__name__)

EXCERPT_CHARS = 300
#: why a task was given up at a stop request (its request had not passed the send gate)
STOP_NOT_SENT = "stop requested before the request was sent: released unsent"


def provider_kind(m: Any, kinds: Any = None) -> str | None:
    """What answers model ``m`` (:data:`geoagent.constants.PROVIDER_KINDS`), recorded with each stored answer as
    ``request_meta.provider_kind``: ``kinds[m.name]`` (the engine's :data:`~geoagent.constants.SERVICE_PROVIDER_KINDS`,
    from the config as written) where given, else ``"simulated"`` / ``"replay"`` for those providers; None when it
    is not known (another provider without the engine's mapping: a sandbox fake cannot be told from a model server
    by its launched URL), and nothing is recorded. An answer a sandbox fake marked
    (:attr:`geoagent.providers.base.ModelResponse.sandbox`) is recorded ``"simulated"`` whatever this says."""
    if isinstance(kinds, dict) and kinds.get(getattr(m, "name", None)) in C.PROVIDER_KINDS:
        return str(kinds[m.name])
    provider = getattr(m, "provider", None)
    if provider == "simulated":
        return C.PROVIDER_KIND_SIMULATED
    if provider == "replay":
        return C.PROVIDER_KIND_REPLAY
    return None


class CallFailed(RuntimeError):
    """A retryable call failure (outcome unknown, malformed body, host unreachable below its breaker's threshold):
    the runner nacks and retries the task. ``unreachable_streak``: ``(host, streak id)`` when the host could not be
    reached (the runner refunds the attempt if that streak opens the breaker, :mod:`geoagent.runtime.worker`,
    "Refunds"), else None."""

    unreachable_streak: tuple[str, int] | None = None
    #: with ``paused``: seconds the task should wait before its next delivery (a 429/503 ``Retry-After`` longer
    #: than the host's backoff: the stage runner nacks it with that delay, :mod:`geoagent.runtime.worker`)
    retry_after_s: float | None = None
    paused: bool = False
    #: with ``paused``: the last failure's text (``http 429: <body excerpt>``) and the HTTP attempts of this
    #: delivery: what the dead reason says if this was the task's last delivery
    #: (:func:`geoagent.runtime.worker.dead_reason`)
    last_failure: str | None = None
    http_attempts: int | None = None


#: consecutive authentication failures (HTTP 401/403 from a model's host) that stop dispatching to it
AUTH_FAILURES_TO_STOP = 5
#: a model whose provider sends nothing over HTTP (replay, offline simulated) has no host limit to wait on:
#: it counts at least this many toward the model caller's default concurrency
OFFLINE_CONCURRENCY = 64


def lane_cap(concurrency: int) -> int:
    """The most tasks of one model the stage runner hands the model caller at once when a campaign has several
    models (:meth:`ModelCaller.lanes`): its ``concurrency`` plus a lease-ahead of half that (at least 1), so a
    model's next request is ready at its key the moment a slot frees. Unitless count, >= 2."""
    return concurrency + max(1, concurrency // 2)
#: the StageContext service holding the campaign's :class:`AuthBreaker` (the engine reads it at the end)
AUTH_BREAKER_SERVICE = "auth_breaker"
#: the StageContext service holding the campaign's :class:`HostBreaker` (the engine reads it at the end)
HOST_BREAKER_SERVICE = "model_host_breaker"
AUTH_STATUSES = frozenset({401, 403})
#: Gemini answers a wrong key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID (not 401): these body
#: markers make such a 400 an authentication failure too
AUTH_BODY_MARKERS = ("API_KEY_INVALID", "API key not valid")
#: body markers (lower case) of a 403 that refuses the request's CONTENT, not the key: OpenRouter's moderation
#: error ("... requires moderation and your input was flagged", ``error.metadata.flagged_input``/``reasons``)
#: and content-policy refusals of OpenAI-compatible gateways; such a 403 never counts toward the breaker
MODERATION_BODY_MARKERS = ("flagged", "moderation", "content_policy", "content policy")
#: an answer refusing the ACCOUNT for billing, not the request: HTTP 402 (OpenRouter's "insufficient credits",
#: Anthropic's ``billing_error``), and bodies that say so under another status. Retrying never helps
#: (api-notes: OpenAI's 429 ``insufficient_quota``, "Retry only the first [flavour]"; Anthropic's 429
#: ``enforced_spend_limit_reached`` "is not retryable"), and every further call of the model would be refused
#: too, so it stops the model as a refused key does (:class:`AuthBreaker`), never dead-letters its tasks
BILLING_STATUSES = frozenset({402})
BILLING_BODY_MARKERS = (*QUOTA_429_MARKERS, "billing_error", "credit balance is too low")


def is_auth_failure(status: int, body_excerpt: str) -> bool:
    """Whether a model host's error answer means its API key was refused.

    True for 401, for 403 unless its body says the input was flagged by moderation or refused by a content
    policy (:data:`MODERATION_BODY_MARKERS`: OpenRouter API reference, "Errors": 403 "Your chosen model
    requires moderation and your input was flagged", with ``error.metadata.reasons`` and ``flagged_input``;
    that is a permanent failure of that one request), and for Gemini's 400 ``API_KEY_INVALID`` (Gemini API
    reference, "API key not valid").

    Parameters
    ----------
    status : int
        HTTP status of the answer.
    body_excerpt : str
        The start of the answer's body (secrets already scrubbed).
    """
    body = body_excerpt or ""
    if status == 403:
        low = body.lower()
        return not any(m in low for m in MODERATION_BODY_MARKERS)
    return status in AUTH_STATUSES or (status == 400 and any(m in body for m in AUTH_BODY_MARKERS))


def is_billing_failure(status: int, body_excerpt: str) -> bool:
    """Whether a model host's error answer refuses the account for billing (quota or credit used up, a spend
    limit reached): HTTP 402, or a 4xx whose body carries one of :data:`BILLING_BODY_MARKERS` (OpenAI's 429
    ``insufficient_quota``, Anthropic's 429 ``enforced_spend_limit_reached`` and 400 "Your credit balance is too
    low"; api-notes sections 7 and 8), or a 429 naming a Google daily quota
    (:func:`geoagent.runtime.http.daily_quota_failure`). ``body_excerpt``: the start of the answer's body (secrets
    scrubbed)."""
    if status in BILLING_STATUSES:
        return True
    low = (body_excerpt or "").lower()
    # the statuses a provider refuses an account with (not a 422 or 404 that may echo a prompt's words)
    # a Google daily quota whose id the markers miss (GenerateContentInputTokensPerModelPerDay-FreeTier; prov46 #3)
    return status in (400, 403, 429) and (any(m in low for m in BILLING_BODY_MARKERS)
                                          or (status == 429 and daily_quota_failure(body_excerpt or "")))


def credential_refusal(exc: BaseException) -> bool | None:
    """How a model host's answer ``exc`` refused the caller: True for a billing refusal (:func:`is_billing_failure`,
    read on the whole body), False for a refused key (:func:`is_auth_failure`, read on the body's excerpt), None when
    ``exc`` is no :class:`~geoagent.runtime.http.PermanentHTTPError` or neither. The one reading of both the model
    caller's breaker and the crawl auditors' (:class:`geoagent.crawl.llmcall.AuditorBreaker`)."""
    if not isinstance(exc, PermanentHTTPError):
        return None
    if is_billing_failure(exc.status, exc.body or exc.body_excerpt):
        return True
    if is_auth_failure(exc.status, exc.body_excerpt):
        return False
    return None


#: consecutive "not found" answers of one model (:func:`is_not_found_failure`), with no answer of it in between,
#: that stop it (walk39 #6): a wrong ``base_url`` path or model id on a local server or a gateway is answered so on
#: every call, and each used to be dead-lettered one by one, a whole campaign's plan burnt into dead letters
NOT_FOUND_TO_STOP = 5
#: the statuses a model's host answers a path or model it does not serve with: 404, and 405 (a path that exists
#: but takes no POST, e.g. a base_url pointing at a web page)
NOT_FOUND_STATUSES = frozenset({404, 405})
#: what a 400 says when the MODEL id is unknown (lower-cased body): OpenAI's ``model_not_found`` code and
#: "The model `x` does not exist", vLLM's "The model `x` does not exist." (vllm-project/vllm#3485), Ollama's 'model
#: "x" not found, try pulling it first' (netease-youdao/QAnything#555), OpenRouter's 400 "x is not a valid model ID"
#: (OpenRouterTeam/openrouter-examples#74), LiteLLM's 400 "Invalid model name passed in model=x" (BerriAI/litellm#9663)
#: and "There is no 'model_name' with this string" (BerriAI/litellm#8886), DeepSeek's "Model Not Exist". Only a
#: "not found" / "does not exist" NEXT TO the word model counts (within 60 characters, no "." ";" "," ":" between): a
#: 400 about one request ("'temperature' does not support 0 with this model", "image_url is only supported by certain
#: models", "This model does not support image inputs; image_url field not found", "model gpt-4o: tool not found";
#: review40a #3) never does
MODEL_NOT_FOUND_RE = re.compile(
    r"model_not_found|not a valid model|invalid model name|no 'model_name'|unknown model|no such model"
    r"|\bmodels?\b[^.;,:\n]{0,60}?\b(?:does not exist|not exist|not found)\b"
    # a quoted id may hold ":" or "." (Ollama's 'model "llava:13b" not found', "llama3.1": review40b #4)
    r"|\bmodels?\s*[\"'`][^\"'`\n]{1,120}[\"'`]\s*(?:does not exist|not found)")


def is_not_found_failure(status: int, body: str) -> bool:
    """Whether a model host's error answer says the path or the model it was asked for does not exist there (walk39
    #6): HTTP 404 or 405 (:data:`NOT_FOUND_STATUSES`: an unknown path, OpenAI's "Invalid URL (POST
    /chat/completions)", or an unknown model: OpenAI, vLLM, Ollama, Anthropic ``not_found_error``, Gemini
    ``NOT_FOUND``), or a 400 whose body names the model unknown (:data:`MODEL_NOT_FOUND_RE`: OpenRouter,
    LiteLLM). Read only on a MODEL call's answer: every request of the model meets the same refusal, unlike a 404
    about one item of a data API (a Mapillary image id), which never reaches this check. ``body``: the answer's body
    (secrets scrubbed)."""
    if status in NOT_FOUND_STATUSES:
        return True
    # a 400 only: a 422 (FastAPI's validation error) may echo the request, a prompt's words with it
    return status == 400 and MODEL_NOT_FOUND_RE.search((body or "").lower()) is not None


@dataclasses.dataclass(slots=True)
class AuthFailure:
    """The open breaker of one model: its name, the HTTP status that opened it, its key variable's NAME, and
    whether the provider refused the account for billing (:func:`is_billing_failure`) rather than the key, or
    (``not_found``) answered that the path or model does not exist (:func:`is_not_found_failure`; walk39 #6: then
    ``host`` is the model's host key and ``excerpt`` the start of the last answer's body, secrets scrubbed)."""

    model: str
    status: int
    api_key_env: str | None
    failures: int
    billing: bool = False
    not_found: bool = False
    host: str | None = None
    excerpt: str = ""
    #: the campaign's config is recorded on a Redis server (:func:`geoagent.runtime.backend.check_server_config`):
    #: a re-run with a fixed file needs ``--accept-config-change`` (redis41 #2)
    config_on_server: bool = False

    def message(self) -> str:
        """``authentication failed for model X (HTTP 401): check OPENAI_API_KEY`` (never the value), or for a
        billing refusal ``the provider refused model X for billing (HTTP 429): ...``, or for a path or model not
        found ``model X: host H answered HTTP 404 (path or model not found) to 5 requests in a row: ...``."""
        if self.not_found:
            n = "1 request" if self.failures == 1 else f"{self.failures} requests in a row"
            return (f"model {self.model}: host {self.host or '?'} answered HTTP {self.status} ({C.NOT_FOUND_WHAT}) to "
                    f"{n}, none answered: {self.excerpt or '(no body)'}; check [[models]] base_url (its path) and "
                    f"model (the id the server serves: GET <base_url>/models lists them) of '{self.model}', then "
                    f"{self._rerun()}: the requests left queued are sent then")
        if self.billing:
            return (f"the provider refused model {self.model} for billing (HTTP {self.status}: quota or credit used "
                    "up, or a spend limit reached): add credit or raise the limit at the provider, then re-run "
                    "(the key itself was accepted)")
        what = f"check {self.api_key_env}" if self.api_key_env else "check the model's api_key_env and headers"
        return f"authentication failed for model {self.model} (HTTP {self.status}): {what}"

    def _rerun(self) -> str:
        """How to resume once the config is fixed: the same command; on Redis with ``--accept-config-change``,
        since the server refuses a file that differs from the config it records (and another machine's stale file
        must not replace it unasked, so the change is not accepted by itself even for a model that never
        answered)."""
        if not self.config_on_server:
            return "re-run the same command"
        return ("re-run the same command with --accept-config-change (`python run.py run CONFIG "
                "--accept-config-change`: the Redis server records the campaign's config and refuses a changed file "
                "without it; give the other machines the fixed file too)")


class AuthStop(PicklableError, Held):
    """A model's authentication breaker is open: hold the task untouched (nothing sent) while the other
    models' tasks go on; ``model`` names the refused model. Picklable (message and ``model`` travel; the
    message names the key's variable, never its value)."""

    def __init__(self, failure: AuthFailure) -> None:
        super().__init__(failure.message())
        self.model = failure.model


class AuthBreaker(HeldTasks):
    """Per-model count of consecutive refusals of a model's calls by its host; opens at ``threshold`` (in memory, per
    run): a refused key (401/403), a refused account (billing: at once), or (walk39 #6) a path or model its host does
    not serve (:meth:`not_found`, its own count). An open breaker holds the model's tasks (:class:`AuthStop`).

    Parameters
    ----------
    threshold : int
        Consecutive 401/403 answers from a model's host, with no success of that model in between, that
        open its breaker (>= 1).
    not_found_threshold : int
        Consecutive not-found answers (:func:`is_not_found_failure`), with no success in between, that open it
        (>= 1; default :data:`NOT_FOUND_TO_STOP`).
    """

    def __init__(self, threshold: int = AUTH_FAILURES_TO_STOP, not_found_threshold: int = NOT_FOUND_TO_STOP, *,
                 config_on_server: bool = False) -> None:
        self.config_on_server = config_on_server  # :attr:`AuthFailure.config_on_server` of its not-found stops
        self.threshold = max(1, int(threshold))
        self.not_found_threshold = max(1, int(not_found_threshold))
        self._streak: dict[str, int] = {}
        self._nf_streak: dict[str, int] = {}
        self._nf_keys: dict[str, set[str]] = {}  # the task keys behind a model's current not-found streak
        self._answered: set[str] = set()
        self.opened: dict[str, AuthFailure] = {}
        self._held: dict[str, set[str]] = {}

    def is_open(self, model: str) -> AuthFailure | None:
        """The open breaker of ``model``, or None."""
        return self.opened.get(model)

    def success(self, model: str) -> None:
        """A call of ``model`` succeeded: its streaks start over (an open breaker stays open)."""
        self._streak[model] = 0
        self._nf_streak[model] = 0
        self._nf_keys.pop(model, None)
        self._answered.add(model)

    def not_found(self, model: str, status: int, host: str | None, excerpt: str, last_attempt: bool = False,
                  key: str | None = None) -> AuthFailure | None:
        """Count one not-found answer of ``model`` (:func:`is_not_found_failure`: HTTP ``status`` from ``host``, the
        start of its body ``excerpt``, secrets scrubbed); return the model's :class:`AuthFailure` (``not_found``)
        once its breaker is open (walk39 #6).

        Opens at ``not_found_threshold`` such answers in a row with no answer of the model in between, to at least
        two different tasks (one task's own retries are its own failure, review40b #3), or on a
        task's ``last_attempt`` while the model has not answered once in this run and the streak holds answers to
        at least two different tasks (``key``: the task's key; a re-run still pointing at the wrong path must hold
        its tasks, never dead-letter them). One task's own not-found (a gateway's per-request 404, "No endpoints
        found that support image input") on its last attempt is not enough: it came back in milliseconds while the
        other answers took seconds, and stopped the model again in every run (review40a #3). A model that answered
        earlier is not stopped by one task's last attempt either: an isolated not-found between answers is that
        request's own failure, retried and then dead-lettered with its reason."""
        if model in self.opened:
            return self.opened[model]
        n = self._nf_streak[model] = self._nf_streak.get(model, 0) + 1
        keys = self._nf_keys.setdefault(model, set())
        keys.add(key if key is not None else f"#{n}")
        # two different tasks behind the streak in either case: one task's retries alone (5 attempts = the threshold)
        # are that request's own failure (review40b #3)
        if len(keys) >= 2 and (n >= self.not_found_threshold or (last_attempt and model not in self._answered)):
            self.opened[model] = AuthFailure(model, int(status), None, n, not_found=True, host=host, excerpt=excerpt,
                                             config_on_server=self.config_on_server)
            return self.opened[model]
        return None

    def failure(self, model: str, status: int, api_key_env: str | None, last_attempt: bool = False, *,
                billing: bool = False) -> AuthFailure | None:
        """Count one authentication failure; return the model's :class:`AuthFailure` once its breaker is open.

        ``last_attempt``: the failing task has no attempt left. The breaker opens then even below
        ``threshold`` (a campaign with fewer failing attempts than the threshold, e.g. one task and
        ``max_attempts`` 2, or a key revoked mid-run with few tasks left, would otherwise dead-letter its tasks
        for a refused key): a task whose last attempt is refused is held, never dead-lettered, also when the
        model answered earlier in the run. ``billing``: the answer refused the account for billing
        (:func:`is_billing_failure`); the breaker's message then says so instead of naming the key.
        """
        if model in self.opened:
            return self.opened[model]
        n = self._streak.get(model, 0) + 1
        self._streak[model] = n
        if n >= self.threshold or last_attempt or billing:  # a billing refusal is the account's: at the first one
            self.opened[model] = AuthFailure(model, int(status), api_key_env, n, billing=billing)
            return self.opened[model]
        return None

    def not_found_stops(self) -> list[dict[str, Any]]:
        """One record per model stopped because its host does not serve its path or model id (order opened; walk39
        #6), for the progress stream and ``status`` (:meth:`ModelCaller.not_found_holds`)::

            {"model": "b", "status": 404, "host": "127.0.0.1:8001 (POST /chat/completions)", "failures": 5,
             "excerpt": "{\"error\": ...}", "held": 35}

        ``held``: tasks of the model this process holds unsent. Cheap: called once per progress tick."""
        return [{"model": f.model, "status": f.status, "host": f.host, "failures": f.failures, "excerpt": f.excerpt,
                 "held": self.held(f.model)} for f in self.opened.values() if f.not_found]

    def messages(self) -> list[str]:
        """One line per open breaker, in the order they opened."""
        return [f.message() for f in self.opened.values()]

    def report_lines(self, left_queued: int | None = None, *, not_found: bool = False) -> list[str]:
        """One line per open breaker (order opened) of the refusals of one group: refused keys and accounts
        (default; the run ends ``authentication failed``), or with ``not_found`` the paths or models not found
        (walk39 #6; the run ends ``incomplete``): its :meth:`AuthFailure.message` and the work of that model this
        process left queued, e.g. ``...: check OPENAI_API_KEY; 40 request(s) of model gpt not sent (left
        queued)``.

        ``left_queued``: the model caller stopped leasing because every model was stopped
        (:meth:`ModelCaller.runnable`), so the held counts cover only what it had leased; the lines then name
        the models and the last one says how many requests were left in the queue (all of them the stopped
        models', since no other model remains)."""
        opened = [f for f in self.opened.values() if f.not_found == not_found]
        if left_queued is None:
            return [f"{f.message()}; {self.held(f.model)} request(s) of model {f.model} not sent (left queued)"
                    for f in opened]
        lines = [f.message() for f in opened]
        if lines:
            what = ("no model can run any more" if not_found else
                    "every model was refused (its key, or its account for billing)"
                    if any(f.billing for f in opened) else "every model's key was refused")
            lines[-1] += f"; {what}, so dispatching stopped: {left_queued} request(s) left queued"
        return lines


@dataclasses.dataclass(slots=True)
class HostDown:
    """The open unreachable-host breaker of one host: the host key (``"hostname:port"`` or ``"hostname"``),
    the requests in a row that could not reach it, the last failure's text, the models that use it."""

    host: str
    streak: int
    last: str
    models: list[str]
    #: when the breaker opened (Unix time, s): the host has been unreachable since then
    since: float = dataclasses.field(default_factory=time.time)
    #: every model on the host has no ``base_url``: the host is its provider's own public API, so the check is
    #: this machine's network access to it, not a server of one's own (newuser41 #C)
    public: bool = False

    def cause(self) -> str:
        """``connection refused on 5 consecutive requests`` (:func:`geoagent.runtime.worker.unreachable_cause`)."""
        from geoagent.runtime.worker import unreachable_cause

        n = self.streak
        return f"{unreachable_cause(self.last)} " + ("on 1 request" if n == 1 else f"on {n} consecutive requests")

    def message(self) -> str:
        """``model X: host H unreachable (connection refused on 5 consecutive requests); check [[models]]
        base_url of 'X' / is the server running?`` (several models on the host: ``models X, Y: ...``); for a
        provider's own public API (:attr:`public`: no ``base_url`` was set, so there is no server of one's own to
        start): ``...; check network / DNS / proxy access to api.openai.com ('X' has no [[models]] base_url: it
        calls its provider's own API)``."""
        names = ", ".join(self.models)
        which = "model" if len(self.models) == 1 else "models"
        quoted = ", ".join(repr(m) for m in self.models)
        head = f"{which} {names}: host {self.host} unreachable ({self.cause()}); "
        if self.public:
            return head + public_host_hint(self.host, self.models)
        return head + f"check [[models]] base_url of {quoted} / is the server running?"


def public_host_hint(host: str, models: list[str]) -> str:
    """What to check when ``host`` (a host key), the provider's own API that ``models`` (none of which sets
    ``base_url``) call, cannot be reached: this machine's way out to it, since there is no server of one's own
    whose URL or state could be wrong (newuser41 #C)."""
    quoted = ", ".join(repr(m) for m in models)
    return (f"check network / DNS / proxy access to {host} ({quoted} {'has' if len(models) == 1 else 'have'} no "
            "[[models]] base_url: it calls its provider's own API)")


class HostStop(PicklableError, Held):
    """The unreachable-host breaker of a model's host is open: hold the task untouched (nothing sent) while
    the other models' tasks go on; ``model`` names the model, ``host`` its host. Picklable (the attributes
    travel, :class:`~geoagent.runtime.errors.PicklableError`)."""

    def __init__(self, down: HostDown, model: str) -> None:
        super().__init__(f"{down.message()}; its requests are held unsent")
        self.model = model
        self.host = down.host
        #: ``(host, streak id)`` when this failure's unreachable streak opened (or found open) the breaker: the
        #: stage runner refunds the queue attempts that streak's nacks charged (:mod:`geoagent.runtime.worker`,
        #: "Refunds"); None for a task held without trying (breaker already open)
        self.tripped_streak: tuple[str, int] | None = None


class HostBreaker(HeldTasks):
    """Per-host unreachable breaker of the model caller (module docstring, "Unreachable-host breaker"; in memory,
    per process: open for the rest of a burst run, half-open in watch mode, :meth:`configure`). The streak itself is the HTTP client's (:meth:`~geoagent.runtime.http.HttpClient.unreachable_streak`,
    carried on each error as ``streak``); this keeps which hosts opened, which model uses which host and what
    each open host's models left queued.

    Parameters
    ----------
    threshold : int
        Requests in a row that could not reach a host (each after the HTTP layer's own retries) that open its
        breaker (>= 1).
    """

    def __init__(self, threshold: int = UNREACHABLE_AFTER) -> None:
        self.threshold = max(1, int(threshold))
        self._host_of: dict[str, str] = {}
        self._public: set[str] = set()  # models without base_url: they call their provider's own API
        self.opened: dict[str, HostDown] = {}
        self._held: dict[str, set[str]] = {}
        # watch mode (half-open; module docstring): settings, and per open host its cool-down (s), the
        # ``time.monotonic()`` of its next probe, the task key of its probe in flight, when a held task was last
        # handed back to become the probe; task keys the runner is to release (resumed_holds)
        self.watch = False
        self.probe_after_s = PROBE_AFTER_S
        self.probe_max_s = PROBE_MAX_S
        self._cooldown_s: dict[str, float] = {}
        self.next_probe_at: dict[str, float] = {}
        self._probing: dict[str, str] = {}
        self._asked_at: dict[str, float] = {}
        self._resumed: list[str] = []

    def configure(self, *, watch: bool, probe_after_s: float = PROBE_AFTER_S, probe_max_s: float = PROBE_MAX_S) -> None:
        """Watch mode (``watch``, the runner's ``burst=False``): an open breaker goes half-open after
        ``probe_after_s`` s, doubling after each failed probe up to ``probe_max_s`` s (module docstring,
        "Unreachable-host breaker"). Burst runs (``watch`` False) keep it open for the rest of the run.

        Raises
        ------
        ValueError
            Unless 0 <= ``probe_after_s`` <= ``probe_max_s``.
        """
        if not (probe_after_s >= 0 and probe_max_s >= probe_after_s):
            raise ValueError(f"need 0 <= probe_after_s <= probe_max_s, got {probe_after_s!r}, {probe_max_s!r}")
        self.watch = bool(watch)
        self.probe_after_s, self.probe_max_s = float(probe_after_s), float(probe_max_s)

    def set_host(self, model: str, host: str | None, *, public: bool = False) -> None:
        """Record that ``model`` sends its requests to ``host`` (a :func:`~geoagent.runtime.http.host_key`;
        None: it sends nothing over HTTP); ``public``: the model has no ``base_url``, so ``host`` is its provider's
        own API (the unreachable message then names network access, not a server to start:
        :attr:`HostDown.public`)."""
        if host:
            self._host_of[model] = host
        else:
            self._host_of.pop(model, None)
        if public:
            self._public.add(model)
        else:
            self._public.discard(model)

    def is_public(self, models: list[str]) -> bool:
        """Whether every one of ``models`` calls its provider's own API (no ``base_url``; :meth:`set_host`)."""
        return bool(models) and all(m in self._public for m in models)

    def host_of(self, model: str) -> str | None:
        """The host ``model`` sends its requests to, when known."""
        return self._host_of.get(model)

    def is_open(self, model: str) -> HostDown | None:
        """The open breaker of ``model``'s host, or None."""
        host = self._host_of.get(model)
        return self.opened.get(host) if host is not None else None

    def failure(self, model: str, host: str, streak: int, last: str, last_attempt: bool = False) -> HostDown | None:
        """A call of ``model`` could not reach ``host`` (nothing billed); return the host's :class:`HostDown`
        once its breaker is open.

        ``streak``: the request's place in the host's run of unreachable requests (the HTTP client's count,
        every model on the host together). The breaker opens at ``threshold``, or at once when the failing
        task has no queue attempt left (``last_attempt``), so no task is dead-lettered for a host that
        cannot be reached."""
        if host and self._host_of.get(model) != host:
            self._host_of[model] = host  # the error names the host the request really went to
        down = self.opened.get(host)
        if down is not None:
            return down
        if int(streak) >= self.threshold or last_attempt:
            models = [m for m, h in self._host_of.items() if h == host]
            models = models or [model]
            down = self.opened[host] = HostDown(host, max(1, int(streak)), str(last or ""), models,
                                                public=self.is_public(models))
            if self.watch:
                self._cooldown_s[host] = self.probe_after_s
                self.next_probe_at[host] = time.monotonic() + self.probe_after_s
                log.warning("%s; its requests are held, next probe in %g s", down.message(), self.probe_after_s)
            return down
        return None

    def try_probe(self, model: str, task_key: str) -> bool:
        """Watch mode: whether task ``task_key`` of ``model`` is to be sent as the half-open probe of its open host
        (the cool-down is over and no probe is in flight); it then is the probe until :meth:`probe_done`. Always
        False in a burst run or when the host's breaker is closed."""
        host = self._host_of.get(model)
        if not self.watch or host is None or host not in self.opened or host in self._probing:
            return False
        if time.monotonic() < self.next_probe_at.get(host, 0.0):
            return False
        self._probing[host] = task_key
        return True

    def probe_done(self, model: str, reached: bool | None, streak: int = 0, last: str = "") -> None:
        """The half-open probe of ``model``'s host ended. ``reached`` True (the request got through to the host,
        whatever it answered): the breaker closes, every task its models had held is handed back
        (:meth:`resumed`) and ``host H reachable again; model(s) M resumed`` is logged. False (unreachable again,
        nothing billed): it re-opens with the cool-down doubled, up to ``probe_max_s`` (``streak``, ``last``:
        the failure, for the report line). None (no verdict: stopped, answered from the store, not sent): the
        next task of the host may probe at once."""
        host = self._host_of.get(model)
        if host is None or host not in self.opened:
            return
        self._probing.pop(host, None)
        self._asked_at.pop(host, None)
        if reached is None:
            return
        if reached:
            down = self.opened.pop(host)
            self._cooldown_s.pop(host, None)
            self.next_probe_at.pop(host, None)
            for m in down.models:
                self._resumed.extend(self._held.pop(m, ()))
            log.warning("host %s reachable again; model(s) %s resumed", host, ", ".join(down.models))
            return
        down = self.opened[host]
        if streak:
            down.streak = max(1, int(streak))
        if last:
            down.last = str(last)
        cooldown = self._cooldown_s[host] = min(self.probe_max_s, self._cooldown_s.get(host, self.probe_after_s) * 2)
        self.next_probe_at[host] = time.monotonic() + cooldown
        log.warning("host %s still unreachable (%s); model(s) %s wait, next probe in %g s", host, down.cause(),
                    ", ".join(down.models), cooldown)

    def resumed(self) -> list[str]:
        """Task keys to hand back to the queue now (and forget): every held task of a host whose probe got
        through, and, for each open host whose cool-down is over with no probe in flight, one held task to probe
        it (handed back again after another cool-down if it never came: e.g. its lease went elsewhere).
        Watch mode only; cheap (called before every lease)."""
        out, self._resumed = self._resumed, []
        if not self.watch or not self.opened:
            return out
        now = time.monotonic()
        for host in self.opened:
            if host in self._probing or now < self.next_probe_at.get(host, 0.0):
                continue
            if now - self._asked_at.get(host, -math.inf) < max(self._cooldown_s.get(host, 0.0), 1.0):
                continue
            for m in self.opened[host].models:
                keys = self._held.get(m)
                if keys:
                    out.append(keys.pop())
                    self._asked_at[host] = now
                    break
        return out

    def waiting(self) -> list[dict[str, Any]]:
        """Watch mode: one record per model that waits for its open host (order opened; ``[]`` in a burst run or
        when every host is reachable), for the progress stream and ``status`` (:meth:`ModelCaller.host_waits`)::

            {"model": "dead", "host": "127.0.0.1:8001", "since": 1764566401.2, "next_probe_at": 1764566431.2,
             "probing": false, "held": 40, "cause": "connection refused on 5 consecutive requests"}

        ``since``: when the breaker opened, ``next_probe_at``: when the next half-open probe is due (both Unix
        time, s; the probe's time is converted from ``time.monotonic()`` now); ``probing``: a probe is in flight
        (then ``next_probe_at`` is in the past); ``held``: tasks of the model this process holds (:meth:`held`;
        the probe in flight is not among them); ``cause``: why, in words (:meth:`HostDown.cause`; no error text is
        copied). Cheap (a few dict reads per open host): called once per progress
        tick, never on a task's path."""
        if not self.watch or not self.opened:
            return []
        wall, mono = time.time(), time.monotonic()
        out = []
        for host, down in self.opened.items():
            at = wall + (self.next_probe_at.get(host, mono) - mono)
            for m in down.models:
                out.append({"model": m, "host": host, "since": round(down.since, 3), "next_probe_at": round(at, 3),
                            "probing": host in self._probing, "held": self.held(m), "cause": down.cause()})
        return out

    def holding(self) -> list[dict[str, Any]]:
        """A burst run (no watch mode): one record per model of each open host (order opened; ``[]`` in watch
        mode, where :meth:`waiting` reports them, or when every host is reachable), for the progress stream and
        ``status`` (:meth:`ModelCaller.host_holds`)::

            {"model": "dead", "host": "127.0.0.1:8001", "since": 1764566401.2, "held": 40,
             "cause": "connection refused on 5 consecutive requests"}

        ``since``: when the breaker opened (Unix time, s); ``held``: tasks of the model this process holds unsent
        (:meth:`held`), left queued at the run's end; ``cause``: why, in words (:meth:`HostDown.cause`; no error
        text is copied). The held models are data here, not words read back out of a ``HostStop`` message, so
        ``status`` names them however many later errors pushed that message out of a stage's last errors.
        Cheap: called once per progress tick, never on a task's path."""
        if self.watch or not self.opened:
            return []
        return [{"model": m, "host": host, "since": round(down.since, 3), "held": self.held(m), "cause": down.cause()}
                for host, down in self.opened.items() for m in down.models]

    def report_lines(self, left_queued: int | None = None) -> list[str]:
        """One line per open host (order opened): :meth:`HostDown.message`, the work of its models this process
        left queued, and that a re-run resumes, e.g. ``model X: host H unreachable (connection refused on 5
        consecutive requests); check [[models]] base_url of 'X' / is the server running?; 40 request(s) of
        model X left queued; re-run the same command to resume``.

        ``left_queued``: the model caller stopped leasing because no model could run any more
        (:meth:`ModelCaller.runnable`), so the held counts cover only what it had leased; the last line then
        says how many requests were left in the queue instead."""
        lines = []
        for down in self.opened.values():
            left = ", ".join(f"{self.held(m)} request(s) of model {m}" if i == 0 else f"{self.held(m)} of model {m}"
                             for i, m in enumerate(down.models))
            lines.append(f"{down.message()}; {left} left queued")
        if lines and left_queued is not None:
            lines = [ln.rsplit("; ", 1)[0] for ln in lines]
            lines[-1] += f"; no model can run any more, so dispatching stopped: {left_queued} request(s) left queued"
        return [ln + "; re-run the same command to resume" for ln in lines]


class _Unreachable(PicklableError, Exception):
    """A model call could not reach its host on any attempt and nothing was billed (reservation released);
    ``handle`` asks the host breaker what next. Picklable, as the other errors of this module."""

    def __init__(self, host: str, streak: int, last: str, attempts: int, streak_id: int = 0) -> None:
        super().__init__(f"host {host} unreachable after {count_text(attempts, 'attempt')}: {last}")
        self.host = host
        self.streak = streak
        self.last = last
        self.attempts = attempts
        self.streak_id = streak_id  # RetriesExhausted.streak_id: which run of unreachable requests


class _NotSent(PicklableError, Exception):
    """Raised by a :class:`_SendGate` to abandon a request unsent: ``cached`` (the stored response),
    ``refusal`` (the ledger's :class:`BudgetExhausted`), ``elsewhere`` (the same request key is in
    flight in another process of the campaign) or ``queued`` (an earlier call of the model waits for room
    under the cap: :class:`_BudgetLines`) is set. Picklable: the four attributes travel as set
    (re-running ``__init__`` with the message put it in ``cached``)."""

    def __init__(self, cached: ModelResponse | None = None, refusal: BudgetExhausted | None = None,
                 elsewhere: bool = False, queued: bool = False) -> None:
        super().__init__("stored response found" if cached is not None else
                         "in flight in another process" if elsewhere else
                         "queued behind a budget wait" if queued else "reservation refused")
        self.cached = cached
        self.refusal = refusal
        self.elsewhere = elsewhere
        self.queued = queued


#: what the gate's database job returns when another live process holds an open reservation for the key
_ELSEWHERE = object()


class _AuthFailed(PicklableError, Exception):
    """A model call answered 401/403, or refused the account for billing (``billing``; reservation already
    closed); ``handle`` asks the breaker what next. Picklable: ``status``, ``reason`` and ``billing`` travel."""

    def __init__(self, status: int, reason: str, billing: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.billing = billing


class _NotFound(PicklableError, Exception):
    """A model call was answered that its path or model does not exist (:func:`is_not_found_failure`; reservation
    already released: a 4xx is not billed); ``handle`` asks the breaker what next (walk39 #6). ``where``: the host
    and path asked (``127.0.0.1:8001 POST /chat/completions``), ``excerpt``: the body's start, secrets scrubbed.
    Picklable: the four attributes travel."""

    def __init__(self, status: int, reason: str, host: str | None = None, excerpt: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.host = host
        self.excerpt = excerpt


def _excerpt(text: str) -> str:
    text = redact(text)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def _asked(url: str) -> str | None:
    """``host:port POST /path`` of a model call's ``url`` (no query: it may hold a key; secrets scrubbed), for a
    not-found stop's message; None when ``url`` has no host."""
    from urllib.parse import urlsplit

    host = host_key(url) if url else None
    return redact(f"{host} (POST {urlsplit(url).path or '/'})") if host else None


def _settings_id(request: ModelRequest) -> str:
    """:func:`geoagent.workers.cutoff_breaker.request_settings_id` of ``request`` (its provider, model id and
    params), for the empty-answer breaker's record across runs."""
    return request_settings_id(request.provider, request.model, request.params)


def build_request(cfg: Any, payload: dict[str, Any]) -> tuple[Any, ModelRequest]:
    """The model config and the :class:`ModelRequest` (without pixels) for a ``requests`` payload.

    Params are the model's defaults overridden by the payload's; the image id is the payload's
    ``image_id``, else the ``image_ref`` itself for ``blank:``/``synthetic:`` refs, else the file name
    stem. A payload with an ``image_id`` but no ``image_ref`` is sent with deterministic placeholder pixels
    (:func:`geoagent.workers.images.load_image`; its photo had no file when it was planned,
    :mod:`geoagent.image_files`): its request gets ``pixel_source`` = ``"placeholder"``, which enters its key,
    so it never shares a key (a stored answer) with the same request sent with the photo; a request with a
    photo, a text-only one and a replay model's (which sends no pixels) keep the key they always had. The
    request key depends only on the payload, so planners, the dry-run estimate and this worker agree.

    Raises
    ------
    PermanentFailure
        Unknown model name, or no prompt text.
    """
    model_name = payload.get("model")
    try:
        m = cfg.model(model_name)
    except KeyError as exc:
        raise PermanentFailure(f"unknown model {model_name!r}: {exc}") from None
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise PermanentFailure("payload has no prompt text")
    params = {**m.default_params(), **(payload.get("params") or {})}
    image_ref = payload.get("image_ref")
    image_id = payload.get("image_id")
    if image_id is None and image_ref:
        # the key hashes the image id, so fix it before building the request (never from the bytes)
        is_generated = image_ref.startswith(("blank:", "synthetic:"))
        image_id = image_ref if is_generated else resolve_image_path(image_ref).stem
    # no file behind the image id: the caller attaches placeholder pixels (a replay model sends none at all)
    placeholder = not image_ref and image_id is not None and m.provider != "replay"
    request = ModelRequest(
        provider=m.provider,
        model=m.model,
        prompt=prompt,
        image_id=None if image_id is None else str(image_id),
        params=params,
        meta=dict(payload.get("meta") or {}),
        pixel_source=PLACEHOLDER_PIXELS if placeholder else None,
    )
    return m, request


def _rate_limits(cfg: Any, models: list[Any], providers: Mapping[str, Any]
                 ) -> tuple[float | None, dict[str, float]]:
    """The models' configured rate limits as calls per second: ``(stage ceiling, {model: its own ceiling})``.

    A model's own ceiling is the rate its limit key is paced by (:func:`geoagent.config.model_time_limit`; a model
    with no limit of its own, on a host with a ``[hosts]`` entry, is paced by the host's key and rate, review37b #1);
    the stage's is the sum over distinct keys, a host's keys together at most its ``[hosts]`` ceiling, or None when a
    model is not sent over HTTP (answered offline: no limit paces it) or there is none. Only HTTP models get an own
    ceiling. Source: :meth:`ModelCaller.rate_ceiling_per_s`, :meth:`ModelCaller.lane_ceilings`."""
    from geoagent.config import model_limit_key, model_limits, model_time_limit

    if not models or cfg is None:
        return None, {}
    try:
        own_keys = set(model_limits(cfg))
    except (AttributeError, TypeError, ValueError):
        return None, {}
    per_key: dict[str, tuple[str, float, Any]] = {}
    per_model: dict[str, float] = {}
    offline = False
    for m in models:
        host = _model_host(m, providers.get(m.name))
        if host is None:
            offline = True  # answered in this process (or replayed): no rate limit paces it
            continue
        try:
            req, per, _conc, ceiling = model_time_limit(cfg, m)
        except (AttributeError, TypeError, ValueError):
            return None, {}
        rate = req / per if per > 0 else math.inf
        key = model_limit_key(m)
        if key not in own_keys:  # paced by its host's [hosts] entry alone: the host's one key and rate
            key, ceiling = f"host:{host}", None
        per_model[m.name] = rate
        if key not in per_key or rate < per_key[key][1]:
            per_key[key] = (host, rate, ceiling)
    by_host: dict[str, float] = {}
    caps: dict[str, float] = {}
    for host, rate, ceiling in per_key.values():
        by_host[host] = by_host.get(host, 0.0) + rate
        if ceiling is not None and getattr(ceiling, "period_s", 0) > 0:
            caps[host] = ceiling.rate / ceiling.period_s
    total = sum(min(r, caps.get(h, math.inf)) for h, r in by_host.items())
    stage = None if offline or not (math.isfinite(total) and total > 0) else total
    return stage, {k: v for k, v in per_model.items() if math.isfinite(v) and v > 0}


def _model_host(m: Any, provider: Any) -> str | None:
    """The host key (:func:`~geoagent.runtime.http.host_key`) ``provider`` sends ``m``'s requests to, or None
    for a provider that sends nothing over HTTP (replay, offline simulated)."""
    if provider is None or not getattr(provider, "supports_before_send", False):
        return None
    url = getattr(provider, "base_url", None) or getattr(m, "base_url", None)
    return host_key(url) if isinstance(url, str) and url else None


def _worst_usd(m: Any, request: ModelRequest, has_image: bool, size_px: tuple[int, int] | None, factor: float) -> float:
    """The reservation of one call (USD): :func:`geoagent.config.reservation_usd` (the rule the crawl's metered
    calls and the dry run share): :func:`geoagent.config.reserved_input_tokens` (prompt + system prompt, the
    image at max(``image_input_tokens``, its documented bill for ``size_px``)) x ``factor`` at the input price,
    plus the request's max output tokens at the output price."""
    return reservation_usd(m, request.prompt, request.params, request.max_output_tokens, input_estimate_factor=factor,
                           has_image=has_image, size_px=size_px)


def _worst_tokens(m: Any, request: ModelRequest, has_image: bool, size_px: tuple[int, int] | None,
                  factor: float) -> tuple[int, int]:
    """The worst-case (input, output) token counts :func:`_worst_usd` prices (as :func:`booked_answer` books an
    answer without usage: :func:`geoagent.workers.billing.worst_case_usage`)."""
    u = worst_case_usage(m, request, input_estimate_factor=factor, has_image=has_image, size_px=size_px)
    return u.input_tokens, u.output_tokens


async def _lookup_or_reserve(store: Any, ledger: Any, key: str, worst_usd: float, model_name: str) -> tuple[Any, Any]:
    """On the database thread: the stored response for ``key``, else a new reservation (or the refusal).

    Returns ``(response, None)``, ``(None, Reservation)``, ``(None, BudgetExhausted)``, or
    ``(None, _ELSEWHERE)`` when another process of the campaign holds an open reservation for the same
    key (its lease of the task expired and the task was redelivered here while its call is still in
    flight: sending now would pay twice). If the caller is cancelled meanwhile, a reservation made for it
    is released (nothing was sent).
    """

    def job() -> tuple[Any, Any]:
        guarded = getattr(ledger, "reserve_guarded", None)
        if guarded is not None:  # the three checks in one atomic step (Redis: no transaction spans them)
            try:
                got = guarded(key, worst_usd, model=model_name)
            except BudgetExhausted as exc:
                return None, exc
            if got == "elsewhere":
                return None, _ELSEWHERE
            if got == "stored":  # stored responses are never removed
                return store.get(key), None
            return None, got
        cached = store.get(key)
        if cached is not None:
            return cached, None
        if ledger.open_elsewhere(key):
            return None, _ELSEWHERE
        try:
            return None, ledger.reserve(key, worst_usd, model=model_name)
        except BudgetExhausted as exc:
            return None, exc

    fut = ledger.db.submit_async(job)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:

        def _undo(f: Any) -> None:
            if not f.cancelled() and f.exception() is None:
                res = f.result()[1]
                if res is not None and res is not _ELSEWHERE and not isinstance(res, BudgetExhausted):
                    ledger.db.submit(ledger.release, res)

        fut.add_done_callback(_undo)
        raise


class _SendGate:
    """The ``before_send`` hook of one model call: store lookup, else reservation, at send time.

    Awaited by the HTTP layer after the host admitted the request (see the module docstring, "Crash
    safety"), or by the model caller just before ``generate`` for providers that do not call it. Runs
    :func:`_lookup_or_reserve` (one database job, committed before it returns) and raises
    :class:`_NotSent` when the store already holds the response or the ledger refuses the reservation;
    otherwise keeps the reservation in ``reservation`` and lets the request go. Awaiting it again after
    it passed does nothing. Cancelled while waiting for the database job: a reservation made for it is
    released (nothing was sent).

    Parameters
    ----------
    store, ledger
        The campaign's response store and ledger.
    key : str
        The request key.
    worst_usd : float
        Worst-case cost of the call (USD).
    model_name : str
        The ``[[models]]`` name recorded with the reservation.
    breaker : AuthBreaker, optional
        When the model's breaker is open, the gate raises :class:`AuthStop` instead (nothing sent).
    hosts : HostBreaker, optional
        When the breaker of the model's host is open, the gate raises :class:`HostStop` instead (nothing sent).
    cutoff : CutOffBreaker, optional
        When the model's empty-answer breaker is open, the gate raises
        :class:`~geoagent.workers.cutoff_breaker.CutOffStop` instead (nothing sent).
    stopping : callable, optional
        Returns True once a stop was requested: the gate then raises
        :class:`~geoagent.runtime.stage.Abandoned` (nothing sent, no reservation; the task is released).
    tokens : (int, int), optional
        The worst-case (input, output) token counts ``worst_usd`` was priced from: kept with the reservation
        (:func:`geoagent.runtime.ledger.with_worst_tokens`) for a withheld answer's booking.
    lines : _BudgetLines, optional
        The model caller's budget-wait lines: while an earlier call of the model waits for room under the cap and
        this gate does not head its line, the gate reserves nothing and raises :class:`_NotSent` ``queued`` (a
        stored response still answers it); once it reserved, it leaves the line (fifo42).
    """

    __slots__ = ("_args", "reservation", "breaker", "stopping", "hosts", "tokens", "cutoff", "lines", "in_line")

    #: the HTTP layer raises :class:`~geoagent.runtime.http.PausedUnsent` (nothing sent) instead of waiting out a
    #: host pause longer than the call's backoff that arrives after this gate reserved: the reservation is released
    #: and the task comes back after the pause (module table), not held open through it
    defer_long_pause = True

    def __init__(self, store: Any, ledger: Any, key: str, worst_usd: float, model_name: str,
                 breaker: "AuthBreaker | None" = None, stopping: Any = None, hosts: "HostBreaker | None" = None,
                 tokens: tuple[int, int] | None = None, cutoff: CutOffBreaker | None = None,
                 lines: "_BudgetLines | None" = None) -> None:
        self._args = (store, ledger, key, worst_usd, model_name)
        self.lines = lines
        self.in_line = False  # in its model's budget-wait line (_BudgetLines.join / leave)
        self.tokens = tokens
        self.cutoff = cutoff
        self.reservation: Any = None
        self.breaker = breaker
        self.stopping = stopping
        self.hosts = hosts

    async def __call__(self) -> None:
        if self.reservation is not None:
            return
        if self.stopping is not None and self.stopping():
            raise Abandoned(STOP_NOT_SENT)
        # a request that waited for a host slot while its model's breaker opened is not sent at all
        opened = self.breaker.is_open(self._args[4]) if self.breaker is not None else None
        if opened is not None:
            raise AuthStop(opened)
        down = self.hosts.is_open(self._args[4]) if self.hosts is not None else None
        if down is not None:
            raise HostStop(down, self._args[4])
        cut = self.cutoff.is_open(self._args[4]) if self.cutoff is not None else None
        if cut is not None:
            raise CutOffStop(cut)
        if self.lines is not None and self.lines.must_queue(self._args[4], self):
            # fifo42: an earlier call of this model waits for room under the cap; this one queues behind it rather
            # than take that room. A read only: a stored response still answers the task at once
            cached = await self._args[0].aget(self._args[2])
            raise _NotSent(cached=cached) if cached is not None else _NotSent(queued=True)
        cached, reservation = await _lookup_or_reserve(*self._args)
        if cached is not None:
            raise _NotSent(cached=cached)
        if isinstance(reservation, BudgetExhausted):
            raise _NotSent(refusal=reservation)
        if reservation is _ELSEWHERE:
            raise _NotSent(elsewhere=True)
        if self.stopping is not None and self.stopping():
            # The stop came while the database job ran, after it had finished but before this coroutine
            # resumed: stop_requested() found no reservation and cancelled this call's scope, and anyio
            # delivers that cancellation again at every later await inside the scope, so a request sent now
            # would be cut in flight (billed, booked unknown-outcome, paid again on resume). Send nothing:
            # the reservation goes back (fire and forget, as a cancelled job's does) and the task is released.
            ledger = self._args[1]
            ledger.db.submit(ledger.release, reservation)
            raise Abandoned(STOP_NOT_SENT)
        self.reservation = reservation if self.tokens is None else with_worst_tokens(reservation, *self.tokens)
        if self.in_line:  # reserved: the next call in its line may try at once (fifo42)
            self.lines.leave(self._args[4], self)  # type: ignore[union-attr]

    async def before_wait(self) -> None:
        """Awaited by the HTTP layer once, when the request would wait for its host (a concurrency or rate slot, a
        pause, its turn), before it waits: a response already stored raises :class:`_NotSent` (``cached``), so a
        redelivered task is answered at once instead of after another request's slot frees (up to the host's
        period). A read only (no reservation): the authoritative lookup-or-reserve is still :meth:`__call__`, at
        send time."""
        cached = await self._args[0].aget(self._args[2])
        if cached is not None:
            raise _NotSent(cached=cached)


class _KeyTurn:
    """``async with``: the turn of one request key in this process (:meth:`ModelCaller._one_call_per_key`).

    ``locks`` maps a key to ``(asyncio.Lock, users)``; entering counts this user and takes the key's lock
    (made by the first user), leaving releases it and drops the entry with its last user. A plain class rather
    than an ``asynccontextmanager`` (no async generator per call); it behaves the same, cancellation included.
    """

    __slots__ = ("_locks", "_key", "_lock")

    def __init__(self, locks: dict[str, tuple[asyncio.Lock, int]], key: str) -> None:
        self._locks = locks
        self._key = key
        self._lock: asyncio.Lock | None = None

    def _leave(self) -> None:
        lock, users = self._locks[self._key]
        if users <= 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)

    async def __aenter__(self) -> None:
        lock, users = self._locks.get(self._key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[self._key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._leave()
            raise
        self._lock = lock

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            if self._lock is not None:
                self._lock.release()
        finally:
            self._leave()


class _BudgetLines:
    """Per model, this process's calls waiting for room under the budget cap, first come first served (fifo42).

    A call whose reservation the ledger refused only because of other calls' open reservations waits for them to
    settle (:meth:`ModelCaller._send`). Polling alone let a call that came later (or whose poll fired first) take
    the room an earlier one waited for: a GeoHint run stopped at the cap then held context answers whose image's
    baseline, queued before them in the plan, was never sent. So the first refused call *joins* its model's line;
    while the line is not empty, a send gate of that model that does not head it reserves nothing (the gate raises
    :class:`_NotSent` ``queued``) and its call joins the line's end. Only the head polls the ledger; it leaves the
    line once it reserved (or was answered from the store, or gave up: a final refusal, the wait's time limit, a
    stop, an error, cancellation), and the next call is woken at once to try. A call whose key turned out to be in
    flight in another process leaves the line (that wait is not for budget room and must not hold the line up).

    One line per model, not one for the campaign's cap: what must stay in order is each model's plan (its baseline
    before its context units), and a head waits for its own host's slots and rate before its gate (a paused or slow
    host): one global line would let a model held up by its host stall every other model's calls, against the lanes'
    design (:meth:`ModelCaller.lanes`). Another model's calls that fit go on meanwhile, as the dry run's schedule
    assumes (:func:`geoagent.config.simulate_dispatch`); they can fill the room a head waits for, which then waits
    up to ``budget_wait_s`` as before. In this process only (calls of other processes reserve as they come).

    ``waiting`` maps a model name to ``{gate: its wake-up event}`` in arrival order (a dict keeps it); it is empty
    whenever no call waits, so a gate's check (:meth:`must_queue`) costs one dict lookup on the hot path.
    """

    __slots__ = ("waiting", "_refusals")

    def __init__(self) -> None:
        self.waiting: dict[str, dict[_SendGate, asyncio.Event]] = {}
        #: model name -> the latest refusal one of its waiting calls met (the text of a waiter that times out)
        self._refusals: dict[str, BudgetExhausted] = {}

    def must_queue(self, model: str, gate: "_SendGate") -> bool:
        """Whether an earlier call of ``model`` waits for room and ``gate`` is not it: ``gate`` must not reserve."""
        line = self.waiting.get(model)
        return line is not None and next(iter(line)) is not gate

    def leads(self, model: str, gate: "_SendGate") -> bool:
        """Whether ``gate`` heads ``model``'s line."""
        line = self.waiting.get(model)
        return line is not None and next(iter(line)) is gate

    def join(self, model: str, gate: "_SendGate", refusal: BudgetExhausted | None = None) -> None:
        """Put ``gate`` at the end of ``model``'s line (where it is, if it is in it); keep ``refusal``, if given."""
        if refusal is not None:
            self._refusals[model] = refusal
        line = self.waiting.setdefault(model, {})
        if gate not in line:
            line[gate] = asyncio.Event()
            gate.in_line = True

    def leave(self, model: str, gate: "_SendGate") -> None:
        """Take ``gate`` out of ``model``'s line (nothing if it is not in it); the next call is woken if it headed."""
        line = self.waiting.get(model)
        if line is None or gate not in line:
            return
        head = next(iter(line)) is gate
        del line[gate]
        gate.in_line = False
        if not line:
            del self.waiting[model]
            self._refusals.pop(model, None)
        elif head:
            next(iter(line.values())).set()

    async def turn(self, model: str, gate: "_SendGate", timeout_s: float) -> None:
        """Wait until ``gate`` heads ``model``'s line, :meth:`wake_all` was called, or ``timeout_s`` s passed."""
        with anyio.move_on_after(max(0.0, timeout_s)):
            await self.waiting[model][gate].wait()

    def wake_all(self) -> None:
        """Wake every waiting call (a stop request: each then sees the stop and gives up unsent)."""
        for line in self.waiting.values():
            for event in line.values():
                event.set()

    def refusal_text(self, model: str, wait_s: float) -> str:
        """Why a call of ``model`` that waited ``wait_s`` s in the line gives up: the latest refusal its line met (the
        ledger's text, which ``status`` merges with the other refusals at the cap), else a sentence saying so."""
        refusal = self._refusals.get(model)
        if refusal is not None:
            return str(refusal)
        return (f"budget exhausted: waited {wait_s:g} s behind earlier calls of model {model!r} for room under "
                f"the cap")


class ModelCaller(Stage):
    """The stage that turns request tasks into stored, paid-for-once responses (see module docstring).

    Parameters
    ----------
    concurrency : int, optional
        Tasks handled at once by this worker. Default: the sum of the configured models' ``concurrency``
        (capped at 256), from ``config`` when given, else at :meth:`start` from the campaign's config
        (a model whose provider sends nothing over HTTP, e.g. replay, counts :data:`OFFLINE_CONCURRENCY`);
        with several models, each counts its lane's cap instead (:func:`lane_cap`: its concurrency plus a
        lease-ahead; :meth:`lanes`).
        The HTTP layer's limits (per model on its host) cap the requests actually in flight, so more tasks than that
        would only wait there, leased (and, with the runner's lease-ahead, lease as many again).

    Stopping: :meth:`stop_requested` (the runner calls it at SIGINT/SIGTERM) abandons every request that
    has not passed its send gate (waiting for its host's concurrency or rate slot, for the gate's database
    job, or for a budget wait): it is cancelled unsent and its task raises
    :class:`~geoagent.runtime.stage.Abandoned` (released untouched: no attempt counted, no reservation, no
    spend). Requests already sent finish within the runner's grace period.
    """

    name = C.STAGE_MODEL_CALLER
    input_edge = C.EDGE_REQUESTS
    output_edge = C.EDGE_RESPONSES
    concurrency = 64
    #: a task's lane (:meth:`lane_of`: its model) is the queue's own lane, so a queue that leases by lane hands out
    #: only tasks of models with room, each model's in plan order (:attr:`Stage.queue_lanes`; walk39 #1)
    queue_lanes = True
    #: longest wait (s) for in-flight calls to settle when the budget is only held by their reservations
    budget_wait_s: float = 600.0
    #: consecutive 401/403 answers of one model that stop dispatching (module docstring: circuit breaker)
    auth_failures_to_stop: int = AUTH_FAILURES_TO_STOP
    #: requests in a row that could not reach a model's host before its models stop (module docstring,
    #: "Unreachable-host breaker")
    unreachable_after: int = UNREACHABLE_AFTER
    #: answers in a row of one model saying its path or model does not exist that stop it (module docstring,
    #: "Not-found breaker"; walk39 #6)
    not_found_to_stop: int = NOT_FOUND_TO_STOP
    #: fresh answers in a row of one model that came back empty, cut off at the output-token limit, that stop it
    #: (:mod:`geoagent.workers.cutoff_breaker`)
    cut_off_empty_to_stop: int = CUT_OFF_EMPTY_TO_STOP

    def __init__(self, *, concurrency: int | None = None, config: Any = None) -> None:
        # set before the runner reads it (it sizes its slots when it is built, before start())
        if concurrency is not None:
            self.concurrency = max(1, int(concurrency))
        elif config is not None and getattr(config, "models", None):
            cs = [m.concurrency for m in config.models]
            self.concurrency = max(1, min(256, sum(map(lane_cap, cs)) if len(cs) > 1 else sum(cs)))
        self._sized = concurrency is not None or (config is not None and bool(getattr(config, "models", None)))
        self._key_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._stopping = False
        #: per model, the calls waiting for room under the budget cap, first come first served (fifo42)
        self._budget_lines = _BudgetLines()
        self._models: list[str] = []  # the campaign's model names (start), for runnable()
        self._auth: AuthBreaker | None = None
        self._hosts: HostBreaker | None = None
        self._cutoff: CutOffBreaker | None = None
        #: model name -> the config key that sets the output-token limit its requests carry (start; the
        #: empty-answer breaker's message names it)
        self._limit_keys: dict[str, str] = {}
        #: how the runner runs this stage (runner_mode): watch mode and its half-open settings
        self._mode: dict[str, Any] = {"watch": False}
        #: calls not yet known to be sent: (cancel scope around generate, its gate)
        self._unsent: set[tuple[anyio.CancelScope, _SendGate]] = set()
        self._unreported_said: set[str] = set()  # models whose answer without usage was logged (once each)
        # overrun guard: per (model, with an image), the factor its worst case is raised by after an overrun, and
        # near the cap one call at a time until its first bill (money39 #3)
        self._overrun = OverrunGuard()
        #: one lane per model when the campaign has several (lanes(); set at start), else None
        self._lanes: dict[str, Lane] | None = None
        #: the HTTP limit keys of the models sent over HTTP (pace_keys(); set at start)
        self._pace_keys: list[str] = []
        #: the most calls per second the models' configured rate limits allow (rate_ceiling_per_s(); set at start)
        self._rate_ceiling: float | None = None
        #: the same per model sent over HTTP (lane_ceilings(); set at start)
        self._lane_ceilings: dict[str, float] = {}

    async def start(self, ctx: StageContext) -> None:
        """Size ``concurrency`` from the campaign's models unless it was given (class docstring)."""
        cfg = ctx.services.get("config")
        self._models = [m.name for m in (getattr(cfg, "models", None) or [])]
        self._auth = self._breaker(ctx)
        self._hosts = self._host_breaker(ctx)
        self._hosts.configure(**self._mode)
        self._cutoff = self._cutoff_breaker(ctx)
        self._limit_keys = output_limit_keys(cfg) if cfg is not None else {}
        providers = ctx.services.get("providers") or {}
        self._pace_keys.clear()
        for m in getattr(cfg, "models", None) or []:
            host = _model_host(m, providers.get(m.name))
            self._hosts.set_host(m.name, host, public=bool(getattr(m, "default_base_url", None)))
            if host is not None:  # over HTTP: its limit key (its own limits, else its host's) paces it
                self._pace_keys.append(getattr(providers.get(m.name), "limit_key", None) or host)
        models = list(getattr(cfg, "models", None) or [])
        self._rate_ceiling, self._lane_ceilings = _rate_limits(cfg, models, providers)
        total = 0
        lanes: dict[str, Lane] = {}
        # each model's tasks this run has to do (the engine's count at the start; None: a --stages process, a
        # plan of one model, or [queue] model_pacing = "throughput"): its lane is paced by its share of them
        queue_cfg = getattr(cfg, "queue", None)
        work = (ctx.services.get(C.SERVICE_LANE_WORK) or {}) if getattr(queue_cfg, "model_pacing", "plan") == "plan" \
            else {}
        for m in models:
            over_http = bool(getattr(providers.get(m.name), "supports_before_send", True))
            c = m.concurrency if over_http else max(m.concurrency, OFFLINE_CONCURRENCY)
            total += c
            rate = getattr(m, "rate", None)
            per_s = rate.requests / rate.period_s if over_http and rate is not None else math.inf
            lanes[m.name] = Lane(cap=lane_cap(c), rate_per_s=per_s, work=max(0, int(work.get(m.name) or 0)))
        self._lanes = lanes if len(lanes) > 1 else None
        if self._sized or not models:
            return
        if self._lanes is not None:
            total = sum(lane.cap for lane in lanes.values())
        self.concurrency = max(1, min(256, total))

    def lanes(self) -> dict[str, Lane] | None:
        """One lane per model when the campaign has several (None with one: nothing to share; the runner's hot
        path is then unchanged). A model's lane holds at most :func:`lane_cap` of its ``concurrency`` tasks at
        once, and its tasks deferred meanwhile come back at its ``rate`` (requests / ``period_s``; unlimited
        for a provider that sends nothing over HTTP), so a model slowed by its own limits never holds the
        workers the other models need; under ``[queue] model_pacing = "plan"`` (the default) each lane's
        ``work`` is the model's tasks this run has to do (service :data:`geoagent.constants.SERVICE_LANE_WORK`),
        so no model runs ahead of the others' share of their work (:mod:`geoagent.runtime.worker`, "Lanes").
        Set at :meth:`start`."""
        return self._lanes

    def pace_keys(self) -> list[str]:
        """The limit keys of the models sent over HTTP (:meth:`Stage.pace_keys`: their slowest configured rate
        window, and their hosts' where a host's policy is a ceiling over its models, counts in the stall
        threshold); none for providers that send nothing (simulated, replay). Set at :meth:`start`."""
        return list(self._pace_keys)

    def lane_of(self, task: Task) -> str | None:
        """The task's model name (its lane), or None for a payload without one (it fails in :meth:`handle`)."""
        payload = task.payload
        model = payload.get(LANE_FIELD) if type(payload) is dict else None
        return model if type(model) is str else None

    def runner_mode(self, *, watch: bool, probe_after_s: float, probe_max_s: float) -> None:
        """Watch mode (``run --watch``) makes the host breaker half-open with the runner's probe settings
        (module docstring, "Unreachable-host breaker"); applied at :meth:`start`."""
        self._mode = {"watch": bool(watch), "probe_after_s": float(probe_after_s), "probe_max_s": float(probe_max_s)}
        if self._hosts is not None:
            self._hosts.configure(**self._mode)

    def resumed_holds(self) -> list[str]:
        """Watch mode: the held tasks to hand back to the queue now (:meth:`HostBreaker.resumed`: one to probe a
        host after its cool-down, all of a host's once its probe got through)."""
        return self._hosts.resumed() if self._hosts is not None else []

    def rate_ceiling_per_s(self) -> float | None:
        """The most calls per second the campaign's models may be sent at by their configured rate limits (each limit
        key's ``requests / period_s``, a ``[hosts]`` ceiling over its host's keys; summed), or None when a model is
        not paced so (answered offline: simulated, replay). The live ETA times this stage by no more than it
        (:meth:`geoagent.runtime.progress.Progress.snapshot`): measured up to the last commit, a limit of 30 per 15 s
        read as the burst's rate, an ETA half the time left (progress37 #1)."""
        return self._rate_ceiling

    def lane_ceilings(self) -> dict[str, float]:
        """Per model sent over HTTP, the most calls per second its configured rate limit allows (its limit key's
        ``requests / period_s``); the live ETA times each model's lane by no more (review37b #2: a slow model's lane
        was timed by its burst rate beside a fast one). Models answered offline are not named."""
        return dict(self._lane_ceilings)

    def host_waits(self) -> list[dict[str, Any]]:
        """Watch mode: the models waiting for their unreachable host (:meth:`HostBreaker.waiting`); read by the
        progress stream at each tick (:class:`geoagent.runtime.progress.Progress`), so ``status`` and the live
        display can say ``model M waiting for host H (next probe in S s ...; N task(s) held)``."""
        return self._hosts.waiting() if self._hosts is not None else []

    def host_holds(self) -> list[dict[str, Any]]:
        """A burst run: the models whose tasks are held for their unreachable host (:meth:`HostBreaker.holding`);
        read by the progress stream at each tick and into the final record, so ``status`` can name the held models
        (:func:`geoagent.status.held_host_models`) from data."""
        return self._hosts.holding() if self._hosts is not None else []

    def cut_off_holds(self) -> list[dict[str, Any]]:
        """The models this process stopped because their answers kept coming back empty at the output-token limit
        (:meth:`geoagent.workers.cutoff_breaker.CutOffBreaker.stops`); read by the progress stream at each tick and
        into the final record, so ``status`` names them (:func:`geoagent.status.cut_off_models`)."""
        return self._cutoff.stops() if self._cutoff is not None else []

    def not_found_holds(self) -> list[dict[str, Any]]:
        """The models this process stopped because their host answered that their path or model id does not exist
        (:meth:`AuthBreaker.not_found_stops`; walk39 #6); read by the progress stream at each tick and into the final
        record, so ``status`` names them (:func:`geoagent.status.not_found_models`)."""
        return self._auth.not_found_stops() if self._auth is not None else []

    def lane_open(self, lane: str) -> bool:
        """Whether model ``lane`` can be sent to now: no breaker of it is open (authentication, empty answers, its
        host unreachable; in watch mode too, while its host is waited for), so its share of its work counts in the
        pacing of the other models' lanes (:meth:`Stage.lane_open`)."""
        return not self._stopped(lane, host_down=True)

    def lane_leasable(self, lane: str) -> bool:
        """:meth:`Stage.lane_leasable`: not while a breaker of model ``lane`` is open (review44a #3: its tasks stay
        queued), but for a host waited for in watch mode, whose half-open probe is a task of its models that arrives
        (:meth:`HostBreaker.try_probe`, :meth:`resumed_holds`)."""
        watch = self._hosts is not None and self._hosts.watch
        return not self._stopped(lane, host_down=not watch)

    def _stopped(self, model: str, *, host_down: bool) -> bool:
        """Whether ``model``'s authentication or empty-answer breaker is open, or (``host_down``) its host's
        unreachable breaker."""
        return ((self._auth is not None and self._auth.is_open(model) is not None)
                or (self._cutoff is not None and self._cutoff.is_open(model) is not None)
                or (host_down and self._hosts is not None and self._hosts.is_open(model) is not None))

    def runnable(self) -> bool:
        """False once EVERY configured model is stopped, by its authentication breaker, its empty-answer breaker
        (:mod:`geoagent.workers.cutoff_breaker`) or its host's unreachable breaker: no task could be sent, so the runner stops leasing (instead of leasing the whole
        queue only to hold it) and the run ends with the queue untouched (:meth:`AuthBreaker.report_lines`,
        :meth:`HostBreaker.report_lines`). In watch mode a model whose host is down still counts (its host is
        probed again after the cool-down)."""
        if not self._models or (self._auth is None and self._hosts is None and self._cutoff is None):
            return True
        watch = self._hosts is not None and self._hosts.watch
        return not all(self._stopped(m, host_down=not watch) for m in self._models)

    def unreachable_hint(self, host: str) -> str | None:
        """``[[models]] base_url of 'X'`` for the model(s) whose requests go to ``host``, else None; for a
        provider's own API (no ``base_url`` set) network access to it (:func:`public_host_hint`, newuser41 #C)."""
        models = [m for m in self._models if self._hosts is not None and self._hosts.host_of(m) == host]
        if models and self._hosts is not None and self._hosts.is_public(models):
            quoted = ", ".join(repr(m) for m in models)
            return f"access to {host}, the provider's own API of {quoted} (no [[models]] base_url set)"
        return f"[[models]] base_url of {', '.join(repr(m) for m in models)}" if models else None

    def stop_requested(self) -> None:
        """Abandon every call that has not passed its send gate (class docstring, "Stopping")."""
        self._stopping = True
        for scope, gate in list(self._unsent):
            if gate.reservation is None:  # not through the gate: nothing sent, safe to cancel
                scope.cancel()
        self._budget_lines.wake_all()  # calls waiting in a budget-wait line see the stop at once

    def _is_stopping(self) -> bool:
        return self._stopping

    # -- per-key de-duplication inside this process ---------------------------------------------------

    def _one_call_per_key(self, key: str) -> "_KeyTurn":
        """Serialise tasks that share a request key, so the second finds the first's stored response
        (``async with``; :class:`_KeyTurn`)."""
        return _KeyTurn(self._key_locks, key)

    def _host_breaker(self, ctx: StageContext) -> HostBreaker:
        """The campaign's :class:`HostBreaker` (service :data:`HOST_BREAKER_SERVICE`; made on first use)."""
        hosts = ctx.services.get(HOST_BREAKER_SERVICE)
        if hosts is None:
            hosts = ctx.services[HOST_BREAKER_SERVICE] = HostBreaker(self.unreachable_after)
        return hosts

    def _cutoff_breaker(self, ctx: StageContext) -> CutOffBreaker:
        """The campaign's :class:`~geoagent.workers.cutoff_breaker.CutOffBreaker` (service
        :data:`~geoagent.workers.cutoff_breaker.CUTOFF_BREAKER_SERVICE`; made on first use)."""
        cut = ctx.services.get(CUTOFF_BREAKER_SERVICE)
        if cut is None:
            cfg = ctx.services.get("config")
            state_dir = getattr(cfg, "state_dir", None)
            record = Path(state_dir()) / CUT_OFF_RECORD if callable(state_dir) else None
            cut = ctx.services[CUTOFF_BREAKER_SERVICE] = CutOffBreaker(self.cut_off_empty_to_stop, record=record)
        return cut

    def _breaker(self, ctx: StageContext) -> AuthBreaker:
        """The campaign's :class:`AuthBreaker` (service :data:`AUTH_BREAKER_SERVICE`; made on first use)."""
        breaker = ctx.services.get(AUTH_BREAKER_SERVICE)
        if breaker is None:
            from geoagent.runtime.backend import uses_redis

            cfg = ctx.services.get("config")
            breaker = ctx.services[AUTH_BREAKER_SERVICE] = AuthBreaker(
                self.auth_failures_to_stop, self.not_found_to_stop,
                config_on_server=cfg is not None and uses_redis(cfg))
        return breaker

    # -- the job ------------------------------------------------------------------------------------

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        while True:
            try:
                return await self._handle(task, ctx)
            except AuthStop as stop:
                self._breaker(ctx).hold(stop.model, task.key)  # counted for the end-of-run line
                raise
            except CutOffStop as stop:
                self._cutoff_breaker(ctx).hold(stop.model, task.key)  # counted for the end-of-run line
                raise
            except HostStop as stop:
                hosts = self._host_breaker(ctx)
                if hosts.is_open(stop.model) is None:
                    continue  # watch mode: a probe got through meanwhile, the host is back: send it after all
                hosts.hold(stop.model, task.key)  # counted for the end-of-run line; watch mode: resumed later
                raise

    async def _handle(self, task: Task, ctx: StageContext) -> list[Message]:
        cfg = ctx.get("config")
        m, request = build_request(cfg, task.payload)
        # the kind (with an image or not) as the overrun guard counts it
        has_image = request.image is not None or bool(request.image_id)
        if self._overrun.opened(m.name, has_image):  # the hot path: one set lookup
            return await self._handle_settings(task, ctx, cfg, m, request)
        return await self._handle_first_bill(task, ctx, cfg, m, request, has_image)

    async def _handle_first_bill(self, task: Task, ctx: StageContext, cfg: Any, m: Any, request: ModelRequest,
                                 has_image: bool) -> list[Message]:
        """A call of a paid model and kind with no bill yet in this process (money39 #3): near the cap, one such call
        at a time until its bill is settled (the overrun guard's probe; calls already in flight could not learn its
        factor): :meth:`~geoagent.workers.billing.OverrunGuard.first_bill`."""
        if not m.paid:  # replay, simulated: never billed, nothing to wait for (the next call takes the hot path)
            self._overrun.waive(m.name, has_image)
            return await self._handle_settings(task, ctx, cfg, m, request)
        if self._overrun.probing(m.name, has_image):
            # about to wait for the probe: a stored answer costs nothing, so it does not wait (a read, no reservation)
            key = request.key()
            stored = await ctx.get("store").aget(key)
            if stored is not None:
                return [self._message(task, key, m, request, stored, cost_usd=None, cached=True)]

        async def far() -> bool:  # asked once per kind: waive the probe when the cap is far (billing.far_from_cap)
            left = (await ctx.get("ledger").asummary()).remaining_usd
            return far_from_cap(left, m.concurrency,
                                _worst_usd(m, request, has_image, None, cfg.budget.input_estimate_factor))

        async with self._overrun.first_bill(m.name, has_image, stopping=self._is_stopping, far=far):
            return await self._handle_settings(task, ctx, cfg, m, request)

    async def _handle_settings(self, task: Task, ctx: StageContext, cfg: Any, m: Any, request: ModelRequest
                               ) -> list[Message]:
        cutoff = self._cutoff_breaker(ctx)
        if not cutoff.settings_needed(m.name):
            return await self._handle_built(task, ctx, cfg, m, request)
        # its empty-answer breaker was recorded open (an earlier run, a sibling process): under the same settings
        # one request at a time until an answer decides (geoagent.workers.cutoff_breaker, "Across runs")
        async with cutoff.probe_turn(m.name, _settings_id(request)):
            return await self._handle_built(task, ctx, cfg, m, request)

    async def _handle_built(self, task: Task, ctx: StageContext, cfg: Any, m: Any, request: ModelRequest
                            ) -> list[Message]:
        breaker = self._breaker(ctx)
        opened = breaker.is_open(m.name)
        if opened is not None:
            raise AuthStop(opened)
        cut = self._cutoff_breaker(ctx).is_open(m.name)
        if cut is not None:
            raise CutOffStop(cut)
        hosts = self._host_breaker(ctx)
        down = hosts.is_open(m.name)
        if down is None:
            return await self._handle_call(task, ctx, cfg, m, request, breaker, hosts, None)
        if not hosts.try_probe(m.name, task.key):
            raise HostStop(down, m.name)
        # watch mode, half-open: this task is the host's probe (module docstring, "Unreachable-host breaker")
        gates: list[_SendGate] = []
        try:
            out = await self._handle_call(task, ctx, cfg, m, request, breaker, hosts, gates)
        except HostStop:
            raise  # the probe could not reach the host: probe_done(False) was called
        except (Abandoned, BudgetStop, _NotSent):
            hosts.probe_done(m.name, None)
            raise
        except Exception:
            # the request went out (its gate passed) and did not fail unreachable: the host answered
            hosts.probe_done(m.name, True if any(g.reservation is not None for g in gates) else None)
            raise
        except BaseException:  # cancelled: no verdict
            hosts.probe_done(m.name, None)
            raise
        hosts.probe_done(m.name, True if any(g.reservation is not None for g in gates) else None)
        return out

    async def _handle_call(self, task: Task, ctx: StageContext, cfg: Any, m: Any, request: ModelRequest,
                           breaker: AuthBreaker, hosts: HostBreaker, probe: list[_SendGate] | None) -> list[Message]:
        """One task's call (module docstring). ``probe``: None for a normal call; for the half-open probe of an
        open host (watch mode), a list that collects the call's send gates (which let it pass the open
        breaker), its verdict is given on failing unreachable (:meth:`HostBreaker.probe_done`)."""
        payload = task.payload
        gate_hosts = hosts if probe is None else None  # the probe alone passes its host's open breaker
        image_ref = payload.get("image_ref")
        image_id = request.image_id
        providers = ctx.get("providers")
        try:
            provider = providers[m.name]
        except KeyError:
            raise PermanentFailure(f"no provider configured for model {m.name!r}") from None
        ledger, store = ctx.get("ledger"), ctx.get("store")
        params = request.params
        key = request.key()
        if request.pixel_source is not None:
            # code before the pixel source entered the key (up to a192796) stored a placeholder request's answer
            # under the key without it: a task that code answered but did not acknowledge (killed in between) is
            # answered from that stored answer, not paid again (the message names the key it is stored under).
            # That key is also the same request's with the photo: an answer about the photo (sent before its
            # file went missing) answers the placeholder task too, never the other way round
            legacy = request_key(request.provider, request.model, request.prompt, request.image_id, params)
            stored = await store.aget(legacy)
            if stored is not None:
                return [self._message(task, legacy, m, request, stored, cost_usd=None, cached=True)]

        async with self._one_call_per_key(key):
            # the worst case counts an image by its id (at image_input_tokens) until its bytes are loaded
            has_image = request.image is not None or bool(request.image_id)
            factor = cfg.budget.input_estimate_factor
            # a replay's bill is known in advance (the recorded usage, which the estimate cannot bound: a
            # recorded image or long answer): reserve at least that, so a replay never passes the cap either
            recorded = getattr(provider, "recorded_usage", None)
            usage = recorded(request) if callable(recorded) else None
            known_usd = m.cost_usd(int(usage[0]), int(usage[1])) if usage is not None else 0.0
            base_usd, worst_usd = self._reservation_usd(m, request, has_image, None, factor, known_usd)
            size: tuple[int, int] | None = None  # the loaded image's size, when read (the reservation counts it)
            # store lookup and reservation happen in the gate, at send time (module docstring: crash safety)
            gate = _SendGate(store, ledger, key, worst_usd, m.name, breaker, self._is_stopping, gate_hosts,
                             tokens=_worst_tokens(m, request, has_image, None, factor), cutoff=self._cutoff,
                             lines=self._budget_lines)
            if probe is not None:
                probe.append(gate)

            if image_ref or image_id is not None:
                try:
                    img = await asyncio.to_thread(
                        load_image, image_ref, request.image_id, base_dir=ctx.services.get("image_base_dir")
                    )
                except (ImageNotFound, ValueError) as exc:
                    try:
                        await gate()  # a stored response still answers the task; else nothing is sent
                    except _NotSent as stop:
                        if stop.cached is not None:
                            return [self._message(task, key, m, request, stop.cached, cost_usd=None, cached=True)]
                    if gate.reservation is not None:
                        await ledger.arelease(gate.reservation, note="image not loaded; nothing sent")
                    if probe is not None:
                        probe.clear()  # nothing was sent: no verdict on the host
                    raise PermanentFailure(f"image: {exc}") from None
                if img is not None:
                    request = dataclasses.replace(request, image=img.data, image_mime=img.mime)
                    # the image's size (header only) may make the provider bill it above image_input_tokens
                    size = image_size_px(None, None, img.data) if m.provider != "replay" else None
                    base_usd, worst_usd = self._reservation_usd(m, request, True, size, factor, known_usd)
                    gate = _SendGate(store, ledger, key, worst_usd, m.name, breaker, self._is_stopping, gate_hosts,
                                     tokens=_worst_tokens(m, request, True, size, factor), cutoff=self._cutoff,
                                     lines=self._budget_lines)
                    if probe is not None:
                        probe.append(gate)

            try:
                cached, response = await self._send(provider, dataclasses.replace(request, before_send=gate), ledger, gate, m)
            except PausedUnsent:
                if probe is not None:
                    probe.clear()  # nothing was sent: no verdict on the host
                raise
            except _AuthFailed as exc:
                last = task.attempts + 1 >= int(getattr(getattr(cfg, "queue", None), "max_attempts", C.DEFAULT_MAX_ATTEMPTS))
                opened = breaker.failure(m.name, exc.status, getattr(m, "key_env", None) or m.api_key_env, last_attempt=last,
                                         billing=exc.billing)
                if opened is not None:
                    raise AuthStop(opened) from None
                raise CallFailed(exc.reason) from None  # nacked: retried, never dead-lettered by the streak
            except _NotFound as exc:
                # a path or model its host does not serve (walk39 #6): counted like a refused key, so the K-th in a
                # row stops the model and its tasks are held, not dead-lettered one by one
                last = task.attempts + 1 >= int(getattr(getattr(cfg, "queue", None), "max_attempts", C.DEFAULT_MAX_ATTEMPTS))
                opened = breaker.not_found(m.name, exc.status, exc.host, exc.excerpt, last_attempt=last, key=task.key)
                if opened is not None:
                    raise AuthStop(opened) from None
                raise CallFailed(exc.reason) from None  # nacked: retried (dead-lettered on its last attempt)
            except _Unreachable as exc:
                # nothing was billed (reservation released): never a dead letter (module docstring)
                if probe is not None:  # the half-open probe failed: re-open, cool-down doubled; held again
                    hosts.probe_done(m.name, False, exc.streak, exc.last)
                last = task.attempts + 1 >= int(getattr(getattr(cfg, "queue", None), "max_attempts", C.DEFAULT_MAX_ATTEMPTS))
                down = hosts.failure(m.name, exc.host, exc.streak, exc.last, last_attempt=last)
                if down is not None:
                    stop = HostStop(down, m.name)
                    # the streak proved the host down: the runner refunds the attempts it charged (module docstring)
                    stop.tripped_streak = (exc.host, exc.streak_id) if exc.streak_id else None
                    raise stop from None
                # nacked: retried later (one queue attempt counted; refunded if this streak opens the breaker)
                failed = CallFailed(f"host {exc.host} unreachable after {count_text(exc.attempts, 'attempt')}, nothing sent: "
                                    f"{_excerpt(exc.last)}")
                failed.unreachable_streak = (exc.host, exc.streak_id) if exc.streak_id else None
                raise failed from None
            if cached is not None:
                return [self._message(task, key, m, request, cached, cost_usd=None, cached=True)]
            breaker.success(m.name)
            reservation = gate.reservation

            # an answer without a usable usage is kept, booked at its reservation (the worst case; module table)
            response, cost_usd = booked_answer(response, reservation, m, request, input_estimate_factor=factor,
                                               has_image=has_image, size_px=size)
            self._overrun.note(m.name, has_image, cost_usd, reservation.amount_usd, base_usd)
            if not response.usage.reported and m.name not in self._unreported_said:
                self._unreported_said.add(m.name)
                log.warning("model %r answered without a usage count: booked at the worst case ($%.6f, the "
                            "reservation); the run's summary counts such calls", m.name, cost_usd)
            meta = {
                "model_name": m.name,
                "provider": m.provider,
                "model": m.model,
                "image_id": request.image_id,
                "params": params,
                "prompt_sha256": hashlib.sha256(request.prompt.encode("utf-8")).hexdigest(),
                "prompt_chars": len(request.prompt),
                "reserved_usd": reservation.amount_usd,
                # provenance: the task whose call this was, keyed as now; never rewritten (a later key change, e.g.
                # a swapped-image control's geoverify.rekey move, leaves it), and no reader matches on it: scored rows
                # join their response by request key (fixgeohint42 #4)
                "task_key": task.key,
            }
            kind = provider_kind(m, ctx.services.get(C.SERVICE_PROVIDER_KINDS))
            if response.sandbox:  # a sandbox fake answered, on whatever address (its marking header)
                kind = C.PROVIDER_KIND_SIMULATED
            if kind is not None:  # what answered, as a fact of this call (the export's simulated column reads it)
                meta[C.REQUEST_META_PROVIDER_KIND] = kind
            # store + settle in one transaction; shielded so a shutdown cannot cut it in half
            try:
                await store.put_shielded(key, meta, response, reservation, cost_usd=cost_usd)
            except (TypeError, ValueError, OverflowError) as exc:
                # the answer came (billed) but these figures cannot be stored (a cost past the ledger's 64-bit
                # nano-USD): its transaction was undone, settlement with it. Never leave the reservation open (it
                # would count as a call on the wire until the next run's recovery): booked as unknown-outcome
                # spend at its worst case, and the task is retried. A store that cannot write at all (a full disk,
                # a lost Redis server) raises other errors: they stop the run as before (the next run recovers).
                await ledger.amark_unknown(reservation, note="answered, but the answer could not be stored")
                raise CallFailed(f"outcome unknown: the answer could not be stored ({_excerpt(exception_text(exc))})"
                                 ) from None
            # stored and passed on (billed: it is an answer, if an empty one); the model's further calls stop once
            # enough of them in a row came back empty at the output limit (geoagent.workers.cutoff_breaker)
            if m.paid:  # a replay or simulated answer costs nothing, and no limit changes a recorded one
                cutoff = self._cutoff_breaker(ctx)
                settings = (_settings_id(request) if cutoff.settings_needed(m.name)
                            or empty_cut_off(response.text, response.finish_reason) else None)
                cutoff.answered(m.name, response.text, response.finish_reason,
                                params.get("max_output_tokens", m.max_output_tokens), self._limit_keys.get(m.name),
                                settings=settings)
            return [self._message(task, key, m, request, response, cost_usd=cost_usd, cached=False)]

    def _reservation_usd(self, m: Any, request: ModelRequest, has_image: bool, size: tuple[int, int] | None,
                         factor: float, known_usd: float) -> tuple[float, float]:
        """``(worst case, reservation)`` of one call, USD: :func:`_worst_usd`, and that raised by the overrun guard's
        factor for the model and kind (:class:`~geoagent.workers.billing.OverrunGuard`), at least ``known_usd`` (a replay's recorded bill)."""
        base = _worst_usd(m, request, has_image, size, factor)
        return base, max(known_usd, self._overrun.factor(m.name, has_image) * base)

    async def _send(
        self, provider: Any, request: ModelRequest, ledger: Any, gate: _SendGate, m: Any
    ) -> tuple[ModelResponse | None, ModelResponse | None]:
        """Call the provider through ``gate``; return ``(stored response, None)`` or ``(None, new response)``.

        When another process of the campaign has the same request key in flight (a redelivered task),
        the request was abandoned unsent and the task waits the same way until that call's response is
        stored or its reservation closed, then looks again (no second paid call). When the gate refuses
        the reservation only because of other calls' open reservations, the request was abandoned unsent;
        in-flight calls hold their worst case, and most settle far below it, so the refusal is usually
        temporary: the task waits (for at most ``budget_wait_s`` s) and sends again, instead of stopping the
        campaign with budget left. The waits of one model are first come first served (:class:`_BudgetLines`,
        fifo42): the first refused call heads its model's line and polls (backoff up to 0.25 s); a call of the
        model that reaches its gate while the line is not empty queues at its end without reserving, and is woken
        when it heads the line. Meanwhile the head runs the ledger's crash recovery every 5 s, so reservations of
        a dead process cannot block the wait for ever.

        Raises
        ------
        BudgetStop
            spent + unknown-outcome spend + this call's worst case exceeds the cap by itself (no
            settlement can make room), or the wait timed out.
        Abandoned
            A stop was requested before the request was sent (a budget wait included).
        PermanentFailure, Missing, CallFailed
            From :meth:`_call` (see the module table).
        """
        loop = asyncio.get_running_loop()
        deadline = next_recover = 0.0
        delay_s = 0.01
        lines = self._budget_lines
        try:
            while True:
                if self._stopping:
                    raise Abandoned(STOP_NOT_SENT)
                try:
                    response = await self._call(provider, request, ledger, gate, m)
                except _NotSent as stop:
                    if stop.cached is not None:
                        return stop.cached, None
                    exc = stop.refusal
                    elsewhere = stop.elsewhere
                else:
                    if gate.reservation is None:  # a provider that claims to call the gate but did not
                        raise RuntimeError(f"{type(provider).__name__} answered without awaiting request.before_send")
                    return None, response
                if not deadline:
                    deadline, next_recover = loop.time() + self.budget_wait_s, loop.time() + 5.0
                if elsewhere:
                    # wait for the other process's call: its stored response (or its failure) ends the wait;
                    # recovery below turns a dead owner's reservation into unknown spend, then we send. Not a wait
                    # for budget room: it holds no place in its model's line (fifo42)
                    lines.leave(m.name, gate)
                    if loop.time() >= deadline:
                        raise CallFailed("the same request stayed in flight in another process") from None
                else:
                    if exc is not None:  # refused by the ledger (else queued at the gate behind an earlier call)
                        final = (exc.reserved_usd <= 0
                                 or exc.spent_usd + exc.unknown_usd + exc.requested_usd > exc.cap_usd)
                        if final or loop.time() >= deadline:
                            raise BudgetStop(str(exc)) from None
                    lines.join(m.name, gate, exc)
                    if not lines.leads(m.name, gate):
                        # an earlier call of the model waits for room: this one tries once that one is through.
                        # A stop that came while its gate ran found it outside the line (not woken): checked here
                        if self._stopping:
                            raise Abandoned(STOP_NOT_SENT)
                        await lines.turn(m.name, gate, deadline - loop.time())
                        if not self._stopping and not lines.leads(m.name, gate):
                            raise BudgetStop(lines.refusal_text(m.name, self.budget_wait_s)) from None
                        delay_s = 0.01
                        continue
                    if exc is None:  # queued, and the line went ahead meanwhile: its head now, it asks at once
                        continue
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.25)
                if loop.time() >= next_recover:
                    await ledger.db.run(ledger.recover)
                    next_recover = loop.time() + 5.0
        finally:
            if gate.in_line:  # gave up or answered from the store: the next call in the line may try
                lines.leave(m.name, gate)

    async def _call(self, provider: Any, request: ModelRequest, ledger: Any, gate: _SendGate, m: Any) -> ModelResponse:
        """Call the provider and close the gate's reservation on every failure path (see the module table).

        Every failure below except the last comes from a request that was sent, hence after the gate
        passed and made the reservation.

        Raises
        ------
        _NotSent
            From the gate (stored response, or reservation refused): nothing was sent.
        Abandoned
            A stop was requested before the request passed the gate (class docstring, "Stopping").
        """
        if self._stopping:
            raise Abandoned(STOP_NOT_SENT)
        if not getattr(provider, "supports_before_send", False):
            await gate()  # sends nothing over HTTP, so no host slot to wait for: pass the gate now
        entry = (anyio.CancelScope(), gate)
        self._unsent.add(entry)
        try:
            with entry[0]:
                return await self._generate(provider, request, ledger, gate, m)
        finally:
            self._unsent.discard(entry)
        # reached only when stop_requested() cancelled the scope before the gate passed: nothing was sent
        raise Abandoned(STOP_NOT_SENT)

    async def _generate(self, provider: Any, request: ModelRequest, ledger: Any, gate: _SendGate, m: Any) -> ModelResponse:
        """``provider.generate`` with the module table's handling of every failure (see :meth:`_call`)."""
        try:
            return await provider.generate(request)
        except RetriesStopped as exc:
            # a stop came between two attempts: no retry; the reservation closes as for exhausted retries
            # (released unless an attempt may have been billed) and the task is released untouched
            if gate.reservation is not None:
                await close_failed_call(ledger, gate.reservation, exc, m)
            raise Abandoned(f"stop requested between retries: {_excerpt(exc.last)}") from None
        except (_NotSent, Abandoned):
            raise
        except PausedUnsent:
            # the host paused (another call's long Retry-After) after the gate reserved, before the request went
            # out: nothing sent, nothing billed; the reservation goes back now, not after the pause (up to a day),
            # and the next delivery reserves again
            if gate.reservation is not None:
                await ledger.arelease(gate.reservation, note="host paused before sending; nothing sent")
                gate.reservation = None
            raise
        except BaseException as exc:
            # without a reservation the gate never let the request through, so nothing was sent
            if gate.reservation is not None:
                await close_failed_call(ledger, gate.reservation, exc, m)
            refusal = credential_refusal(exc)
            if refusal is not None:  # a refused key (False) or account (True)
                raise _AuthFailed(exc.status, f"HTTP {exc.status}: {_excerpt(exc.body_excerpt)}",  # type: ignore[attr-defined]
                                  billing=refusal) from None
            if isinstance(exc, PermanentHTTPError) and is_not_found_failure(exc.status, exc.body or exc.body_excerpt):
                # the path or model is not served there: every request of the model would meet it (walk39 #6)
                raise _NotFound(exc.status, f"HTTP {exc.status}: {_excerpt(exc.body_excerpt)}", _asked(exc.url),
                                _excerpt(exc.body_excerpt)) from None
            if isinstance(exc, PermanentHTTPError):
                raise PermanentFailure(f"HTTP {exc.status}: {_excerpt(exc.body_excerpt)}") from None
            if (isinstance(exc, RetriesExhausted) and exc.unreachable and exc.host
                    and not int(getattr(exc, "possibly_billed", 0) or 0)):
                # no attempt got through to the host, none may have been billed: the breaker decides
                raise _Unreachable(str(exc.host), int(exc.streak or 0), exc.last, exc.attempts,
                                   int(getattr(exc, "streak_id", 0) or 0)) from None
            if isinstance(exc, RetriesExhausted) and exc.paused and exc.retry_after_s is not None:
                # the host asked for a pause longer than the call's backoff: not retried out, so the task goes
                # back to the queue for after the pause (an attempt counted, [queue] max_attempts), not dead
                asked = getattr(exc, "retry_after_asked_s", None)
                why = (f"Retry-After {asked:g} s asked, more than the host's max_retry_after_s: retried after "
                       f"{exc.retry_after_s:g} s" if asked is not None else
                       f"Retry-After {exc.retry_after_s:g} s, longer than the host's backoff_max_s")
                failed = CallFailed(f"{PAUSED_BY_HOST}{_excerpt(exc.last)} ({why}; after "
                                    f"{count_text(exc.attempts, 'attempt')} in this delivery)")
                failed.retry_after_s, failed.paused = float(exc.retry_after_s), True
                failed.retry_after_asked_s = asked  # for the dead reason (geoagent.runtime.worker.dead_reason)
                # the real failure, for the dead reason if no delivery is left (geoagent.runtime.worker.dead_reason)
                failed.last_failure, failed.http_attempts = _excerpt(exc.last), int(exc.attempts)
                raise failed from None
            if isinstance(exc, RetriesExhausted):
                raise Missing(f"retries exhausted after {count_text(exc.attempts, 'attempt')}: {_excerpt(exc.last)}") from None
            if isinstance(exc, OutcomeUnknown):
                raise CallFailed(f"outcome unknown: {_excerpt(exc.detail)}") from None
            if isinstance(exc, ProviderError):
                text = _excerpt(exception_text(exc))
                if not m.paid and not bool(getattr(exc, "retryable", True)):
                    raise Missing(text) from None
                if bool(getattr(exc, "retryable", True)):
                    raise CallFailed(text) from None
                raise PermanentFailure(text) from None
            raise

    @staticmethod
    def _message(
        task: Task, key: str, m: Any, request: ModelRequest, response: ModelResponse, *, cost_usd: float | None, cached: bool
    ) -> Message:
        return (
            task.key,
            {
                "request_key": key,
                "model": m.name,
                "provider": m.provider,
                "model_id": m.model,
                "image_id": request.image_id,
                "text": response.text,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                "latency_s": response.latency_s,
                "finish_reason": response.finish_reason,
                "cost_usd": cost_usd if cost_usd is not None else m.cost_usd(response.usage.input_tokens, response.usage.output_tokens),
                "cached": cached,
                "meta": dict(task.payload.get("meta") or {}),
                # the counts above are the worst case the call was booked at: the provider reported none
                **({} if response.usage.reported else {"usage_reported": False}),
            },
        )
