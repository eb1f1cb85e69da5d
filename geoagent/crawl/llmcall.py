"""Model calls of the crawl's auditors, metered by the campaign ledger when one is configured.

Issue 2 point 7 applies to the crawl's paid audits too: before a call, reserve its worst case (input
estimate x ``[budget] input_estimate_factor`` x input price + max output tokens x output price, the model
caller's own rule: :func:`geoagent.config.reservation_usd`) and never start one that could pass the
cap (``BudgetExhausted`` is a ``BudgetStop``: the runner releases the task and drains); afterwards
settle with the actual usage, release when the call certainly was not billed, or keep it as
unknown-outcome spend when it may have been billed (the same table as the model caller:
:mod:`geoagent.workers.billing`).

Stopping: once ``stopping()`` is true (the crawl stages' :meth:`~geoagent.runtime.stage.Stage.stop_requested`,
SIGINT/SIGTERM) no new call is sent: a call not yet through its host's admission raises
:class:`~geoagent.runtime.stage.Abandoned` there (nothing sent, no reservation; the runner releases the task
untouched, and what the task already stored, e.g. earlier images' audits, is reused by the next run).

What answered: every auditor answer records what answered it, as the model caller does for the evaluated
models (:data:`geoagent.constants.PROVIDER_KINDS`: ``simulated`` / ``replay`` / ``model``;
:func:`auditor_provider_kind`): in the response store's ``request_meta.provider_kind`` for a metered call, and in
the crawl's own record of the answer (the image audit's ``image_audit/<site>/<image>.json``, the raw answer log
``audit_raw_answers.jsonl``), which the crawl's export reads for its ``simulated`` column
(:func:`geoagent.crawl.export.recorded_auditor_kinds`), so a config changed after the crawl does not change it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import anyio

from geoagent.providers.base import ModelRequest, ModelResponse
from geoagent.runtime.errors import PicklableError
from geoagent.runtime.stage import Abandoned, Held
from geoagent.runtime.ledger import with_worst_tokens
from geoagent.workers.billing import booked_answer, close_failed_call, worst_case_usage


#: why a crawl model call was given up at a stop request
STOP_NOT_SENT = "stop requested before the model call was sent: released unsent"
#: how long (s) a metered call whose request key is in flight in another process of the campaign waits for that
#: call's stored answer before giving up (retryable, nothing sent): the model caller's ``budget_wait_s`` default
IN_FLIGHT_WAIT_S = 600.0
#: how often (s) such a wait runs the ledger's crash recovery, so a dead owner's reservation cannot hold it for ever
IN_FLIGHT_RECOVER_S = 5.0


#: request key -> (lock, users): the key's turn in this process (:func:`metered_generate`; model_caller._KeyTurn)
_KEY_TURNS: dict[str, tuple[asyncio.Lock, int]] = {}


class AuditorRefused(PicklableError, Held):
    """The host of a crawl auditor's model refused its API key (HTTP 401/403, Gemini's ``API_KEY_INVALID``) or
    its account for billing (HTTP 402, quota or credit used up: :func:`geoagent.workers.model_caller.is_billing_failure`):
    the model caller's authentication breaker for the crawl's auditors. The task is held untouched (no attempt
    counted, never dead-lettered; what it stored before, e.g. earlier images' audits, is kept), the auditor's stage
    stops leasing, and the run ends ``authentication failed`` (exit 5) naming the key's variable (never its value),
    so a re-run once the key or the credit is fixed resumes with no ``--requeue``. ``model``: the ``[[models]]``
    name. Picklable (message and ``model`` travel)."""

    def __init__(self, message: str, model: str = "") -> None:
        super().__init__(message)
        self.model = model


class AuditorBreaker:
    """Which crawl auditor models were refused in this process (``[[models]]`` name -> the refusal,
    :class:`geoagent.workers.model_caller.AuthFailure`). Unlike the model caller's breaker it opens at the first
    refusal, as the crawl's Mapillary token does (:class:`geoagent.crawl.stages.MapillaryTokenRefused`): an
    auditor is one model, and every further audit would be refused the same way."""

    def __init__(self) -> None:
        self.opened: dict[str, Any] = {}

    def gate(self, model: str) -> None:
        """Raise :class:`AuditorRefused` when ``model`` was refused already (nothing is sent)."""
        failure = self.opened.get(model)
        if failure is not None:
            raise AuditorRefused(failure.message(), model)

    def check(self, exc: BaseException, model: str, api_key_env: str | None) -> None:
        """Open ``model``'s breaker and raise :class:`AuditorRefused` when ``exc`` (raised by its provider) is a
        refused key or a billing refusal from its host; otherwise return (the caller re-raises ``exc``)."""
        from geoagent.workers.model_caller import AuthFailure, credential_refusal

        billing = credential_refusal(exc)
        if billing is None:
            return
        self.opened.setdefault(model, AuthFailure(model, int(exc.status), api_key_env, 1,  # type: ignore[attr-defined]
                                                  billing=billing))
        self.gate(model)

    def message(self, model: str | None) -> str | None:
        """The refusal of ``model`` (:meth:`geoagent.workers.model_caller.AuthFailure.message`), None if none."""
        failure = self.opened.get(model) if model is not None else None
        return failure.message() if failure is not None else None


class _AnsweredElsewhere(Exception):
    """Raised by the send hook: the store already holds the answer (nothing sent)."""

    def __init__(self, response: ModelResponse) -> None:
        super().__init__("answer already stored")
        self.response = response


class _InFlightElsewhere(Exception):
    """Raised by the send hook: another process of the campaign holds an open reservation for the key."""


def auditor_provider_kind(section: Any, model_cfg: Any = None, kinds: Any = None) -> str | None:
    """What answers a crawl auditor (:data:`geoagent.constants.PROVIDER_KINDS`), recorded with each of its answers.

    ``section``: its ``[crawl.image_audit]`` / ``[crawl.referenceability]`` settings; ``model_cfg``: the
    ``[[models]]`` entry of its model, None when there is none; ``kinds``: the engine's
    :data:`~geoagent.constants.SERVICE_PROVIDER_KINDS` (``[[models]]`` name -> kind, from the config as written,
    where a sandbox fake is still known by its ``*.sandbox.invalid`` URL). An auditor with a ``[[models]]`` entry
    is that entry's kind (:func:`geoagent.workers.model_caller.provider_kind`: None when it is not known, an entry
    on another provider without the engine's mapping); one without is answered by ``section.provider``, which the
    crawl accepts only as ``"simulated"`` (:func:`geoagent.crawl.stages.build_crawl_services`). Returns None when
    not known: nothing is recorded and the export falls back to the config."""
    from geoagent import constants as C
    from geoagent.workers.model_caller import provider_kind

    if model_cfg is not None:
        return provider_kind(model_cfg, kinds)
    provider = getattr(section, "provider", None)
    return provider if provider in (C.PROVIDER_KIND_SIMULATED, C.PROVIDER_KIND_REPLAY) else None


def answer_kind(resp: Any, default: str | None) -> str | None:
    """What answered ``resp`` (a :class:`~geoagent.providers.base.ModelResponse`), to record with it:
    ``"simulated"`` when a sandbox fake marked it (its header, or the kind stored with it), else the kind stored
    with it when it was paid for (a stored answer reused after a restart:
    :attr:`~geoagent.providers.base.ModelResponse.recorded_kind`), else ``default`` (the auditor's kind under the
    current config, :func:`auditor_provider_kind`; None: nothing is recorded)."""
    if getattr(resp, "sandbox", False):
        return "simulated"
    return getattr(resp, "recorded_kind", None) or default


async def metered_generate(provider: Any, request: ModelRequest, *, ledger: Any = None, model_cfg: Any = None,
                           stopping: Callable[[], bool] | None = None,
                           input_estimate_factor: float | None = None, store: Any = None,
                           provider_kind: str | None = None, overrun: Any = None) -> ModelResponse:
    """``provider.generate(request)``, wrapped in a ledger reservation when ``ledger`` and ``model_cfg``
    (a ``[[models]]`` entry with prices) are given.

    The reservation is the model caller's for the same request (:func:`geoagent.config.reservation_usd`:
    prompt + system prompt, the image at max(``image_input_tokens``, its documented bill for the size read
    from its header), x ``input_estimate_factor``, + max output tokens). ``input_estimate_factor``: the
    campaign's ``[budget] input_estimate_factor`` (the crawl stages pass it: :class:`CrawlServices`); None
    takes the documented default (:data:`geoagent.config.DEFAULT_INPUT_ESTIMATE_FACTOR`, 1.25).

    The reservation is made at send time: for providers that go over HTTP it is the request's
    ``before_send`` hook, awaited once the host admitted the request (rate and concurrency slot held),
    so calls queued behind a host's limits hold no reservation; offline providers reserve first.
    ``stopping`` (optional): once it returns True, a call not yet sent is not sent (module docstring).
    ``store`` (optional, metered calls only): the campaign's :class:`~geoagent.runtime.store.ResponseStore`
    (sharing ``ledger``'s database). The answer is then stored under the request key and its reservation
    settled in ONE transaction, as the model caller does, and a request whose answer is stored is answered
    from the store (no call, no reservation). Without it the answer is settled here and kept only by the
    caller's own files, so a process killed between the two would pay for that answer again on resume. With a
    store the send-time step is the model caller's send gate (:func:`geoagent.workers.model_caller._lookup_or_reserve`):
    an answer stored meanwhile is returned unsent, and a request key another process of the campaign holds an open
    reservation for (its task's lease expired while that call was still on the wire, and the task came here) is not
    sent: the call waits, polling with backoff up to 0.25 s and running the ledger's crash recovery every
    :data:`IN_FLIGHT_RECOVER_S` s, until that answer is stored (returned) or the reservation is closed (then sent),
    for at most :data:`IN_FLIGHT_WAIT_S` s. Inside one process (one ledger owner) the same key is never in flight
    twice either: a second call with it (its task leased again by the same runner after a wall-clock step past the
    visibility timeout) waits for the first one's turn and gets its stored answer.
    ``overrun`` (optional): the process's :class:`geoagent.workers.billing.OverrunGuard`, as the model caller's: the
    reservation is the worst case times the guard's factor for the model and kind (with an image or not), and a call
    billed above its reservation raises that factor for the later ones (the crawl services pass one for both
    auditors); near the cap, until a bill of the model and kind is known in this process, one such call at a time,
    the others waiting (unsent, after their store lookup) for its bill
    (:meth:`~geoagent.workers.billing.OverrunGuard.first_bill`, money39 #3; waived when what is left under the cap is
    far above the model's ``concurrency`` x the call's worst case: :func:`geoagent.workers.billing.far_from_cap`).
    ``provider_kind`` (optional): what answers this auditor (:func:`auditor_provider_kind`), recorded with the
    stored answer as ``request_meta.provider_kind``; None records the request's provider when it is
    ``"simulated"`` or ``"replay"``, else nothing.

    Raises
    ------
    geoagent.runtime.stage.Abandoned
        ``stopping()`` was true before the call was sent, or became true while it waited for its model's first bill
        (nothing sent, no reservation).
    geoagent.runtime.ledger.BudgetExhausted
        The reservation does not fit under the cap (nothing was sent).
    geoagent.workers.model_caller.CallFailed
        The request key stayed in flight in another process for :data:`IN_FLIGHT_WAIT_S` s (nothing was sent;
        retryable: the runner nacks the task).
    Exception
        Whatever the provider raised, after the reservation was closed by
        :func:`geoagent.workers.billing.close_failed_call`.
    """
    def check_stop() -> None:
        if stopping is not None and stopping():
            raise Abandoned(STOP_NOT_SENT)

    check_stop()
    if ledger is None or model_cfg is None:
        if stopping is not None and getattr(provider, "supports_before_send", False) and request.before_send is None:
            async def gate() -> None:
                check_stop()

            request = dataclasses.replace(request, before_send=gate)
        return await provider.generate(request)

    async def call(request: ModelRequest) -> ModelResponse:
        """The metered call itself (with a store: run in the request key's turn, below)."""
        if store is not None:
            cached = await store.aget(request.key())
            if cached is not None:  # paid and stored by a run killed before its caller kept the answer
                return cached
        has_image = request.image is not None or bool(request.image_id)
        name = getattr(model_cfg, "name", request.model)
        if overrun is None or overrun.opened(name, has_image):
            return await send(request, has_image)

        async def far() -> bool:  # asked once per kind: waive the probe when the cap is far (billing.far_from_cap)
            from geoagent.config import DEFAULT_INPUT_ESTIMATE_FACTOR, reservation_usd
            from geoagent.workers.billing import far_from_cap

            factor = DEFAULT_INPUT_ESTIMATE_FACTOR if input_estimate_factor is None else float(input_estimate_factor)
            worst = reservation_usd(model_cfg, request.prompt, request.params, request.max_output_tokens,
                                    input_estimate_factor=factor, has_image=has_image)
            return far_from_cap((await ledger.asummary()).remaining_usd, int(getattr(model_cfg, "concurrency", 1)),
                                worst)

        # money39 #3: near the cap, until a bill of this auditor's model and kind is known in this process, one call
        # of it at a time (the store was read above, so a stored answer never waits)
        async with overrun.first_bill(name, has_image, paid=bool(getattr(model_cfg, "paid", True)), stopping=stopping,
                                      far=far):
            return await send(request, has_image)

    async def send(request: ModelRequest, has_image: bool) -> ModelResponse:
        """Reserve, send, and settle (or close the reservation of a failed call): the metered call's paid part."""
        # the model caller's reservation for the same request, [budget] input_estimate_factor included
        from geoagent.config import DEFAULT_INPUT_ESTIMATE_FACTOR, image_size_px, reservation_usd

        factor = DEFAULT_INPUT_ESTIMATE_FACTOR if input_estimate_factor is None else float(input_estimate_factor)
        size = image_size_px(None, None, request.image) if request.image is not None else None
        base_usd = reservation_usd(model_cfg, request.prompt, request.params, request.max_output_tokens,
                                   input_estimate_factor=factor, has_image=has_image, size_px=size)
        name = getattr(model_cfg, "name", request.model)
        worst_usd = base_usd * (overrun.factor(name, has_image) if overrun is not None else 1.0)
        # the token counts that amount is priced from, kept with the reservation (a withheld answer books them)
        worst = worst_case_usage(model_cfg, request, input_estimate_factor=factor, has_image=has_image, size_px=size)
        held: list[Any] = []  # the reservation, once made

        async def reserve() -> None:
            check_stop()  # at send time: a call that waited for its host while the stop came is not sent
            if store is None:
                reservation = await ledger.areserve(request.key(), worst_usd, model=name)
            else:
                # the model caller's send gate, in one database step: the stored answer; else, when another process of
                # the campaign has this key in flight (its lease expired and the task came here while its call is still
                # on the wire), nothing (sending now would pay twice); else the reservation (or the cap's refusal)
                from geoagent.runtime.ledger import BudgetExhausted
                from geoagent.workers.model_caller import _ELSEWHERE, _lookup_or_reserve

                cached, got = await _lookup_or_reserve(store, ledger, request.key(), worst_usd, name)
                if cached is not None:
                    raise _AnsweredElsewhere(cached)
                if got is _ELSEWHERE:
                    raise _InFlightElsewhere()
                if isinstance(got, BudgetExhausted):
                    raise got
                reservation = got
            if stopping is not None and stopping():
                # the stop came while the reservation's database job ran (the model caller's send gate does the
                # same): sending now would put a request on the wire after the stop, which the grace period's
                # cancel could cut in flight (unknown-outcome spend, paid again on resume). Release it, send nothing.
                with anyio.CancelScope(shield=True):  # a cancel now must not leave it open
                    await ledger.arelease(reservation, note="stop requested before sending")
                raise Abandoned(STOP_NOT_SENT)
            held.append(with_worst_tokens(reservation, worst.input_tokens, worst.output_tokens))

        hooked = bool(getattr(provider, "supports_before_send", False))
        if hooked:
            # reserve at send time, once the host admitted the request (as the model caller does): a call
            # still waiting for its host holds no reservation, so a crash leaves no unknown spend for it
            request = dataclasses.replace(request, before_send=reserve)
        loop = asyncio.get_running_loop()
        deadline = next_recover = 0.0
        delay_s = 0.01
        while True:
            try:
                if not hooked:
                    await reserve()
                resp = await provider.generate(request)
            except _AnsweredElsewhere as answered:  # stored meanwhile (by another process): no call
                return answered.response
            except _InFlightElsewhere:
                # nothing sent, nothing reserved: wait for the other process's call (its stored answer, or its
                # reservation closed), then look again; crash recovery turns a dead owner's reservation into
                # unknown-outcome spend, after which this call is sent
                now = loop.time()
                if not deadline:
                    deadline, next_recover = now + IN_FLIGHT_WAIT_S, now + IN_FLIGHT_RECOVER_S
                if now >= deadline:
                    from geoagent.workers.model_caller import CallFailed

                    raise CallFailed("the same request stayed in flight in another process") from None
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.25)
                check_stop()
                if loop.time() >= next_recover:
                    await ledger.db.run(ledger.recover)
                    next_recover = loop.time() + IN_FLIGHT_RECOVER_S
                continue
            except BaseException as exc:
                if held:  # else the reservation itself failed (e.g. BudgetExhausted): nothing was sent
                    # released only when certainly not billed; a cancelled or dropped call counts as unknown spend
                    await close_failed_call(ledger, held[0], exc, model_cfg)
                raise
            break
        if not held:
            raise RuntimeError(f"{type(provider).__name__} answered without awaiting request.before_send")
        # shielded: the answer is paid for; a cancel now (the runner's grace period ending) must neither leave the
        # reservation open nor keep the answer from the caller, who stores it (else the next run pays again)
        # an answer without a usable usage is kept and booked at its reservation, the worst case (as the model caller)
        resp, cost_usd = booked_answer(resp, held[0], model_cfg, request, input_estimate_factor=factor,
                                       has_image=request.image is not None or bool(request.image_id), size_px=size)
        if overrun is not None:
            overrun.note(name, has_image, cost_usd, held[0].amount_usd, base_usd)
        with anyio.CancelScope(shield=True):
            if store is None:
                await ledger.asettle(held[0], resp.usage, cost_usd)
            else:  # store + settle in one transaction (geoagent.runtime.store.ResponseStore.put)
                meta = {"model_name": getattr(model_cfg, "name", request.model), "provider": request.provider,
                        "model": request.model, "image_id": request.image_id, "params": request.params,
                        "prompt_sha256": hashlib.sha256(request.prompt.encode("utf-8")).hexdigest(),
                        "prompt_chars": len(request.prompt), "reserved_usd": held[0].amount_usd,
                        "task": (request.meta or {}).get("task")}
                from geoagent import constants as C

                # what answered, as a fact of this call (the exports' simulated column reads it)
                kind = provider_kind if provider_kind in C.PROVIDER_KINDS else (
                    request.provider if request.provider in (C.PROVIDER_KIND_SIMULATED, C.PROVIDER_KIND_REPLAY) else None)
                if getattr(resp, "sandbox", False):  # a sandbox fake answered, on whatever address (its header)
                    kind = C.PROVIDER_KIND_SIMULATED
                if kind is not None:
                    meta[C.REQUEST_META_PROVIDER_KIND] = kind
                await store.aput(request.key(), meta, resp, held[0], cost_usd=cost_usd)
        return resp

    if store is None:
        return await call(request)
    # one call per request key in this process, as the model caller's _one_call_per_key: a second worker with the
    # same key (its task leased again here after its lease expired, e.g. a wall-clock step past the visibility
    # timeout) waits for the first one's turn and then finds its stored answer; "held elsewhere" cannot see it
    # (one ledger owner per process)
    from geoagent.workers.model_caller import _KeyTurn

    async with _KeyTurn(_KEY_TURNS, request.key()):
        return await call(request)
