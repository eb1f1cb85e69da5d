"""The crawl as runtime stages (issue 5 point 8): one :class:`~geoagent.runtime.stage.Stage` per worker.

Data flow (one durable queue per edge, every message keyed so redelivery is harmless)::

    cities --[city_screener]--> admitted --[site_sampler]--> sites --[imagery_fetcher]--> images
    images --[image_auditor]--> sites_for_audit --[referenceability_auditor]--> rated --[ladder_builder]

The chain is linear (each stage has one output edge, so the runner's burst mode knows every stage's
upstream); the image auditor passes each site on to the referenceability auditor once its images are
audited. Every stage writes its result files under ``<state_dir>`` (``screening/``, ``sampling/``,
``image_audit/``, ``ref_candidates/``, ``ref_cities/``, ``rated/``, ``ladders/`` and the tables ``city_pool.csv``, ``sites.csv``,
``image_audit.csv``, ``candidate_referenceability.csv`` and ``candidate_referenceability_by_city.csv``,
``audit_decisions.jsonl``, ``audit_sensitive.jsonl``) and reuses a result that is
already there, so a restarted crawl repeats no API or model call that had completed. Thumbnails go to
``<images_root>/<site>/<image_id>.jpg`` (default ``state/images``, shared by the campaigns under one state
root); which of them a campaign uses is its own, by its own ``[crawl.fetcher]`` settings, in
``<state_dir>/image_selection/<site>.json`` (:mod:`geoagent.crawl.fetcher`, "Selections are per settings"). The referenceability auditor rates
per city (all of a city's candidates in fixed, QID-ordered batches; :class:`ReferenceabilityAuditorStage`),
so its calls do not depend on the order in which sites arrive.

Stages find their shared services at ``ctx.services["crawl"]`` (a :class:`CrawlServices`); under the
campaign engine, :func:`services_from_context` builds it on first use from the engine's ``config``
(``[crawl]`` section, ``[[models]]``, ``[hosts]``), ``http``, ``providers``, ``ledger`` and ``state_dir``.

Stopping (Ctrl-C / SIGTERM; :mod:`geoagent.runtime.worker`, "Stopping"): the screener, sampler and fetcher
make only free requests and write their files atomically, so they set ``cancel_on_stop``: their tasks in
flight are cancelled at once and released untouched. The two auditors make paid model calls and keep the
grace period (they send no new call after the stop: :mod:`geoagent.crawl.llmcall`); the grace is for the
paid calls in flight only, so the referenceability auditor starts no pageviews request after the stop either
(the site is released; its ratings are logged and the next run fetches the pageviews). The context carries the
shared HTTP client as ``http``, so no request of any stage retries after the stop. A host that cannot be
reached stops the stage that needs it with a line naming its config key (:func:`crawl_host_hint`).

Decision log (``crawl_decisions.jsonl``, exported as ``crawl_decisions``): besides the WDQS splits, the
``"event": "mapillary_box_full"`` notes (screener, sampler, fetcher: a Mapillary search box still full at the
minimum box size, whose images were kept as a lower bound, with ``reason`` and ``full_boxes``) and the sampler's
``"event": "site_shortfall"`` records (a city given fewer sites than ``sites_per_city``:
:func:`site_shortfall_decision`), one
``"event": "ref_city_rating"`` record per rating step of the referenceability auditor, with

* ``city``: the city's name (null for a site rated alone); ``site``: the site whose task ran the step;
  ``sites``: the sites of the city whose candidates were gathered; ``left_out``: site -> error, sites whose
  WDQS query failed permanently (their candidates are not in the step);
* ``n_candidates``: distinct candidates (QIDs) of the city, rated in the step (the merged list);
* ``n_site_listings``: the per-site candidate lists' lengths summed (a candidate within 6 km of k sites
  counts k times), so ``n_site_listings >= n_candidates``; ``n_shared_candidates``: distinct candidates
  listed by two sites or more (each paid once for the city);
* ``batch_size``: candidates per rating prompt; ``rating_batches``: fixed batches over the ``n_candidates``
  (``ceil(n_candidates / batch_size)``); ``rating_batches_asked`` and ``screening_batches_asked``: batches
  with an undecided candidate that were asked (sent, or replayed from ``audit_raw_answers.jsonl``) for the
  rating and for the sensitive-place screen (0 with ``sensitive_screen = false``);
* ``model_calls``: model calls sent by the step (rating and screening, plus the split-and-retry re-asks of
  a batch whose answer was partly unparseable), ``answers_replayed``: answers read back from
  ``audit_raw_answers.jsonl`` instead of a call (a re-run after a kill). ``model_calls + answers_replayed >=
  rating_batches_asked + screening_batches_asked``;
* ``n_not_rated_no_label``: candidates kept out of rating because WDQS gave no label in any asked language (the
  bare QID: :func:`geoagent.crawl.referenceability.has_no_label`); each has its decision in
  ``audit_decisions.jsonl`` (``not_rated`` = ``"no_label"``, ``familiarity`` null), and the crawl summary counts
  them;
* ``n_unreadable_answers``: answers of the step that could not be read at all (no array, no usable idx, a shifted
  numbering; an answer cut off by the output limit is not counted); ``n_reasked`` and ``n_screens_reasked``:
  candidates whose rating or contentious-name screen failed alone and was asked again alone with the reminder (in the
  step, where it failed, fixref41 #1 and #3; or re-asks left by an earlier run); ``n_rating_failed``: candidates whose
  rating failed (after the re-asks; they are in no ladder, crawl40b #1). A step that failed
  (:class:`geoagent.crawl.referenceability.AuditorOutputUnreadable`, crawl40 #1: a split whose halves both had a
  fault of the answers' format, or single failures of more than ``REF_MAX_FAILED_SHARE`` of the candidates, the
  split then stopping there, review40a #1) is logged too, with
  ``n_rating_failed`` and its ``error``, and without the batch counts; its task then fails (retried, then
  dead-lettered: the crawl ends ``incomplete``).

One ``"event": "ref_rating_reask"`` record per site task of a later run that asked its candidates whose ratings had
failed alone, with re-asks left, again (crawl40b #2: the run reopens those sites' tasks; since fixref41 #1 a run makes
a failure's re-asks where it failed, so these are the re-asks a run left:
:data:`~geoagent.crawl.referenceability.REF_MAX_FUTILE_REASKED`, a stop, an earlier version's log): ``city``,
``site``, ``qids`` (those asked), ``n_rated`` and ``n_still_failed`` (of them), ``model_calls`` and
``answers_replayed``.

Records of older versions carry ``n_shared`` (= ``n_site_listings - n_candidates``, the repeated listings),
``batches``, ``asked``, ``calls`` and ``replayed`` (= ``rating_batches``, ``rating_batches_asked``,
``model_calls``, ``answers_replayed``).

Note on edge names: ``sites_for_audit`` (described in :mod:`geoagent.constants` as sampler -> referenceability
auditor) is fed by the image auditor here, which keeps the chain linear for the runner's burst mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent import paths
from geoagent.clients.mapillary import MapillaryClient
from geoagent.clients.overpass import OverpassClient, OverpassQueryError
from geoagent.clients.pageviews import PageviewsClient
from geoagent.clients.wdqs import WdqsAreaTooDense, WdqsClient, WdqsQueryError
from geoagent.crawl import fetcher as fetch_mod
from geoagent.crawl import image_audit as ia
from geoagent.crawl.llmcall import AuditorBreaker, answer_kind, metered_generate
from geoagent.crawl.ladder import RatedCandidate, build_ladder, ladder_draw_version, ladder_file_name, write_ladder_csv
from geoagent.crawl.not_public import NotPublicHosts
from geoagent.crawl.referenceability import (
    REF_CITIES_DIR,
    AuditorOutputUnreadable,
    RefCandidate,
    ReferenceabilityAuditor,
    candidate_from_json,
    candidate_to_json,
    candidates_for_site,
    merge_site_candidates,
)
from geoagent.crawl.sampler import city_seed, sample_sites, site_shortfall, slug, write_sites_csv
from geoagent.crawl.screener import city_pool_rows, screen_city, write_city_pool_csv
from geoagent.crawl.settings import CitySpec, CrawlConfigError, CrawlSettings
from geoagent.files import atomic_open, atomic_write_bytes
from geoagent.runtime.queue import QueueError, Task, WorkQueue
from geoagent.runtime.stage import Deferred, Held, Message, PermanentFailure, Stage, StageContext
from geoagent.workers.billing import OverrunGuard
from geoagent.workers.images import without_jpeg_metadata
from geoagent.textfmt import first_few_text


def _dump(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def _load(path: Path) -> Any | None:
    if not path.is_file():
        return None
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None  # a torn file from a crash: redo the work


def city_key(city: str) -> str:
    """Queue key and file stem of a city: the ASCII letters and digits of its name, lower-cased (``"Mexico City"`` ->
    ``mexicocity``; :func:`geoagent.crawl.sampler.slug`, accents dropped, as the release names its files).

    Raises
    ------
    ValueError
        A name with no ASCII letter or digit (``"東京"``: written in another script), or a key that is no safe file
        name (:func:`geoagent.paths.safe_name`)."""
    s = slug(city)
    if not s:
        # "no letters" was wrong for a name in another script (security42 #4): its letters are not Latin
        raise ValueError(f"city name {city!r} has no ASCII letters or digits (the crawl keys a city by them): write "
                         "the name in Latin script, e.g. 'Tokyo'")
    return paths.safe_name(s, what="city key")


#: the crawl's file of pageviews answers (``state/<crawl>/``; :class:`geoagent.clients.cache.ResponseCache`)
PAGEVIEWS_CACHE_FILE = "pageviews_cache.sqlite"


@dataclass
class CrawlServices:
    """Process-wide crawl services shared by the stages (clients, providers, output folders, locks)."""

    settings: CrawlSettings
    http: Any
    state_dir: Path
    images_root: Path
    overpass: OverpassClient
    wdqs: WdqsClient
    mapillary: MapillaryClient
    pageviews: PageviewsClient | None
    image_provider: Any
    ref_provider: Any
    #: campaign ledger and the auditors' ``[[models]]`` entries (prices), when run by the engine
    ledger: Any = None
    #: the campaign's response store (same database as ``ledger``): each paid audit answer is stored with its
    #: settlement, so a run killed before the stage kept the answer finds it and does not pay again
    store: Any = None
    image_model_cfg: Any = None
    ref_model_cfg: Any = None
    #: what answers each auditor (:func:`geoagent.crawl.llmcall.auditor_provider_kind`: ``simulated`` / ``replay`` /
    #: ``model``, None when not known), recorded with each of its answers (the export's ``simulated`` column)
    image_kind: str | None = None
    ref_kind: str | None = None
    #: the campaign's ``[budget] input_estimate_factor``: the auditors' reservations use the model caller's rule
    input_estimate_factor: float | None = None
    #: set when the run is asked to stop: the auditors send no new model call (crawl.llmcall, "Stopping")
    stopping: bool = False
    #: set when the Mapillary API refused the access token (how, e.g. "HTTP 401, Mapillary error 190"):
    #: the stages that call Mapillary hold their tasks and stop (:class:`MapillaryTokenRefused`)
    mapillary_refused: str | None = None
    #: the open-data services that refused this client with HTTP 403, by operator (``"overpass"``; ``"wikimedia"``:
    #: WDQS and the pageviews API), with what and where (e.g. "HTTP 403 from query.wikidata.org ([crawl.endpoints]
    #: wdqs)"): the stages that call that operator's services hold their tasks and stop (:class:`OpenDataRefused`)
    open_data_refused: dict[str, str] = field(default_factory=dict)
    #: the auditor models whose host refused their key or account (:class:`geoagent.crawl.llmcall.AuditorBreaker`):
    #: the auditor's stage holds its tasks and stops (:meth:`audit_generate`)
    auditors: AuditorBreaker = field(default_factory=AuditorBreaker)
    #: thumbnail hosts that resolved to no public address, counted in a row per host (crawl43 #1): the failures
    #: it marks open the fetch stage's unreachable-host breaker (:mod:`geoagent.crawl.not_public`)
    not_public: NotPublicHosts = field(default_factory=NotPublicHosts)
    #: the auditors' overrun guard (:class:`geoagent.workers.billing.OverrunGuard`): after a call billed above its
    #: reservation, that auditor's later calls of the kind reserve what it showed it can bill
    overrun: OverrunGuard = field(default_factory=OverrunGuard)
    #: thumbnails this process downloaded (the fetcher's ``FetchResult.downloads`` of the sites it fetched; a
    #: reused selection, or a thumbnail already on disk, adds none): the summary's images line
    downloads_this_run: int = 0
    #: the campaign's ``[queue] max_attempts``: deliveries of a site's task before the fetcher takes a failed thumbnail
    #: transfer as the image's rejection (:class:`ImageryFetcherStage`)
    max_deliveries: int = C.DEFAULT_MAX_ATTEMPTS
    #: this process's requests to the crawl's APIs, kept in its tally file as they are sent
    #: (:class:`geoagent.crawl.tally.RequestTally`; set by :func:`services_from_context`, None otherwise)
    tally: Any = None
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _ref_auditor: ReferenceabilityAuditor | None = None
    #: identities of the WDQS splits in the decision log (:func:`split_identity`) up to byte ``_split_offset``
    _logged_splits: set[bytes] = field(default_factory=set)
    _split_offset: int = 0

    def lock(self, name: str) -> asyncio.Lock:
        if name not in self.locks:
            self.locks[name] = asyncio.Lock()
        return self.locks[name]

    def auditor_name(self, which: str) -> str:
        """The ``[[models]]`` name of the ``"image_audit"`` or ``"referenceability"`` auditor."""
        cfg = self.image_model_cfg if which == "image_audit" else self.ref_model_cfg
        section = self.settings.image_audit if which == "image_audit" else self.settings.referenceability
        return str(getattr(cfg, "name", None) or section.model)

    async def audit_generate(self, which: str, req: Any) -> Any:
        """One model call of the ``"image_audit"`` or ``"referenceability"`` auditor:
        :func:`geoagent.crawl.llmcall.metered_generate` with the campaign's ledger, store and stop flag, behind the
        auditors' breaker (:attr:`auditors`).

        Raises
        ------
        geoagent.crawl.llmcall.AuditorRefused
            The auditor's host refused its key or account, now or earlier in the run (nothing more is sent).
        Exception
            Whatever :func:`~geoagent.crawl.llmcall.metered_generate` raised."""
        image = which == "image_audit"
        provider, cfg = (self.image_provider, self.image_model_cfg) if image else (self.ref_provider, self.ref_model_cfg)
        name = self.auditor_name(which)
        self.auditors.gate(name)
        try:
            return await metered_generate(provider, req, ledger=self.ledger, model_cfg=cfg,
                                          stopping=lambda: self.stopping,
                                          input_estimate_factor=self.input_estimate_factor, store=self.store,
                                          provider_kind=self.image_kind if image else self.ref_kind,
                                          overrun=self.overrun)
        except Exception as exc:
            self.auditors.check(exc, name, getattr(cfg, "api_key_env", None))  # raises AuditorRefused for a refusal
            raise

    @property
    def ref_auditor(self) -> ReferenceabilityAuditor:
        if self._ref_auditor is None:
            async def generate(req: Any) -> Any:
                return await self.audit_generate("referenceability", req)

            from geoagent.engine import run_began
            from geoagent.runtime.procs import started_unix

            # fixreask46: "logged in this run" from when the crawl's processes running now began (run.lock), so the
            # re-ask limits mean one thing to every process of the crawl (none written: when this process started)
            self._ref_auditor = ReferenceabilityAuditor(
                self.ref_provider, self.settings.referenceability, self.state_dir, pageviews=self.pageviews,
                generate=generate, request_model=_model_id(self.ref_model_cfg, self.settings.referenceability),
                stopping=lambda: self.stopping, provider_kind=self.ref_kind,
                run_started=run_began(self.state_dir) or started_unix())
        return self._ref_auditor

    def decision_logger(self, stage: str, **fields: Any) -> Any:
        """An async callable that appends one record (with ``ts``, ``stage`` and ``fields``) to the crawl's
        decision log ``<state_dir>/crawl_decisions.jsonl`` (fsynced; e.g. every WDQS spatial split).

        A WDQS split is logged once: a task stopped after its split was logged (the sampler is cancelled at
        a stop) or killed repeats the query and the split when it runs again, and that record, equal to the
        logged one in everything but ``ts`` and ``reason`` (:func:`split_identity`), is not appended again.
        The logged splits' identities are read from the file (what was appended since the last look, so
        also the lines of earlier runs and of other processes of the campaign) before a split is logged."""
        import time as _time

        from geoagent.files import append_jsonl

        async def log(rec: dict[str, Any]) -> None:
            full = {"ts": round(_time.time(), 3), "stage": stage, **fields, **rec}
            async with self.lock("crawl_decisions"):
                path = self.state_dir / C.CRAWL_DECISIONS_FILE
                ident = split_identity(full)
                if ident is not None:
                    self._split_offset = read_split_identities(path, self._logged_splits, self._split_offset)
                    if ident in self._logged_splits:
                        return
                append_jsonl(path, [full])

        return log

    def api_hosts(self) -> dict[str, list[str]]:
        """The crawl's APIs and their HTTP client host keys (``"hostname[:port]"``): ``overpass`` (every mirror),
        ``wdqs``, ``mapillary``, ``pageviews`` (when configured) and ``thumbnails`` (the thumbnail CDN hosts other
        than the Graph API's, when any)."""
        hosts: dict[str, list[str]] = {"overpass": list(dict.fromkeys(self.overpass.hosts)), "wdqs": [self.wdqs.host],
                                       "mapillary": [self.mapillary.host]}
        if self.pageviews is not None:
            hosts["pageviews"] = [self.pageviews.host]
        thumbs = sorted(h for h in self.mapillary.thumb_hosts if h != self.mapillary.host)
        if thumbs:
            hosts["thumbnails"] = thumbs
        return hosts

    def api_of(self, host: str) -> str | None:
        """Which crawl API a request to ``host`` (an HTTP client host key) is counted under, as :meth:`api_stats`
        groups them (:meth:`api_hosts`); None for any other host (an auditor's model host)."""
        return next((api for api, hs in self.api_hosts().items() if host in hs), None)

    def api_stats(self) -> dict[str, dict[str, Any]]:
        """Per API: requests, retries, errors by reason and error rate (for ``status``).

        ``error_rate`` = failed attempts / attempts. Answers a client declared normal for its endpoint (a
        pageviews 404 means "no views": ``expected_status`` of the HTTP layer) are not errors; they are
        listed under ``answers``, with what they mean under ``answer_notes`` where the client said so. Thumbnail
        CDN hosts are summed under ``thumbnails`` when they differ from the Graph API host."""
        stats = self.http.stats()
        hosts = self.api_hosts()
        out = {}
        for api, hs in hosts.items():
            req = retries = 0
            errors: dict[str, int] = {}
            answers: dict[str, int] = {}
            notes: dict[str, str] = {}
            for h in hs:
                st = stats.get(h)
                if st is None:
                    continue
                req += st.requests
                retries += st.retries
                for k, v in st.errors.items():
                    errors[k] = errors.get(k, 0) + v
                for k, v in st.answers.items():
                    answers[k] = answers.get(k, 0) + v
                notes.update(st.answer_notes)
            n_err = sum(errors.values())
            out[api] = {"requests": req, "retries": retries, "errors": errors, "answers": answers, "answer_notes": notes,
                        "error_rate": round(n_err / req, 4) if req else 0.0}
        return out


#: the keys that identify a WDQS split record: which stage split which query of which area and box (not
#: when, nor the error text); a repeated task repeats the same split with the same values
SPLIT_IDENTITY_KEYS = ("stage", "event", "city", "site", "query", "area", "center", "radius_km", "depth", "box", "parts")


def split_identity(rec: dict[str, Any]) -> bytes | None:
    """What makes a decision-log record the same WDQS split as another (:data:`SPLIT_IDENTITY_KEYS`, as
    JSON); None for any other kind of record (``event`` other than ``wdqs_split``)."""
    if rec.get("event") != "wdqs_split":
        return None
    return orjson.dumps([rec.get(k) for k in SPLIT_IDENTITY_KEYS])


def read_split_identities(path: Path, into: set[bytes], offset: int = 0) -> int:
    """Add to ``into`` the :func:`split_identity` of every WDQS split in the decision log at ``path`` from
    byte ``offset`` on; returns the offset after the last whole line read (pass it to the next call to
    read only what was appended since). Lines that are not JSON objects are skipped; a last line without
    its newline (being written, or torn by a crash) is left for the next call. A missing file, or one
    shorter than ``offset`` (replaced), is read from its start."""
    if not path.is_file():
        return 0
    with path.open("rb") as f:
        f.seek(0, 2)
        if f.tell() < offset:
            offset = 0
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and (ident := split_identity(rec)) is not None:
            into.add(ident)
    return offset + end


def _model_id(model_cfg: Any, section: Any) -> tuple[str, str]:
    """(provider kind, API model id) for requests: from the ``[[models]]`` entry when there is one."""
    if model_cfg is not None:
        return str(model_cfg.provider), str(model_cfg.model)
    return section.provider, section.model


def _provider_for(kind: str, model: str, providers: dict[str, Any] | None, http: Any, seed: int) -> Any:
    if providers and model in providers:
        return providers[model]
    if kind == "simulated":
        import geoagent.crawl.simulate  # noqa: F401  (registers the audit responders)
        from geoagent.providers import make_provider
        from geoagent.providers.settings import ProviderSettings

        return make_provider(ProviderSettings(kind="simulated", model=model, seed=seed), http)
    raise CrawlConfigError(f"no provider configured for auditor model {model!r} (add it to [[models]])")


def build_crawl_services(settings: CrawlSettings, http: Any, *, state_dir: str | Path, images_root: str | Path | None = None,
                         mapillary_token: str | None = None, providers: dict[str, Any] | None = None,
                         overpass_check_slots: bool = True, configured_hosts: Sequence[str] = (),
                         dotenv_path: str | Path | None = None) -> CrawlServices:
    """Create the clients (with the usage-policy host limits) and providers for a crawl.

    The Mapillary token is ``mapillary_token`` or else the variable named by ``[crawl.endpoints]
    mapillary_token_env``, from the environment or the ``.env`` file ``dotenv_path``
    (:func:`geoagent.secrets.lookup_secret`; default ``$GEOAGENT_DOTENV`` or ``./.env``).

    A host listed in ``configured_hosts`` (the campaign's ``[hosts]`` table) keeps the policy the
    HttpClient already has; every other API host gets its usage-policy default from the crawl settings.

    Raises
    ------
    CrawlConfigError
        When the Mapillary token is missing or does not start with ``MLY|`` (names the environment variable, never the
        value) or an auditor has no provider.
    """
    from geoagent.secrets import lookup_secret

    ep = settings.endpoints
    if not mapillary_token:
        secret = lookup_secret(ep.mapillary_token_env, dotenv_path=dotenv_path)
        mapillary_token = secret.reveal() if secret is not None else ""
    token = mapillary_token
    if not token:
        raise CrawlConfigError(f"Mapillary token missing: set the environment variable {ep.mapillary_token_env} "
                               "(or put it in .env)")
    from geoagent.clients.mapillary import token_problem

    problem = token_problem(ep.mapillary_token_env, token)  # before any request (crawl40 #8)
    if problem:
        raise CrawlConfigError(problem)
    ua = settings.user_agent
    configured = set(configured_hosts)

    def pol(api: str, url: str) -> Any:
        from geoagent.clients.overpass import host_of
        from geoagent.runtime.http import host_name

        # a [hosts] entry without a port covers the host on every port (review40b: it was set aside for a URL with one)
        key = host_of(url)
        return None if key in configured or host_name(key) in configured else settings.host_policy(api)

    pv = None
    if settings.referenceability.pageviews:
        # answers of settled windows kept across runs: a stopped crawl does not ask Wikimedia again (walk24 #4);
        # the file is opened at the first answer it could hold
        pv = PageviewsClient(http, ep.pageviews, ua, policy=pol("pageviews", ep.pageviews),
                             cache=Path(state_dir) / PAGEVIEWS_CACHE_FILE)
    return CrawlServices(
        settings=settings, http=http, state_dir=Path(state_dir),
        images_root=Path(images_root) if images_root else paths.state_root() / C.IMAGES_DIR,
        overpass=OverpassClient(http, ep.overpass, ua, policy=pol("overpass", ep.overpass), check_slots=overpass_check_slots,
                                mirrors=ep.overpass_mirrors),
        wdqs=WdqsClient(http, ep.wdqs, ua, policy=pol("wdqs", ep.wdqs)),
        mapillary=MapillaryClient(http, ep.mapillary, token, ua, policy=pol("mapillary", ep.mapillary),
                                  thumb_policy=settings.host_policy("thumbnails")),
        pageviews=pv,
        image_provider=_provider_for(settings.image_audit.provider, settings.image_audit.model, providers, http, settings.seed),
        ref_provider=_provider_for(settings.referenceability.provider, settings.referenceability.model, providers, http, settings.seed),
    )


def services_from_context(ctx: StageContext) -> CrawlServices:
    """The crawl services of a campaign run by the engine: built once from the engine's services
    (``config`` with its ``[crawl]`` section, ``http``, ``providers``, ``state_dir``) and stored at
    ``ctx.services["crawl"]``. Each request the HTTP client sends to a crawl API is counted in this process's
    tally file (:class:`geoagent.crawl.tally.RequestTally`, ``<state_dir>/api_requests/``: the summary's requests
    over every run). Images go to ``<state root>/images``; the temporary files that a crawl
    killed inside an image write left there are removed first (:func:`geoagent.files.remove_stale_temp_files`:
    only those of processes that no longer exist, so a crawl running meanwhile keeps its own)."""
    from geoagent.files import remove_stale_temp_files

    svc = ctx.services.get("crawl")
    if svc is not None:
        return svc
    cfg = ctx.get("config")
    settings = cfg.section("crawl") if hasattr(cfg, "section") else cfg
    if not isinstance(settings, CrawlSettings):
        raise CrawlConfigError("the campaign config has no valid [crawl] section")
    state_root = cfg.state_root() if hasattr(cfg, "state_root") else paths.state_root()
    svc = build_crawl_services(settings, ctx.get("http"), state_dir=ctx.services.get("state_dir") or cfg.state_dir(),
                               images_root=Path(state_root) / C.IMAGES_DIR, providers=ctx.services.get("providers"),
                               configured_hosts=list(getattr(cfg, "hosts", {}) or {}),
                               dotenv_path=ctx.services.get("dotenv_path"))
    remove_stale_temp_files(svc.images_root)
    from geoagent.crawl.tally import RequestTally

    svc.tally = RequestTally(svc.state_dir, svc.api_of)
    listeners = getattr(svc.http, "request_listeners", None)
    if isinstance(listeners, list):
        listeners.append(svc.tally.count)
    svc.ledger = ctx.services.get("ledger")
    max_attempts = getattr(getattr(cfg, "queue", None), "max_attempts", None)
    if isinstance(max_attempts, int) and not isinstance(max_attempts, bool):  # the queue's, for the fetcher's retries
        svc.max_deliveries = max_attempts
    svc.store = ctx.services.get("store")  # a paid answer is stored with its settlement (llmcall.metered_generate)
    budget = getattr(cfg, "budget", None)
    svc.input_estimate_factor = getattr(budget, "input_estimate_factor", None)
    models = {m.name: m for m in getattr(cfg, "models", [])}
    svc.image_model_cfg = models.get(settings.image_audit.model)
    svc.ref_model_cfg = models.get(settings.referenceability.model)
    from geoagent.crawl.llmcall import auditor_provider_kind

    kinds = ctx.services.get(C.SERVICE_PROVIDER_KINDS)  # the engine's, from the config as written
    svc.image_kind = auditor_provider_kind(settings.image_audit, svc.image_model_cfg, kinds)
    svc.ref_kind = auditor_provider_kind(settings.referenceability, svc.ref_model_cfg, kinds)
    ctx.services["crawl"] = svc
    return svc


def _svc(ctx: StageContext) -> CrawlServices:
    return services_from_context(ctx)


class MapillaryTokenRefused(Held):
    """The Mapillary API refused the access token (HTTP 401/403, Graph error 190): like a model's refused API key
    (:mod:`geoagent.workers.model_caller`, authentication breaker), the first refusal holds the task untouched (no
    attempt counted, never dead-lettered), every stage that calls Mapillary stops leasing (:meth:`_CrawlStage.runnable`)
    and holds what it has in flight, so no city is screened on Overpass again and again, and the engine ends the
    run ``authentication failed`` (exit 5) naming the token's variable (never its value); the work stays queued
    for a re-run with the right token."""


class OpenDataRefused(Held):
    """Overpass, the Wikidata Query Service or the pageviews API answered HTTP 403: the service refuses this client (a
    blocked IP or application, or a User-Agent it does not accept; api-notes: the Wikimedia User-Agent policy, "403 when
    blocked"). Every later request would be refused too and a client that keeps knocking risks a longer ban, so, as
    for a refused Mapillary token (:class:`MapillaryTokenRefused`), the first refusal holds the task untouched (no
    attempt counted, never dead-lettered: before, each city and site was dead-lettered on its own 403 and the crawl
    went on asking), every stage that calls that operator's services (:data:`OPEN_DATA_OPERATORS`) stops leasing, and the engine ends the run
    ``authentication failed`` (exit 5) with the host, the ``[crawl.endpoints]`` key naming it and what to check
    (:data:`OPEN_DATA_REFUSED_FIX`); the work stays queued for a re-run."""


#: what to do about a refusal of the open-data services (:class:`OpenDataRefused`)
OPEN_DATA_REFUSED_FIX = ("check [crawl] contact and tool_name (they make the User-Agent), wait until the block is "
                         "lifted, or point [crawl.endpoints] at a server of your own")


#: the operator of each open-data endpoint key (:class:`OpenDataRefused`): a block is the operator's, so a 403 from
#: WDQS stops the pageviews requests too (Wikimedia's User-Agent policy covers both), not the Overpass screener
OPEN_DATA_OPERATORS = {"overpass": "overpass", "overpass_mirrors": "overpass", "wdqs": "wikimedia",
                       "pageviews": "wikimedia"}


def open_data_refusal(svc: CrawlServices, exc: BaseException) -> tuple[str, str] | None:
    """``(operator, what)`` when ``exc`` is an HTTP 403 from Overpass (or a mirror), WDQS or the pageviews API:
    the operator (:data:`OPEN_DATA_OPERATORS`) and ``"HTTP 403 from <host> ([crawl.endpoints] <key>)"``; else None:
    a 403 from any other host (Mapillary's API has its token rule, a thumbnail CDN refuses one image) is not
    theirs."""
    from geoagent.runtime.http import PermanentHTTPError, host_key

    if not isinstance(exc, PermanentHTTPError) or exc.status != 403:
        return None
    host = host_key(exc.url)
    ep = svc.settings.endpoints
    keys = [k for k, url in [("overpass", ep.overpass), *(("overpass_mirrors", m) for m in ep.overpass_mirrors),
                             ("wdqs", ep.wdqs), ("pageviews", ep.pageviews)] if url and host_key(url) == host]
    if not keys:
        return None
    return OPEN_DATA_OPERATORS[keys[0]], f"HTTP 403 from {host} ([crawl.endpoints] {' / '.join(dict.fromkeys(keys))})"


class _CrawlStage(Stage):
    """Common start hook: make sure the crawl services exist before the first task."""

    _crawl_svc: CrawlServices | None = None
    #: the stage calls the Mapillary API: it stops once the token was refused (:class:`MapillaryTokenRefused`)
    uses_mapillary = False
    #: the operators of the open-data services the stage calls (:data:`OPEN_DATA_OPERATORS`): it stops once one of
    #: them refused this client (:class:`OpenDataRefused`)
    uses_open_data: tuple[str, ...] = ()

    def _open_data_refusal(self, svc: CrawlServices | None = None) -> str | None:
        svc = svc if svc is not None else self._crawl_svc
        if svc is None:
            return None
        return next((svc.open_data_refused[op] for op in self.uses_open_data if op in svc.open_data_refused), None)
    #: the auditor the stage calls (``"image_audit"`` / ``"referenceability"``, :meth:`CrawlServices.audit_generate`):
    #: it stops once that model's host refused its key or account (:class:`geoagent.crawl.llmcall.AuditorRefused`)
    uses_auditor: str | None = None

    def _auditor_refusal(self) -> str | None:
        svc = self._crawl_svc
        if self.uses_auditor is None or svc is None:
            return None
        return svc.auditors.message(svc.auditor_name(self.uses_auditor))

    def runnable(self) -> bool:
        """False once the Mapillary token was refused, for a stage that calls Mapillary, or once its auditor model
        was refused, for an auditor's stage (the runner stops leasing)."""
        svc = self._crawl_svc
        return (not (self.uses_mapillary and svc is not None and svc.mapillary_refused)
                and not self._open_data_refusal()
                and not self._auditor_refusal())

    def auth_lines(self) -> list[str]:
        """One line when the Mapillary API refused the token, or the stage's auditor model was refused (the engine
        ends the run exit 5 with it), else []."""
        svc = self._crawl_svc
        lines = [_token_message(svc)] if self.uses_mapillary and svc is not None and svc.mapillary_refused else []
        if (refused := self._open_data_refusal()) is not None:
            lines.append(_open_data_message(refused))
        refusal = self._auditor_refusal()
        return lines + ([f"auditor [crawl.{self.uses_auditor}]: {refusal}"] if refusal else [])

    @staticmethod
    def _token_gate(svc: CrawlServices, exc: BaseException | None = None) -> None:
        """Raise :class:`MapillaryTokenRefused` when the token was refused already, or when ``exc`` is the refusal
        (recorded on ``svc`` for every stage)."""
        if exc is not None and svc.mapillary_refused is None:
            svc.mapillary_refused = svc.mapillary.token_refused(exc)
        if svc.mapillary_refused:
            raise MapillaryTokenRefused(_token_message(svc))

    def _open_data_gate(self, svc: CrawlServices, exc: BaseException | None = None) -> None:
        """Raise :class:`OpenDataRefused` when the operator of an open-data service this stage calls refused this
        client already, or when ``exc`` is a refusal (:func:`open_data_refusal`; recorded on ``svc`` for every stage,
        by operator)."""
        if exc is not None and (got := open_data_refusal(svc, exc)) is not None:
            svc.open_data_refused.setdefault(*got)
        if (refused := self._open_data_refusal(svc)) is not None:
            raise OpenDataRefused(_open_data_message(refused))

    def _api_gates(self, svc: CrawlServices, exc: BaseException | None = None) -> None:
        """Both refusal gates of a stage calling Mapillary and an open-data service: :meth:`_token_gate`, then
        :meth:`_open_data_gate` (``exc``: the call's failure, or None before the call)."""
        self._token_gate(svc, exc)
        self._open_data_gate(svc, exc)

    async def start(self, ctx: StageContext) -> None:
        self._crawl_svc = services_from_context(ctx)

    def stop_requested(self) -> None:
        """The run is stopping: the crawl's auditors send no new model call (shared services, so one
        stage's hook stops them all; every stage is told)."""
        if self._crawl_svc is not None:
            self._crawl_svc.stopping = True

    def unreachable_hint(self, host: str) -> str | None:
        """The config key whose URL names ``host`` (:func:`crawl_host_hint`), for the stop line of the
        runner's unreachable-host breaker, or for a thumbnail host that resolved to no public address, the DNS
        answer to check (:meth:`geoagent.crawl.not_public.NotPublicHosts.hint`); None before the stage started or
        for a host no key names."""
        if self._crawl_svc is None:
            return None
        return self._crawl_svc.not_public.hint(host) or crawl_host_hint(self._crawl_svc, host)

    def host_labels(self) -> dict[str, str]:
        """Readable names of the hosts this run found that no config key names (``{host: label}``, for
        ``status``, recorded by :class:`geoagent.runtime.progress.Progress`): the Mapillary thumbnail CDN
        hosts the Graph API's thumbnail URLs pointed at, labelled :data:`THUMBNAIL_CDN_LABEL` (a CDN host
        that is the Graph API's own keeps the API's label)."""
        svc = self._crawl_svc
        if svc is None:
            return {}
        return {h: THUMBNAIL_CDN_LABEL for h in sorted(svc.mapillary.thumb_hosts) if h != svc.mapillary.host}


#: how ``status`` names a Mapillary thumbnail CDN host (:meth:`_CrawlStage.host_labels`)
THUMBNAIL_CDN_LABEL = "Mapillary thumbnail CDN"


def _token_message(svc: CrawlServices) -> str:
    return (f"the Mapillary API refused the access token ({svc.mapillary_refused}): check "
            f"{svc.settings.endpoints.mapillary_token_env}")


def _open_data_message(refused: str) -> str:
    return f"the crawl was refused ({refused}): {OPEN_DATA_REFUSED_FIX}"


def crawl_host_hint(svc: CrawlServices, host: str) -> str | None:
    """What to check when ``host`` (``"hostname:port"`` or ``"hostname"``) cannot be reached: the
    ``[crawl.endpoints]`` key(s) whose URL names it (``overpass``, ``overpass_mirrors``, ``wdqs``,
    ``pageviews``, ``mapillary``), the Mapillary thumbnail URLs for a thumbnail CDN host, or the
    ``[[models]]`` entry whose ``base_url`` names an auditor's host; None for any other host."""
    from geoagent.runtime.http import host_key

    ep = svc.settings.endpoints
    urls = [("overpass", ep.overpass)] + [("overpass_mirrors", m) for m in ep.overpass_mirrors] + [
        ("wdqs", ep.wdqs), ("pageviews", ep.pageviews), ("mapillary", ep.mapillary)]
    keys = list(dict.fromkeys(k for k, url in urls if url and host_key(url) == host))
    if keys:
        return f"[crawl.endpoints] {' / '.join(keys)}"
    if host in getattr(svc.mapillary, "thumb_hosts", ()):
        return (f"the thumbnail URLs the Mapillary API ([crawl.endpoints] mapillary) returned in "
                f"{svc.settings.fetcher.thumb_field} ([crawl.fetcher] thumb_field)")
    for what, m in (("image_audit", svc.image_model_cfg), ("referenceability", svc.ref_model_cfg)):
        if m is not None and getattr(m, "host", None) and str(m.host).lower() == host:
            if getattr(m, "default_base_url", None):  # no base_url: its provider's own API (newuser41 #C)
                return (f"network / DNS / proxy access to {host} ({m.name!r}, the [crawl.{what}] "
                        "model, has no [[models]] base_url: it calls its provider's own API)")
            return f"[[models]] base_url of {m.name!r} (the [crawl.{what}] model)"
    return None


def _permanent(exc: Exception) -> bool:
    # an area still timing out after every spatial split will do so on redelivery too: dead-letter it with
    # its message (names the city or site); `run.py dead CONFIG --requeue` retries it
    return isinstance(exc, (OverpassQueryError, WdqsQueryError, WdqsAreaTooDense, ValueError))


def record_watched_city(record: Callable[[], None] | None, city: CitySpec) -> None:
    """Record a city a ``--watch`` crawl planned from its edited config in the run's manifest entry now
    (``record``: the engine's ``record_run_so_far``, :meth:`geoagent.runtime.manifest.Manifest.record_progress`;
    None: nothing to call), not only at the run's end, which a crawl killed outright never reaches. A failure
    (any exception of ``record``) does not stop the crawl, whose end records the city again: it is said in a
    warning (:class:`geoagent.config.InputWarning`: a ``warning:`` line on the CLI's console, as the crawl's other
    warnings), e.g. ``warning: crawl --watch: the city 'Lyon' added while watching is not recorded in the manifest
    yet (the end of the run records it): ...``."""
    if record is None:
        return
    try:
        record()
    except Exception as exc:  # noqa: BLE001 - the run's end records it again; the crawl goes on
        import warnings

        from geoagent.config import InputWarning

        warnings.warn(f"crawl --watch: the city {city.city!r} added while watching is not recorded in the manifest "
                      f"yet (the end of the run records it): {exc}", InputWarning, stacklevel=2)


class CityScreenerStage(_CrawlStage):
    """cities -> admitted: screen one city (Sec. 3.1, 3.2.1); rewrite ``city_pool.csv``."""

    name = C.STAGE_SCREENER
    input_edge = C.EDGE_CITIES
    output_edge = C.EDGE_ADMITTED
    concurrency = 2
    uses_mapillary = True
    uses_open_data = ("overpass",)
    #: a stop cancels screenings in flight at once (released untouched): Overpass and Mapillary requests are
    #: free, and the screening record and city_pool.csv are written atomically once the city is screened, so
    #: a cancelled city leaves nothing half done (Ctrl-C does not wait on a stalled Overpass query or slot)
    cancel_on_stop = True

    def __init__(self) -> None:
        self._watch: asyncio.Task[None] | None = None
        self._stop_watch = asyncio.Event()
        self._watch_queue: WorkQueue | None = None

    async def start(self, ctx: StageContext) -> None:
        """With ``[crawl] watch = true`` (or ``ctx.services["watch"]`` set by the daemon's ``--watch``) and a
        config file, keep re-reading it for new cities."""
        svc = self._crawl_svc = services_from_context(ctx)
        cfg = ctx.services.get("config")
        source = getattr(cfg, "source", None)
        watch = svc.settings.watch or bool(ctx.services.get("watch"))
        if watch and source and Path(str(source)).is_file():
            opener = ctx.services.get("open_queue")  # the campaign's backend (engine), else a SQLite file
            if opener is not None:
                self._watch_queue = opener(C.EDGE_CITIES)
            else:
                from geoagent.runtime.queue import open_queue

                root = ctx.services.get("queues_root") or paths.queues_root()
                self._watch_queue = open_queue(root, ctx.campaign, C.EDGE_CITIES)
            # cities planned while watching count in the run's "planned N cities", and the run's manifest records
            # the config it ended with: these cities in the file's order (CrawlCampaign.config_at_end)
            added = ctx.services.setdefault(C.SERVICE_PLANNED_DURING_RUN, [0])
            seen = ctx.services.setdefault(SERVICE_WATCHED_CITIES, {"added": [], "last_read": None})

            def on_new(city: CitySpec) -> None:
                added[0] += 1
                seen["added"].append(city)
                seen["recorded"] = True  # config_at_end: a record taken back later restores the start's config
                # recorded in the run's manifest entry now, before the city is queued (watch_config_cities), not
                # only at the run's end: a crawl killed outright (SIGKILL) would leave the config of its start
                # there, and the next run would call the added city a config change
                record_watched_city(ctx.services.get(C.SERVICE_RECORD_RUN_SO_FAR), city)

            def on_not_queued(city: CitySpec) -> None:
                # the queue held it already (another process of the campaign queued it) or the put failed: not
                # planned by this run after all, so its record is taken back
                added[0] -= 1
                seen["added"] = [c for c in seen["added"] if c is not city]
                record_watched_city(ctx.services.get(C.SERVICE_RECORD_RUN_SO_FAR), city)

            def on_read(cities: list[CitySpec]) -> None:
                seen["last_read"] = list(cities)

            self._watch = asyncio.create_task(watch_config_cities(
                str(source), self._watch_queue, stop=self._stop_watch, on_new=on_new, on_read=on_read,
                on_not_queued=on_not_queued, known_keys=[key for key, _ in city_messages(svc.settings.cities)]))

    async def stop(self, ctx: StageContext) -> None:
        if self._watch is not None:
            self._stop_watch.set()
            await self._watch
            self._watch = None
        if self._watch_queue is not None:
            await self._watch_queue.close()
            self._watch_queue = None

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        svc = _svc(ctx)
        try:
            city = CitySpec.model_validate(task.payload["city"])
            key = city_key(city.city)
        except Exception as e:  # noqa: BLE001 - bad task payload
            raise PermanentFailure(f"bad city task {task.key}: {e}") from None
        path = svc.state_dir / "screening" / f"{key}.json"
        rec = _load(path)
        if rec is None:
            self._api_gates(svc)
            try:
                res = await screen_city(city, svc.overpass, svc.mapillary, svc.settings.screener,
                                        on_note=svc.decision_logger(self.name, city=city.city))
            except Exception as e:
                self._api_gates(svc, e)
                if _permanent(e):
                    raise PermanentFailure(str(e)) from None
                raise
            rec = res.to_json() | {"row": res.row()}
            _dump(path, rec)
        async with svc.lock("city_pool"):
            recs = [r for p in sorted((svc.state_dir / "screening").glob("*.json")) if (r := _load(p))]
            write_city_pool_csv(city_pool_rows(recs), svc.state_dir / "city_pool.csv")
        if not rec["eligible"]:
            return []
        return [(f"city:{key}", {"city": city.model_dump(), "screening": {k: v for k, v in rec.items() if k != "row"}})]


def _write_csv(rows: Sequence[dict[str, Any]], path: Path, columns: Sequence[str]) -> None:
    import csv

    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in columns})


class SiteSamplerStage(_CrawlStage):
    """admitted -> sites: shuffled, spacing-first, coverage-checked site choice (Sec. 3.2.1)."""

    name = C.STAGE_SAMPLER
    input_edge = C.EDGE_ADMITTED
    output_edge = C.EDGE_SITES
    concurrency = 2
    uses_mapillary = True
    uses_open_data = ("wikimedia",)  # WDQS
    #: a stop cancels samplings in flight at once (released untouched): WDQS and Mapillary requests are free
    #: and the sampling record and sites.csv are written atomically at the end (a WDQS split already logged
    #: to crawl_decisions.jsonl is not logged again when the next run repeats the query:
    #: :meth:`CrawlServices.decision_logger`)
    cancel_on_stop = True

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        svc = _svc(ctx)
        city = CitySpec.model_validate(task.payload["city"])
        key = city_key(city.city)
        path = svc.state_dir / "sampling" / f"{key}.json"
        # one city at a time: a landmark already a site of a city sampled before is skipped (sampler version 5), so
        # the city sampled first keeps it whatever the stage's concurrency, and across the processes of the campaign
        # (--stages) sharing its state folder (sampling_lock); a stored record is kept as it is (resume)
        async with sampling_lock(svc):
            rec = _load(path)
            if rec is None:
                seed = city_seed(svc.settings.seed, city.city)
                self._api_gates(svc)
                try:
                    res = await sample_sites(city, svc.wdqs, svc.mapillary, svc.settings.sampler, seed,
                                             on_split=svc.decision_logger(self.name, city=city.city),
                                             on_note=svc.decision_logger(self.name, city=city.city),
                                             claimed=claimed_sites(svc.state_dir, exclude=key))
                except Exception as e:
                    self._api_gates(svc, e)
                    if _permanent(e):
                        raise PermanentFailure(str(e)) from None
                    raise
                rec = res.to_json()
                short = site_shortfall(rec, svc.settings.sampler, key)
                if short is not None:  # in the decision log too, before the record that ends the sampling
                    await svc.decision_logger(self.name, city=city.city)(site_shortfall_decision(short))
                _dump(path, rec)
        async with svc.lock("sites"):
            rows = [s for p in sorted((svc.state_dir / "sampling").glob("*.json")) if (r := _load(p)) for s in r["sites"]]
            write_sites_csv(rows, svc.state_dir / "sites.csv")
        return [(f"site:{s['site']}", {"site": s}) for s in rec["sites"]]


def site_shortfall_decision(short: dict[str, Any]) -> dict[str, Any]:
    """The decision-log record (``crawl_decisions.jsonl``, ``"event": "site_shortfall"``) of a city the site sampler
    gave fewer sites than ``sites_per_city`` (``short``: :func:`geoagent.crawl.sampler.site_shortfall`): ``sites``,
    ``sites_per_city``, ``n_candidates``, ``skipped`` (walk decision -> count) and ``types_without_candidates``
    (exported in the ``extra`` column), and ``reason``, the line the summary gives the city
    (:func:`geoagent.crawl.sampler.site_shortfall_lines`). Logged when the city is sampled, just before its sampling
    record is stored (a crash between the two logs it again when the city is sampled anew: the same record with
    another ``ts``); the summary and ``status`` read the sampling records, so a crawl sampled before this record
    existed says it there only."""
    from geoagent.crawl.sampler import site_shortfall_lines

    line = site_shortfall_lines([short], 1)[1].strip()
    return {"event": "site_shortfall", "reason": line, "sites": short["sites"],
            "sites_per_city": short["sites_per_city"], "n_candidates": short["n_candidates"],
            "skipped": short["skipped"], "types_without_candidates": short["types_without_candidates"]}


#: the site sampler's cross-process lock file, in the campaign's state folder (:func:`sampling_lock`)
SAMPLING_LOCK_FILE = "sampling.lock"
#: how often a process waiting for another's sampling lock tries again, s
SAMPLING_LOCK_POLL_S = 0.05


@contextlib.asynccontextmanager
async def sampling_lock(svc: CrawlServices) -> AsyncIterator[None]:
    """Hold the site sampler's lock: one city sampled at a time by the whole campaign, so that the city sampled
    first keeps a landmark two cities share (sampler version 5, :func:`claimed_sites`).

    Two levels: the process's own ``asyncio.Lock`` (``svc.lock("sampling")``: the stage's concurrent tasks), then an
    exclusive ``fcntl.flock`` on ``<state_dir>/sampling.lock`` (:data:`SAMPLING_LOCK_FILE`) for the processes of one
    campaign sharing its state folder (``run.py crawl`` started twice, ``run.py run CONFIG --stages ...``; every
    process of a Redis-backed crawl shares that folder too, as checked at start:
    :func:`geoagent.runtime.backend.check_one_state_folder`). The flock is taken without blocking
    and retried every :data:`SAMPLING_LOCK_POLL_S` s, so a waiting task stays cancellable (a stop cancels samplings
    in flight) and never blocks the event loop (:func:`state_flock`).

    Raises
    ------
    OSError
        The lock file cannot be created (the state folder is not writable)."""
    async with svc.lock("sampling"):
        async with state_flock(Path(svc.state_dir) / SAMPLING_LOCK_FILE, poll_s=SAMPLING_LOCK_POLL_S):
            yield


@contextlib.asynccontextmanager
async def state_flock(path: Path, *, poll_s: float | None) -> AsyncIterator[bool]:
    """Hold an exclusive ``fcntl.flock`` on lock file ``path`` (created empty where missing, with its folder) for
    the block: the lock of the processes sharing a crawl's state folder. Yields True once held.

    ``poll_s``: while another process holds it, the flock is tried again every ``poll_s`` seconds (never blocking
    the event loop, so the waiting task stays cancellable); None: not waited for, False is yielded at once instead
    (the caller does not run its block's work). It is released by closing the file, also when the process dies
    (the kernel drops a dead process's flock: a crashed holder frees it). Where the file system has no ``flock``
    (``OSError`` other than "would block") True is yielded unlocked: the caller's process-wide ``asyncio.Lock``
    is then the only guard, and a warning says so, once per lock file (fixreask46 #2). Two tasks of one process
    that open the file each exclude each other too (a flock belongs to the open file).

    Raises
    ------
    OSError
        The lock file cannot be created (its folder is not writable)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # another process holds it
                if poll_s is None:
                    yield False
                    return
                await asyncio.sleep(poll_s)
            except OSError as e:  # no flock on this file system: the process's own lock only
                _warn_no_flock(path, e)
                break
        yield True  # closing the file releases the flock


#: the lock files :func:`state_flock` found without ``flock`` (their warning given): fixreask46 #2
_NO_FLOCK_WARNED: set[str] = set()


def _warn_no_flock(path: Path, exc: OSError) -> None:
    """Warn, once per lock file and process, that ``path`` could not be locked (``exc``: ENOLCK on a network mount,
    EOPNOTSUPP, ...), so :func:`state_flock` hands its block out with the process's own lock only (fixreask46 #2: it
    did so silently): several processes of the crawl on this state folder may then each run a city's
    referenceability step or re-asks, or sample a city, (docs/crawls.md, "Several processes, one state folder")."""
    import logging

    key = str(path)
    if key in _NO_FLOCK_WARNED:
        return
    _NO_FLOCK_WARNED.add(key)
    logging.getLogger(__name__).warning(
        "the file system of %s does not lock files (flock: %s): this process goes on with its own lock only, so "
        "several processes of the crawl on this state folder may each repeat a city's step (its site sampling, its "
        "referenceability rating and re-asks); run one process per state folder there, or put the state folder on a "
        "file system that supports flock (docs/crawls.md, \"Several processes, one state folder\")",
        path, exc.strerror or exc)


def claimed_sites(state_dir: str | Path, *, exclude: str | None = None) -> dict[str, str]:
    """QID -> city name of every site in the crawl's sampling records (``<state_dir>/sampling/<city key>.json``,
    sorted by file name; a QID that is a site of several cities keeps the first), leaving out the record
    ``exclude`` (a city key: the city being sampled). The site sampler skips these candidates
    (:func:`geoagent.crawl.sampler.walk_candidates` ``claimed``). Unreadable records are left out."""
    out: dict[str, str] = {}
    folder = Path(state_dir) / "sampling"
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if p.stem == exclude:
            continue
        rec = _load(p)
        if not isinstance(rec, dict):
            continue
        name = str((rec.get("city") or {}).get("city") or p.stem)
        for s in rec.get("sites") or []:
            if isinstance(s, dict) and s.get("qid"):
                out.setdefault(str(s["qid"]), str(s.get("city") or name))
    return out


def other_city_skips(state_dir: str | Path) -> int:
    """How many candidates the site sampler skipped as already a site of another city (walk decisions
    ``skip_other_city`` in ``<state_dir>/sampling/*.json``; 0 without any)."""
    folder = Path(state_dir) / "sampling"
    n = 0
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        rec = _load(p)
        if isinstance(rec, dict):
            n += sum(1 for w in rec.get("walk") or [] if isinstance(w, dict) and w.get("decision") == "skip_other_city")
    return n


class ImageryFetcherStage(_CrawlStage):
    """sites -> images: spread, bright, de-duplicated thumbnails per site (Sec. 3.2)."""

    name = C.STAGE_FETCHER
    input_edge = C.EDGE_SITES
    output_edge = C.EDGE_IMAGES
    concurrency = 4
    uses_mapillary = True
    #: a stop cancels fetches in flight at once (released untouched): Mapillary and thumbnail requests are
    #: free, and every thumbnail and the site's selection records are written to a temporary file renamed
    #: into place (:func:`geoagent.crawl.fetcher.fetch_site_images`), so a cancelled site leaves whole images
    #: only, which the next run reuses without downloading them again; a thumbnail rejected (too dark,
    #: near-duplicate) leaves its record (:func:`geoagent.crawl.fetcher.record_rejection`), which the next run
    #: decides from instead of downloading it again
    cancel_on_stop = True

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        """Select the site's images by this campaign's ``[crawl.fetcher]`` settings.

        The campaign's own record (``<state_dir>/image_selection/<site>.json``) made with the same settings
        and site coordinates is reused (resume: no request); else the shared record of those settings in the
        images root (``<site>/images-<key>.json``, made by another campaign: no request, provided its
        thumbnails are on disk); else the site is fetched (:func:`geoagent.crawl.fetcher.fetch_site_images`,
        reading thumbnails already on disk). The record used is stored as the campaign's own. A record made
        with other settings (another campaign's, or this one's before its settings changed) is never used.

        A thumbnail transfer that failed in a way that says nothing of the image (an HTML page served with 200, the
        CDN refusing a fresh URL: :class:`geoagent.crawl.fetcher.ThumbnailTransferFailed`) fails the delivery before
        any record is stored, so the queue delivers the site again (backoff, ``[queue] max_attempts``) and its walk
        asks again, reading what the failed walk left on disk (crawl40 #3: a one-off glitch changed the site's images
        for good). At the last delivery such an image is rejected with the reason and the walk goes on, logged in
        ``crawl_decisions.jsonl`` (``event`` ``"thumbnail_transfer_failed"``), so a CDN that never serves one image
        does not hold the site back for ever. A thumbnail host that resolves to no public address on this network
        (:class:`geoagent.crawl.fetcher.ThumbnailHostNotPublic`: its DNS answer, not the image) fails every delivery,
        the last one included, so no selection is stored without that image (fixrev42 #5); such failures are
        counted per host (:class:`geoagent.crawl.not_public.NotPublicHosts`), and a few in a row stop the stage as
        an unreachable host does, its sites left queued (crawl43 #1).
        """
        svc = _svc(ctx)
        site = task.payload["site"]
        sid = paths.safe_name(str(site["site"]), what="site id")
        try:
            key = fetch_mod.selection_key(fetch_mod.selection_settings(site, svc.settings.fetcher))
        except (KeyError, TypeError, ValueError) as e:
            raise PermanentFailure(f"site {sid}: no usable coordinates ({e!r})") from None
        own = svc.state_dir / fetch_mod.SELECTION_DIR / f"{sid}.json"
        # the campaign's own record holds no capture time stored before the captured_at rule: the start of every
        # run (and process) corrects them (geoagent.crawl.campaign.correct_stored_capture_times); a shared record
        # of an earlier version comes back corrected and becomes the campaign's own so, the decision logged first
        corrected: list[dict[str, list[str]]] = []
        rec = fetch_mod.load_selection(own, key)
        if rec is None:
            rec = fetch_mod.load_selection(fetch_mod.selection_path(svc.images_root, sid, key), key,
                                           images_root=svc.images_root, corrected=corrected)
            if rec is None:
                self._token_gate(svc)
                last = task.attempts + 1 >= svc.max_deliveries  # this delivery is the site's last
                try:
                    res = await fetch_mod.fetch_site_images(site, svc.mapillary, svc.settings.fetcher, svc.images_root,
                                                            on_note=svc.decision_logger(self.name, site=sid),
                                                            retry_transient=not last)
                except fetch_mod.ThumbnailTransferFailed as e:  # nacked: delivered again, nothing stored
                    svc.downloads_this_run += e.downloads
                    if isinstance(e, fetch_mod.ThumbnailHostNotPublic):
                        # counted per host: a few in a row stop the stage, not every site's walk (crawl43 #1)
                        svc.not_public.count(e, svc.http)
                    raise
                except Exception as e:
                    self._token_gate(svc, e)
                    raise
                svc.downloads_this_run += res.downloads
                rec = res.to_json()
            for fixed in corrected:
                await svc.decision_logger(self.name, site=sid)(fetch_mod.captured_at_correction_note(fixed))
            _dump(own, rec)
        return [(f"site:{sid}", {"site": site, "images": rec["kept"]})]


class ImageAuditorStage(_CrawlStage):
    """images -> sites_for_audit: the vision-model audit of each kept image, merged with human verdicts
    into ``image_audit.csv``; the site then moves on to the referenceability audit. An image also kept under a
    nearer site whose selection is known (:func:`geoagent.crawl.export.image_owners`) is not audited here: it is
    used, and audited, under that site only."""

    name = C.STAGE_IMAGE_AUDITOR
    input_edge = C.EDGE_IMAGES
    output_edge = C.EDGE_SITES_FOR_AUDIT
    concurrency = 4
    uses_auditor = "image_audit"

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        svc = _svc(ctx)
        site = task.payload["site"]
        sid = paths.safe_name(str(site["site"]), what="site id")
        prompt = ia.load_prompt("crawl_image_audit.txt")
        owners: dict[str, str] | None = None
        for img in task.payload.get("images", []):
            iid = paths.safe_image_id(img["image_id"])
            out = svc.state_dir / "image_audit" / sid / f"{iid}.json"
            stored = _load(out)
            # an unreadable answer is asked again also for an image a human verdict decides: every image is audited
            # by the model too, for the agreement figures (image_audit_agreement.json)
            if stored is not None and not _reask_audit(stored):
                continue
            if owners is None:  # read once per site, only when something is left to audit
                from geoagent.crawl.export import image_owners

                owners = image_owners(svc.state_dir, fetch_mod.campaign_selections(svc.state_dir, svc.images_root))
            if owners.get(str(iid), sid) != sid:
                # kept under a nearer site too, where it is used (export.image_owners) and audited: not paid twice.
                # The set of sites only grows, so the site that finally uses it never skipped it
                continue
            try:  # the file the selection kept (its thumb_field's: fetcher.image_path)
                img_file = fetch_mod.kept_image_path(svc.images_root, sid, img)
            except (KeyError, ValueError) as e:
                raise PermanentFailure(f"site {sid}: image {iid}: {e}") from None
            if not img_file.is_file():
                raise PermanentFailure(f"image file {img_file} is missing (fetched images were moved or deleted?)")
            # sent as every photo is: without the metadata its location can be in (review39c #3e)
            jpeg = without_jpeg_metadata(img_file.read_bytes())
            kind, model_id = _model_id(svc.image_model_cfg, svc.settings.image_audit)
            # an unreadable answer is asked again (ia.IMAGE_AUDIT_MAX_ANSWERS in all); each answer is stored as it
            # comes, the earlier unreadable ones kept in the record's ``earlier`` (raw text, reason, tokens)
            answers = 0 if stored is None else _answers_of(stored)
            earlier = [] if stored is None else [*(stored.get("earlier") or []), _earlier_answer(stored)]
            while True:
                answers += 1
                req = ia.build_request(iid, jpeg, svc.settings.image_audit, prompt, provider=kind, model=model_id,
                                       answer=answers)
                resp = await svc.audit_generate("image_audit", req)
                audit = ia.parse_image_audit(resp.text, prompt)
                # provider_kind: what answered, as a fact of this call (the export's simulated column reads it)
                rec = {"image_id": iid, "site": sid, "path": img_file.relative_to(Path(svc.images_root)).as_posix(),
                       "model": svc.settings.image_audit.model, "audit": audit.to_json(),
                       "parser_version": ia.AUDIT_PARSER_VERSION,
                       "input_tokens": resp.usage.input_tokens, "output_tokens": resp.usage.output_tokens,
                       **({"provider_kind": k} if (k := answer_kind(resp, svc.image_kind)) else {}),
                       **({"answers": answers, "earlier": list(earlier)} if answers > 1 else {})}
                _dump(out, rec)
                if not _reask_audit(rec):
                    break
                earlier.append(_earlier_answer(rec))
        async with svc.lock("image_audit"):
            rewrite_image_audit_csv(svc)
        return [(f"site:{sid}", {"site": site})]


def _answers_of(rec: dict[str, Any]) -> int:
    """How many answers of the image auditor a stored audit record holds (``answers``; 1 when absent)."""
    n = rec.get("answers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def _reask_audit(rec: dict[str, Any]) -> bool:
    """Whether a stored image audit record is to be asked again: its answer could not be read and fewer than
    :data:`~geoagent.crawl.image_audit.IMAGE_AUDIT_MAX_ANSWERS` answers were asked."""
    audit = rec.get("audit")
    unread = not (isinstance(audit, dict) and audit.get("parsed"))
    return unread and _answers_of(rec) < ia.IMAGE_AUDIT_MAX_ANSWERS


def _earlier_answer(rec: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of an earlier, unreadable answer: its raw text, why it could not be read, its tokens."""
    audit = rec.get("audit") if isinstance(rec.get("audit"), dict) else {}
    return {"raw": audit.get("raw", ""), "reason": audit.get("reason", ""),
            "input_tokens": rec.get("input_tokens"), "output_tokens": rec.get("output_tokens"),
            **({"provider_kind": rec["provider_kind"]} if rec.get("provider_kind") else {})}


def rewrite_image_audit_csv(svc: CrawlServices) -> Path:
    """:func:`rewrite_image_tables` for the crawl services ``svc`` (its settings, state folder and images root)."""
    return rewrite_image_tables(svc.settings, svc.state_dir, svc.images_root)


def rewrite_image_tables(settings: CrawlSettings, state_dir: str | Path, images_root: str | Path) -> Path:
    """Rebuild ``image_audit.csv`` from the stored model audits and the human-verdict CSV (if any). Its
    ``image`` column is ``<site>/<image_id>.jpg`` (``<site>/<field>/<image_id>.jpg`` for a ``thumb_field`` other than
    the default: :func:`geoagent.crawl.fetcher.image_path`), relative to the images root, the same value as the
    ``path`` of ``images.csv`` and ``verify_trials.csv`` (before this version: ``images/<site>/...``). Also
    rewrites ``images.csv`` (:func:`geoagent.crawl.export.usable_images`, same verdicts) and, with verdicts, the
    agreement files (:func:`geoagent.crawl.image_audit.write_agreement`; removed when the key is unset). Sends no
    request: the image auditor calls it after each site, and each hand-off (the end of a run, an idle
    ``--watch`` drain) calls it again, so verdicts added to a finished crawl are applied by a re-run.

    Raises
    ------
    FileNotFoundError, ValueError
        The verdict file is missing or malformed (:func:`geoagent.crawl.image_audit.human_verdicts_of`)."""
    state_dir = Path(state_dir)
    hv_path = settings.image_audit.human_verdicts
    human = ia.human_verdicts_of(hv_path)
    rows = []
    root = state_dir / "image_audit"
    for p in sorted(root.glob("*/*.json")) if root.is_dir() else []:
        rec = _load(p)
        if not rec:
            continue
        audit = ia.ImageAudit.from_json(rec["audit"])
        # relative to the images root, as images.csv's and verify_trials.csv's ``path`` (the release writes
        # ``streetview/<site>/<id>.jpg``, relative to its own root; readers take the id from either form)
        rows.append(ia.audit_row(rec.get("path") or f"{rec['site']}/{rec['image_id']}.jpg", rec["site"], audit,
                                 human.get(rec["image_id"])))
    from geoagent.crawl.export import usable_images, write_images_csv

    write_images_csv(usable_images(state_dir, images_root, hv_path), state_dir / "images.csv")
    if human:
        ia.write_agreement(ia.agreement(rows), state_dir)
    else:  # verdicts removed from the config: an agreement of earlier verdicts no longer describes the tables
        for name in ia.AGREEMENT_FILES:
            (state_dir / name).unlink(missing_ok=True)
    return ia.write_image_audit_csv(rows, state_dir / "image_audit.csv")


#: per-site candidate lists (``<state_dir>/ref_candidates/<site>.json``) of the referenceability auditor; its per-city
#: rating records (``<state_dir>/ref_cities/<city key>.json``) are in ``REF_CITIES_DIR`` (imported above: the
#: summary's count of failed ratings reads them too)
REF_CANDIDATES_DIR = "ref_candidates"
#: the label languages of a candidate list stored before they were recorded (``label_languages`` absent): the
#: reference-point query asked ``en,mul`` until 2026-12-01 (commit fc5953a)
OLD_LABEL_LANGUAGES: tuple[str, ...] = ("en", "mul")


def label_language_warning(state_dir: str | Path) -> str | None:
    """One line when some sites' stored candidate lists (``ref_candidates/<site>.json``) were queried with other
    label languages than :data:`geoagent.clients.wdqs.LABEL_LANGUAGES` (``label_languages``; a list without it:
    :data:`OLD_LABEL_LANGUAGES`), else None. A resumed crawl keeps a site's stored list, so a crawl begun before
    the languages changed rates and ladders those sites' candidates under the old rule (an item labelled only in
    Chinese or a local language was a bare QID there, not rated) and the later sites' under the new one."""
    from geoagent.clients.wdqs import LABEL_LANGUAGES

    old: list[str] = []
    n = 0
    for path in sorted((Path(state_dir) / REF_CANDIDATES_DIR).glob("*.json")):
        rec = _load(path)
        if not isinstance(rec, dict):
            continue
        n += 1
        langs = rec.get("label_languages", list(OLD_LABEL_LANGUAGES))
        if langs != list(LABEL_LANGUAGES):
            old.append(path.stem)
    if not old:
        return None
    shown = first_few_text(old)
    return (f"warning: referenceability: {len(old)} of {n} sites' candidates were queried with other label languages "
            f"than this version asks ({','.join(LABEL_LANGUAGES[:3])},...; e.g. {','.join(OLD_LABEL_LANGUAGES)} before "
            f"2026-12-01): {shown}; their places labelled only in Chinese or a local language were not rated "
            "(ref_candidates/<site>.json label_languages). Crawl again under a new campaign name for one rule throughout")


class ReferenceabilityAuditorStage(_CrawlStage):
    """sites_for_audit -> rated: every entity within 6 km of the site, rated and screened (Sec. 3.3).

    Rating is per city, so its calls do not depend on the order in which sites arrive (see
    :mod:`geoagent.crawl.referenceability`): the first site of a city to arrive fetches the candidates of
    every site of its city (the sampler's ``sampling/<city>.json``; each list stored in
    ``ref_candidates/<site>.json``, so no WDQS query is repeated), and the merged, QID-sorted list is
    rated in fixed batches. Every rating pass of a site's task (the step, or the site's own re-asks) runs under the
    city's claim (:func:`ref_city_claim`), held by one process of the crawl at a time: a site of a city another
    process is rating now goes back to the queue and is delivered again later, so the sites of one city take turns
    across the processes, never pay twice nor run the step twice (fixcrawl46), and what the logs show another process
    failed or re-asked in this run is not re-asked (fixreask46: the re-ask limits are read from the logs under the
    claim). The step is logged to
    ``crawl_decisions.jsonl`` (``event = "ref_city_rating"``) and recorded in ``ref_cities/<city>.json``; later
    sites of the city find their candidates decided and send no rating call. Ratings are kept per city (decisions'
    ``city``): a candidate also near another city's sites is rated for each city, so no city's calls depend on which
    city finished first. A site not listed by its city's sampling record (or requeued after its city was rated
    without it) is rated alone, with the same fixed batches over its own candidates (reusing its city's ratings). A
    site task a later run reopened (:func:`sites_with_reasks_due`, crawl40b #2) finds its ``rated/<site>.json``
    holding candidates whose ratings failed alone: the auditor asks them again alone with the reminder (under the
    city's claim too), the record and the site's ladder are written again, and a ``ref_rating_reask`` record is
    logged.
    """

    name = C.STAGE_REF_AUDITOR
    input_edge = C.EDGE_SITES_FOR_AUDIT
    output_edge = C.EDGE_RATED
    concurrency = 1  # WDQS allows one query at a time per client anyway
    uses_auditor = "referenceability"
    uses_open_data = ("wikimedia",)  # WDQS, pageviews

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        svc = _svc(ctx)
        self._open_data_gate(svc)
        try:
            return await self._handle(task, svc)
        except Exception as e:
            self._open_data_gate(svc, e)
            raise

    async def _handle(self, task: Task, svc: CrawlServices) -> list[Message]:
        site = task.payload["site"]
        sid = paths.safe_name(str(site["site"]), what="site id")
        out = svc.state_dir / "rated" / f"{sid}.json"
        prev = _load(out)
        due = qids_to_read_again(svc, prev) if prev is not None else []
        if prev is None or due:
            aud = svc.ref_auditor
            # fixcrawl46: every rating pass of the city's sites (the step, a site's re-asks) runs under the city's
            # claim, which one process of the crawl holds at a time; a site whose city another process is rating now
            # goes back to the queue (CityRatedElsewhere) and, delivered again, finds its candidates decided, and
            # (fixreask46) the re-asks the other process made or cut off in this run, read from the logs, not due
            async with ref_city_claim(svc, _rating_city(site)):
                if prev is None:
                    cands = await self._rate_city_of(svc, site, sid)
                else:  # crawl40b #2: ratings that failed alone in an earlier run, asked again (the city's step is done)
                    cands = await self._site_candidates(svc, site, sid)  # stored: no WDQS query
                calls0, replayed0 = aud.calls, aud.replayed
                lines = city_lines(svc.state_dir, site)
                # all decided for the site's city by now but the re-asks: no other rating call; a re-ask shows the
                # candidate as the city's step did, so every site of the city asks it with one request key
                # (redis41 #4)
                await aud.rate_all(cands, city=_rating_city(site), max_failed_share=None, city_lines=lines)
            # the site's pageviews and ladder inputs: no model call, so not under the claim
            rated = await aud.audit(sid, cands, city=_rating_city(site), city_lines=lines, ask=False)
            coords = {c.qid: (c.lat, c.lon) for c in cands}
            # rating_model: the [[models]] name whose ratings these are (the ladder's file name, rated_auditor)
            rec = {"site": site, "n_candidates": len(cands), "rated": [_rated_json(r) for r in rated],
                   "coords": {q: list(v) for q, v in coords.items()},
                   "sitelinks": {c.qid: c.sitelinks for c in cands},
                   "rating_model": svc.settings.referenceability.model,
                   "rating_model_id": getattr(svc.ref_model_cfg, "model", None)}
            _dump(out, rec)
            if prev is not None:
                now = {r.qid: r.familiarity for r in rated}
                await svc.decision_logger(self.name)({
                    "event": "ref_rating_reask", "city": site.get("city"), "site": sid, "qids": due,
                    "n_rated": sum(1 for q in due if now.get(q) is not None),
                    "n_still_failed": sum(1 for q in due if now.get(q) is None),
                    "model_calls": aud.calls - calls0, "answers_replayed": aud.replayed - replayed0})
                # the ladder builder's task of the site is done (its put below is a no-op): its ladder is drawn here
                from geoagent.crawl.review import review_verdicts_of

                write_site_ladder(svc.settings, svc.state_dir, site, rec,
                                  review_verdicts_of(svc.settings.referenceability.review_verdicts))
        async with svc.lock("candidate_referenceability"):
            write_candidate_referenceability(svc.state_dir)
        return [(f"site:{sid}", {"site": site})]

    async def _site_candidates(self, svc: CrawlServices, site: dict[str, Any], sid: str) -> list[RefCandidate]:
        """The site's candidates: stored ``ref_candidates/<site>.json``, else the WDQS query (its spatial
        splits logged) and :func:`candidates_for_site`, then stored.

        Raises
        ------
        PermanentFailure
            The area still fails after every split, or the site's coordinates are unreadable.
        """
        path = svc.state_dir / REF_CANDIDATES_DIR / f"{sid}.json"
        rec = _load(path)
        if isinstance(rec, dict) and isinstance(rec.get("candidates"), list):
            try:
                return [candidate_from_json(c) for c in rec["candidates"]]
            except (KeyError, TypeError, ValueError):
                pass  # a damaged file: query again
        rs = svc.settings.referenceability
        try:
            lat, lon = float(site["lat"]), float(site["lon"])
            ents = await svc.wdqs.entities_around(
                lat, lon, rs.radius_km, page_size=rs.page_size, area=f"site {sid} ({site.get('city', '?')})",
                max_split_depth=rs.wdqs_split_depth, on_split=svc.decision_logger(self.name, site=sid))
        except (KeyError, TypeError) as e:
            raise PermanentFailure(f"site {sid}: no usable coordinates ({e!r})") from None
        except Exception as e:
            if _permanent(e):
                raise PermanentFailure(str(e)) from None
            raise
        cands = candidates_for_site(ents, lat, lon, rs.radius_km)
        from geoagent.clients.wdqs import LABEL_LANGUAGES

        _dump(path, {"site": sid, "lat": lat, "lon": lon, "radius_km": rs.radius_km,
                     "label_languages": list(LABEL_LANGUAGES),  # label_language_warning
                     "candidates": [candidate_to_json(c) for c in cands]})
        return cands

    def _city_sites(self, svc: CrawlServices, site: dict[str, Any], sid: str) -> tuple[str | None, list[dict[str, Any]]]:
        """(city key, the sites of the site's city from the sampler's record, sorted by site id); (None,
        [site]) when the record is missing or does not list the site."""
        try:
            key = city_key(str(site.get("city", "")))
        except ValueError:
            return None, [site]
        rec = _load(svc.state_dir / "sampling" / f"{key}.json")
        sites = rec.get("sites") if isinstance(rec, dict) else None
        if not isinstance(sites, list) or not any(isinstance(s, dict) and str(s.get("site")) == sid for s in sites):
            return None, [site]
        return key, sorted((s for s in sites if isinstance(s, dict) and s.get("site")), key=lambda s: str(s["site"]))

    async def _rate_city_of(self, svc: CrawlServices, site: dict[str, Any], sid: str) -> list[RefCandidate]:
        """Rate the candidates of every site of ``site``'s city (once per city; see the class docstring) and
        return ``site``'s own candidates.

        A sibling site whose WDQS query fails permanently is left out of the city's list (logged in the
        step's record, ``left_out``); its own task then fails on the same query. A transient failure fails
        this task (retried by the runner) before any rating call. Called under the city's claim
        (:func:`ref_city_claim`), so the stored record ``ref_cities/<city key>.json`` read here is final: a step
        another process of the crawl ran is not run again (fixcrawl46).
        """
        key, group = self._city_sites(svc, site, sid)
        marker = svc.state_dir / REF_CITIES_DIR / f"{key}.json" if key else None
        done = _load(marker) if marker is not None else None
        if isinstance(done, dict) and sid in (done.get("sites") or []):
            return await self._site_candidates(svc, site, sid)
        if isinstance(done, dict):  # the city was rated without this site: rate it alone
            key, group, marker = None, [site], None
        per_site: dict[str, list[RefCandidate]] = {}
        left_out: dict[str, str] = {}
        for s in group:
            s_id = paths.safe_name(str(s["site"]), what="site id")
            try:
                per_site[s_id] = await self._site_candidates(svc, s, s_id)
            except PermanentFailure as e:
                if s_id == sid:
                    raise
                left_out[s_id] = str(e)[:300]
        merged = merge_site_candidates(per_site)
        aud = svc.ref_auditor
        listed: dict[str, int] = {}
        for cands in per_site.values():
            for q in {c.qid for c in cands}:
                listed[q] = listed.get(q, 0) + 1
        # field meanings: module docstring, "Decision log"
        rec = {"event": "ref_city_rating", "city": site.get("city") if key else None, "site": sid,
               "sites": sorted(per_site), "left_out": left_out, "n_candidates": len(merged),
               "n_site_listings": sum(len(v) for v in per_site.values()),
               "n_shared_candidates": sum(1 for n in listed.values() if n > 1),
               "batch_size": aud.settings.batch_size}
        calls0, replayed0, unreadable0 = aud.calls, aud.replayed, aud.unreadable
        try:
            stats = await aud.rate_all(merged, city=_rating_city(site))
        except AuditorOutputUnreadable as e:
            # crawl40 #1: the failed step is logged too (its calls and unreadable answers), then the task fails
            await svc.decision_logger(self.name)({
                **rec, "model_calls": aud.calls - calls0, "answers_replayed": aud.replayed - replayed0,
                "n_unreadable_answers": aud.unreadable - unreadable0, "n_rating_failed": e.failed,
                "error": str(e)[:500]})
            raise
        rec.update({"rating_batches": stats["batches"],
                    "rating_batches_asked": stats["asked"], "screening_batches_asked": stats["screened"],
                    "model_calls": stats["calls"], "answers_replayed": stats["replayed"],
                    "n_not_rated_no_label": stats["not_rated_no_label"],
                    "n_unreadable_answers": stats["unreadable"], "n_reasked": stats["reasked"],
                    "n_screens_reasked": stats["screens_reasked"], "n_rating_failed": stats["failed"]})
        await svc.decision_logger(self.name)(rec)
        if marker is not None:
            _dump(marker, {**rec, "qids": [c.qid for c in merged]})
        return per_site[sid]


#: how long a site task whose city another process of the crawl is rating stays in the queue before it is
#: delivered again, s (:class:`CityRatedElsewhere`)
REF_CLAIM_RETRY_S = 1.0
#: the stem of the claim file of the sites whose city has no key (:func:`_rating_city` None); a city key has
#: letters and digits only, so no city's claim file has this name
REF_NO_CITY_CLAIM = "_no_city"


class CityRatedElsewhere(Deferred):
    """Another process of the crawl holds the claim of the site's city (:func:`ref_city_claim`): the site's task
    goes back to the queue for :data:`REF_CLAIM_RETRY_S` s with no attempt counted and nothing sent, and the stage
    takes other work meanwhile (a site of another city); delivered again once the other process's step ended, it
    finds its city's candidates decided (fixcrawl46)."""

    delay_s = REF_CLAIM_RETRY_S


@contextlib.asynccontextmanager
async def ref_city_claim(svc: CrawlServices, city: str | None) -> AsyncIterator[None]:
    """Hold the referenceability claim of ``city`` (a city key, :func:`_rating_city`; None: the sites without one)
    for the block: the rating calls of a city's sites are made by one process of the crawl at a time.

    fixcrawl46: two processes sharing the state folder (docs/crawls.md, "Several processes, one state folder") each
    took a site of one city and both ran the city's rating step: the second's calls were answered by the response
    store or the logs (not billed twice, but not all: a batch the other had half decided was asked anew, a new
    request key), yet both did the work and both counted it (two ``ref_city_rating`` records of the city, the
    ``ref_cities`` record overwritten with the second's counts). The claim is the process's ``asyncio.Lock``
    ``svc.lock("ref_rating")`` (the stage's tasks), then an exclusive ``flock`` on
    ``<state_dir>/ref_cities/<city key>.lock`` (:func:`state_flock`, not waited for: the kernel releases a
    crashed holder's). Held by another process, :class:`CityRatedElsewhere` is raised before anything is asked.

    Raises
    ------
    CityRatedElsewhere
        Another process holds the city's claim now.
    OSError
        The claim file cannot be created (the state folder is not writable)."""
    path = Path(svc.state_dir) / REF_CITIES_DIR / f"{city or REF_NO_CITY_CLAIM}.lock"
    async with svc.lock("ref_rating"):
        async with state_flock(path, poll_s=None) as held:
            if not held:
                raise CityRatedElsewhere(f"referenceability: city {city or '(no key)'} is being rated by another "
                                         f"process of the crawl ({path} is locked); the site is delivered again "
                                         f"in {REF_CLAIM_RETRY_S:g} s")
            yield


def city_lines(state_dir: str | Path, site: dict[str, Any]) -> dict[str, RefCandidate]:
    """QID -> the candidate as ``site``'s city's rating step showed it to the auditor: :func:`merge_site_candidates`
    of the stored candidate lists (``ref_candidates/<site>.json``) of the sites its record
    (``ref_cities/<city key>.json``, ``sites``) lists, so the distance from the nearest of them (redis41 #4: a
    re-ask made for one site showed that site's distance, so two sites' re-asks of one candidate had two request
    keys and were paid twice). ``{}`` when the city has no such record (not rated as a city yet, or the site's city
    has no key) or a listed site's candidates are not stored (no WDQS query is made here): its candidates are then
    re-asked as the site lists them, as before."""
    try:
        key = city_key(str(site.get("city", "")))
    except ValueError:
        return {}
    state_dir = Path(state_dir)
    rec = _load(state_dir / REF_CITIES_DIR / f"{key}.json")
    sites = rec.get("sites") if isinstance(rec, dict) else None
    if not isinstance(sites, list):
        return {}
    per_site: dict[str, list[RefCandidate]] = {}
    for s_id in sites:
        try:
            stored = _load(state_dir / REF_CANDIDATES_DIR / f"{paths.safe_name(str(s_id), what='site id')}.json")
            per_site[str(s_id)] = [candidate_from_json(c) for c in stored["candidates"]]
        except (KeyError, TypeError, ValueError):
            return {}
    return {c.qid: c for c in merge_site_candidates(per_site)}


def qids_to_read_again(svc: CrawlServices, rec: Any) -> list[str]:
    """The candidates of a stored ``rated/<site>.json`` record ``rec`` without a rating that a reopened task reads
    again (crawl40b #2), in the record's order: those whose logged rating failed alone with a re-ask left that the
    crawl's auditor has not made in this run
    (:meth:`geoagent.crawl.referenceability.ReferenceabilityAuditor.reask_due`), and those rated since the record was
    written (a candidate near two sites, re-asked for the other site's task). ``[]`` for a record that cannot be
    read."""
    if not isinstance(rec, dict) or not isinstance(rec.get("rated"), list) or not isinstance(rec.get("site"), dict):
        return []
    city = _rating_city(rec["site"])
    aud = svc.ref_auditor

    def again(qid: str) -> bool:
        logged = aud.decisions.get(aud.settings.model, qid, city) or {}
        return aud.reask_due(qid, city) or ("error" not in logged and logged.get("familiarity") is not None)

    return [str(r["qid"]) for r in rec["rated"]
            if isinstance(r, dict) and r.get("qid") and r.get("familiarity") is None and again(str(r["qid"]))]


def sites_with_reasks_due(settings: CrawlSettings, state_dir: str | Path) -> list[str]:
    """Site ids of the crawl at ``state_dir`` whose stored ``rated/<site>.json`` holds a candidate without a rating
    whose logged rating (``audit_decisions.jsonl``, the config's auditor model) failed alone with a re-ask left
    (:func:`geoagent.crawl.referenceability.reask_due`, crawl40b #2): a re-run handles their referenceability
    tasks again (:meth:`geoagent.crawl.campaign.CrawlCampaign.tasks_to_reopen`). A failure logged since the crawl's
    processes running now began (:func:`geoagent.engine.run_began`: this process joined them) is left out: its re-asks
    were cut off in this run, which leaves them to a later one, as one process does (fixreask46). Sorted; ``[]``
    without a log."""
    from geoagent.crawl.referenceability import JsonlLog, logged_since, reask_due
    from geoagent.engine import run_began

    state_dir = Path(state_dir)
    log_path = state_dir / C.AUDIT_DECISIONS_FILE
    if not log_path.is_file() or not (state_dir / "rated").is_dir():
        return []
    log = JsonlLog(log_path)
    model = settings.referenceability.model
    began = run_began(state_dir)

    def left_by_earlier_run(logged: dict[str, Any] | None) -> bool:
        return reask_due(logged) and not logged_since(logged, began)

    out = []
    for p in sorted((state_dir / "rated").glob("*.json")):
        rec = _load(p)
        if not isinstance(rec, dict) or not isinstance(rec.get("rated"), list) or not isinstance(rec.get("site"), dict):
            continue
        city = _rating_city(rec["site"])
        if any(isinstance(r, dict) and r.get("qid") and r.get("familiarity") is None
               and left_by_earlier_run(log.get(model, str(r["qid"]), city)) for r in rec["rated"]):
            out.append(p.stem)
    return out


def _rating_city(site: dict[str, Any]) -> str | None:
    """The city key a site's candidates are rated for (the decisions' ``city``; None when the site's city
    name has no letters or digits): every site of a city, also one rated alone, reads its city's ratings."""
    try:
        return city_key(str(site.get("city", "")))
    except ValueError:
        return None


#: the crawl's per-(QID, city) referenceability table beside the release's one-row-per-QID table
CANDIDATE_REF_BY_CITY_FILE = "candidate_referenceability_by_city.csv"


def write_candidate_referenceability(state_dir: Path) -> Path:
    """Rewrite the two referenceability tables over every rated site (``rated/*.json``):
    ``candidate_referenceability.csv`` in the release's layout (qid, sitelinks, familiarity; one row per
    QID, sorted by QID; input of :func:`geoagent.crawl.referenceability.sitelink_band_share`) and
    :data:`CANDIDATE_REF_BY_CITY_FILE` with every city's rating (one row per QID and city key). A QID
    rated for several cities has a row per city in the second table; the first holds the rating of the
    city whose site is nearest to it, ties to the smaller city key
    (:func:`geoagent.crawl.referenceability.referenceability_tables`). Both depend only on the rated
    sites, not on the order in which they were rated. Returns the path of the release-layout table."""
    from geoagent.crawl.referenceability import (
        CANDIDATE_REF_BY_CITY_COLUMNS,
        CANDIDATE_REF_COLUMNS,
        referenceability_tables,
    )

    recs = [rec for p in sorted((state_dir / "rated").glob("*.json")) if (rec := _load(p))]
    by_city, by_qid = referenceability_tables(recs)
    _write_csv(by_city, state_dir / CANDIDATE_REF_BY_CITY_FILE, CANDIDATE_REF_BY_CITY_COLUMNS)
    out = state_dir / "candidate_referenceability.csv"
    _write_csv(by_qid, out, CANDIDATE_REF_COLUMNS)
    return out


def _rated_json(r: RatedCandidate) -> dict[str, Any]:
    return {k: getattr(r, k) for k in ("qid", "label_raw", "dist_km", "familiarity", "ok", "name_en", "name_zh", "sensitive", "pageviews")}


class LadderBuilderStage(_CrawlStage):
    """rated -> (files): one context ladder CSV per site (Sec. 3.3)."""

    name = C.STAGE_LADDER_BUILDER
    input_edge = C.EDGE_RATED
    output_edge = None
    concurrency = 4

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        svc = _svc(ctx)
        site = task.payload["site"]
        sid = paths.safe_name(str(site["site"]), what="site id")
        rec = _load(svc.state_dir / "rated" / f"{sid}.json")
        if rec is None:
            raise PermanentFailure(f"no rated candidates stored for site {sid}")
        from geoagent.crawl.review import review_verdicts_of

        write_site_ladder(svc.settings, svc.state_dir, site, rec,
                          review_verdicts_of(svc.settings.referenceability.review_verdicts))
        return []


def write_site_ladder(settings: CrawlSettings, state_dir: Path, site: dict[str, Any], rec: dict[str, Any],
                      decisions: Any) -> Path:
    """Build and write one site's ladder CSV from its ``rated/<site>.json`` record ``rec`` with the human review
    ``decisions`` ((site, qid) -> decision, :func:`geoagent.crawl.review.read_review_verdicts`) applied to the
    ratings (:func:`geoagent.crawl.review.apply_decisions`; the record itself is not changed), drawn with the crawl's
    ladder draw version (:func:`geoagent.crawl.ladder.ladder_draw_version`: a random stream per cell and one place
    per name, or one stream per site for a crawl whose ladders were drawn before 2026-12-02). Returns its path."""
    from geoagent.crawl.review import apply_decisions

    sid = paths.safe_name(str(site["site"]), what="site id")
    cands = apply_decisions(str(site["site"]), [RatedCandidate(**r) for r in rec["rated"]], decisions)
    ls = settings.ladder
    seed = ls.seed if ls.seed is not None else settings.seed
    site_seed = f"{seed}:{sid}"
    # the crawl's ladder draw version: one stream per cell, or (ladders drawn before 2026-12-02) one per site
    draw = ({"rng": random.Random(site_seed)} if ladder_draw_version(state_dir) == 1
            else {"cell_seed": site_seed, "one_name_per_site": True})
    rows = build_ladder(cands, **draw, draws_per_cell=ls.draws_per_cell,
                        site_qid=site.get("qid"), site_names=[site.get("landmark", "")])
    out = state_dir / C.LADDERS_DIR / ladder_file_name(sid, rated_auditor(settings, rec, state_dir), "en")
    write_ladder_csv(rows, out)
    return out


def _auditor_part(name: str) -> str:
    from geoagent.crawl.ladder import auditor_file_part

    return auditor_file_part(name)


def ladder_auditor(settings: CrawlSettings) -> str:
    """The auditor part of the crawl's ladder file names (``<site>_ladder_<auditor>-en.csv``) for sites the config's
    auditor rates: the ``[crawl.referenceability] model`` name, each run of characters other than ``A-Za-z0-9_.-``
    written ``-`` (``"auditor"`` when nothing is left). A stored site's ladder is named by the model that rated
    it (:func:`rated_auditor`)."""
    return _auditor_part(settings.referenceability.model)


#: (path, mtime_ns, size) of the last ``audit_decisions.jsonl`` read by :func:`logged_rating_model`, and its index
_LOGGED_DECISIONS: dict[str, Any] = {"stamp": None, "index": {}}


def _logged_decisions(state_dir: Path) -> dict[tuple[str, str | None], dict[str, dict[str, Any]]]:
    """``{(qid, city): {model: decision}}`` over the crawl's ``audit_decisions.jsonl`` (the last record of each model,
    QID and city, as the auditor reads it: :class:`geoagent.crawl.referenceability.JsonlLog`); rating models only
    (``sens|...`` and ``review|...`` records name no rating model). Read again only when the file changed."""
    from geoagent.crawl.referenceability import JsonlLog

    path = state_dir / C.AUDIT_DECISIONS_FILE
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if _LOGGED_DECISIONS["stamp"] != stamp:
        index: dict[tuple[str, str | None], dict[str, dict[str, Any]]] = {}
        for (model, qid, city), rec in JsonlLog(path).records.items():
            if not model.startswith(("sens|", "review|")):
                index.setdefault((qid, city), {})[model] = rec
        _LOGGED_DECISIONS.update(stamp=stamp, index=index)
    return _LOGGED_DECISIONS["index"]


def logged_rating_model(state_dir: str | Path, rec: Any) -> str | None:
    """The model that made the ratings of a ``rated/<site>.json`` record ``rec``, read from the crawl's decision log
    (``audit_decisions.jsonl``, where every rating decision is logged with its ``model``): the one rating model whose
    logged decision for each of the record's candidates (made for the site's city, :func:`_rating_city`, or, in a log
    of a version before ratings were kept per city, for none) has the record's ``familiarity`` and ``ok``, as the
    record was built from them (:meth:`geoagent.crawl.referenceability.ReferenceabilityAuditor.audit`). A candidate
    the record holds unrated (``familiarity`` None) may have no decision; at least one must have one.

    For records from before ``rating_model`` was recorded (:func:`rated_auditor`). Returns None when the log cannot
    single one model out: no log, no record, no model with those decisions, or several models with the very same
    ones (a renamed auditor that rated the same candidates alike)."""
    if not isinstance(rec, dict) or not isinstance(rec.get("rated"), list) or not rec["rated"]:
        return None
    index = _logged_decisions(Path(state_dir))
    if not index:
        return None
    site = rec.get("site")
    city = _rating_city(site) if isinstance(site, dict) else None
    logged: list[tuple[Any, bool, dict[str, dict[str, Any]]]] = []
    for r in rec["rated"]:
        if not isinstance(r, dict) or "qid" not in r:
            return None
        qid = str(r["qid"])
        by_model = {**index.get((qid, None), {}), **index.get((qid, city), {})}  # the city's decision wins
        logged.append((r.get("familiarity"), bool(r.get("ok")), by_model))

    def made_it(model: str) -> bool:
        decided = False
        for fam, ok, by_model in logged:
            d = by_model.get(model)
            if d is None:
                if fam is not None:
                    return False
                continue  # an unrated candidate: a model may have logged nothing for it
            if d.get("familiarity") != fam or bool(d.get("ok")) != ok:
                return False
            decided = True
        return decided

    models = {m for m in set().union(*(by_model for _, _, by_model in logged)) if made_it(m)}
    return next(iter(models)) if len(models) == 1 else None


def rated_auditor(settings: CrawlSettings, rec: Any, state_dir: str | Path | None = None) -> str:
    """The auditor part of the ladder file name of a site whose ``rated/<site>.json`` record is ``rec``: the model
    that rated it, as the record names it (``rating_model``: the ``[[models]]`` name of the auditor that rated, recorded
    since 2026-12-02), written as :func:`ladder_auditor` writes names. A record without it (an older crawl's, which
    did not record who rated) takes the model the crawl's decision log names for its ratings
    (:func:`logged_rating_model`, with ``state_dir``: the crawl's state folder), and the config's auditor
    (:func:`ladder_auditor`) where the log cannot say. So a ladder rebuilt after the auditor was renamed or replaced
    keeps the name of the model whose ratings it holds."""
    model = rec.get("rating_model") if isinstance(rec, dict) else None
    if not (isinstance(model, str) and model.strip()) and state_dir is not None:
        model = logged_rating_model(state_dir, rec)
    return _auditor_part(model) if isinstance(model, str) and model.strip() else ladder_auditor(settings)


def set_aside_other_auditor_ladders(settings: CrawlSettings, state_dir: str | Path) -> list[Path]:
    """Move every ``ladders/*.csv`` not named by the auditor that rated its site to ``ladders_superseded/``
    (:data:`geoagent.constants.SUPERSEDED_LADDERS_DIR`), and give one warning (:class:`geoagent.config.InputWarning`:
    a ``warning:`` line on the CLI's console) naming how many, the auditor(s) they were built under and the folder.

    The name a site's ladder must have is ``<site>_ladder_<auditor>-en.csv`` with the auditor of its
    ``rated/<site>.json`` record (:func:`rated_auditor`: the model recorded as having rated it; for a record that names
    none, an older crawl's, the model its decisions in ``audit_decisions.jsonl`` name, :func:`logged_rating_model`;
    the config's auditor, :func:`ladder_auditor`, where the log cannot say and for a ladder whose site has no rated
    record). Ladders are a function of the stored ratings: a run of a crawl with rated sites rebuilds every ladder
    (:func:`apply_review_verdicts`), and every reader of ``ladders/`` (the export's ``ladders`` table, a GeoHint
    campaign over the crawl, the gazetteer) takes every CSV there, so a second file of one site under another auditor's
    name would count the site twice. They are moved, never deleted (a second file of the same name already set
    aside with other bytes is kept too: the newcomer gets a ``.N`` before ``.csv``; one with the same bytes is simply
    replaced). Returns the new paths (``[]`` when nothing was moved, or there is no ``ladders/``).

    Raises
    ------
    OSError
        A file could not be moved (the folder is not writable)."""
    import os

    state_dir = Path(state_dir)
    src = state_dir / C.LADDERS_DIR
    if not src.is_dir():
        return []
    suffix = f"_ladder_{ladder_auditor(settings)}-en.csv"
    expected: set[str] = set()
    prefixes: list[str] = []
    for p in sorted((state_dir / "rated").glob("*.json")) if (state_dir / "rated").is_dir() else []:
        rec = _load(p)
        try:
            expected.add(ladder_file_name(p.stem, rated_auditor(settings, rec, state_dir), "en"))
        except ValueError:  # not a site id a ladder can be named by
            continue
        prefixes.append(f"{p.stem}_ladder_")

    def stale(p: Path) -> bool:
        if p.name in expected:
            return False
        if any(p.name.startswith(pre) for pre in prefixes):
            return True  # its site's record names another auditor
        return not p.name.endswith(suffix)  # no rated record of its site: the config's auditor, as before

    stale_paths = [p for p in sorted(src.glob("*.csv")) if stale(p)]
    if not stale_paths:
        return []
    dest = state_dir / C.SUPERSEDED_LADDERS_DIR
    dest.mkdir(parents=True, exist_ok=True)
    moved: list[Path] = []
    auditors: set[str] = set()
    for p in stale_paths:
        _site, sep, rest = p.stem.partition("_ladder_")
        auditors.add(rest.rsplit("-", 1)[0] if sep else "?")
        target, n = dest / p.name, 1
        try:
            while target.exists() and target.read_bytes() != p.read_bytes():
                target, n = dest / f"{p.stem}.{n}.csv", n + 1
            os.replace(p, target)
        except FileNotFoundError:  # moved meanwhile by another process of the campaign starting (--stages)
            continue
        moved.append(target)
    if not moved:
        return []
    import warnings

    from geoagent.config import InputWarning

    n = len(moved)  # a "warning: ..." line on the CLI's console, as its other warnings
    warnings.warn(f"{n} ladder file{'' if n == 1 else 's'} in {src} {'was' if n == 1 else 'were'} built under another "
                  f"referenceability auditor ({', '.join(repr(a) for a in sorted(auditors))}) than the one that rated "
                  f"{'its site' if n == 1 else 'their sites'} (rated/<site>.json rating_model, or for an older record "
                  f"the model its decisions in {C.AUDIT_DECISIONS_FILE} name; the config's, "
                  f"{ladder_auditor(settings)!r}, "
                  f"where neither says): moved to {dest} (kept, read by "
                  f"nothing); the ladders of the stored ratings are in {src}", InputWarning, stacklevel=2)
    return moved


def apply_review_verdicts(settings: CrawlSettings, state_dir: str | Path) -> dict[str, int]:
    """Apply ``[crawl.referenceability] review_verdicts`` to a crawl's stored ratings, sending no request: every
    rated site's ladder is rebuilt with the decisions (:func:`write_site_ladder`; ``rated/`` untouched), and
    ``audit_review_resolved.csv`` / ``audit_review_log.jsonl`` are written
    (:func:`geoagent.crawl.review.write_resolution`). Without the key the ladders are rebuilt from the model's
    ratings (a removed decision is undone) and the resolution table lists every item as pending. Returns
    ``{"sites": n ladders rebuilt, "resolved", "pending", "logged"}``.

    Raises
    ------
    FileNotFoundError, ValueError
        The decision file is missing or malformed (:func:`geoagent.crawl.review.review_verdicts_of`)."""
    from geoagent.crawl.review import review_verdicts_of, write_resolution

    state_dir = Path(state_dir)
    decisions = review_verdicts_of(settings.referenceability.review_verdicts)
    records = _rated_records(state_dir)
    for rec in records:
        write_site_ladder(settings, state_dir, rec["site"], rec, decisions)
    return {"sites": len(records), **write_resolution(state_dir, decisions, _model_ratings(records))}


def _rated_records(state_dir: Path) -> list[dict[str, Any]]:
    """Every readable ``rated/<site>.json`` record of a crawl, in file-name order."""
    paths_ = sorted((state_dir / "rated").glob("*.json")) if (state_dir / "rated").is_dir() else []
    return [rec for p in paths_ if (rec := _load(p))]


def _model_ratings(records: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """The auditor's own rating of each rated candidate: ``{(site id, qid): familiarity 0-5 or None}`` over
    ``rated/`` records (:func:`_rated_records`)."""
    return {(str(rec["site"]["site"]), str(r["qid"])): r.get("familiarity") for rec in records for r in rec["rated"]}


def refresh_review_resolution(settings: CrawlSettings, state_dir: str | Path) -> dict[str, int]:
    """Rewrite ``audit_review_resolved.csv`` (and log new decisions) over the crawl's review queue and rated sites
    as they are now, with the config's review decisions (:func:`geoagent.crawl.review.write_resolution`; no
    ladder is rebuilt: the ladder stage applies the decisions to each site it builds). The start of a run
    writes the table before the run rates more sites (:func:`apply_review_verdicts`); the end of the run and a
    ``--watch`` hand-off call this, so items queued or decided during the run are counted resolved or pending
    as the ladders have them. A decision matching no rated candidate was named at the start: no second warning.
    Returns as :func:`geoagent.crawl.review.write_resolution`.

    Raises
    ------
    FileNotFoundError, ValueError
        The decision file is missing or malformed (:func:`geoagent.crawl.review.review_verdicts_of`)."""
    from geoagent.crawl.review import review_verdicts_of, write_resolution

    state_dir = Path(state_dir)
    decisions = review_verdicts_of(settings.referenceability.review_verdicts)
    return write_resolution(state_dir, decisions, _model_ratings(_rated_records(state_dir)), warn_unmatched=False)


#: ctx.services key of a ``--watch`` crawl's config watcher: ``{"added": [CitySpec, ...], "last_read": [CitySpec, ...] |
#: None}``: the cities it planned anew (in the order found) and the file's ``[[crawl.cities]]`` as last read
#: (``"recorded": True`` once a city was recorded: the run's manifest entry holds a config of its own since)
SERVICE_WATCHED_CITIES = "crawl_watched_cities"


def cities_run_with(started: Sequence[CitySpec], added: Sequence[CitySpec],
                    last_read: Sequence[CitySpec] | None) -> list[CitySpec]:
    """The ``[[crawl.cities]]`` a ``--watch`` crawl ran with: the cities of its start (``started``) and those its
    watcher planned anew (``added``), in the order of the config file as last read (``last_read``; None: the
    added cities after the started ones), so that the unchanged file compares equal to it on the next run. A
    city is identified by its key (:func:`city_key`); a started city keeps the values it was planned with (an
    edit of its coordinates while watching was not planned: the queue already held its key); a started city
    no longer in the file follows the file's cities (it ran). Returns a new list; ``started`` when nothing was
    added."""
    if not added:
        return list(started)
    by_key = {city_key(c.city): c for c in added}
    by_key.update({city_key(c.city): c for c in started})
    order = [city_key(c.city) for c in (last_read if last_read is not None else [*started, *added])]
    out: list[CitySpec] = []
    for k in order:
        if k in by_key and all(city_key(c.city) != k for c in out):
            out.append(by_key[k])
    placed = {city_key(c.city) for c in out}
    for c in [*started, *added]:
        if (k := city_key(c.city)) not in placed:
            placed.add(k)
            out.append(by_key[k])
    return out


def crawl_stages() -> list[Stage]:
    """The six crawl stages in data-flow order."""
    return [CityScreenerStage(), SiteSamplerStage(), ImageryFetcherStage(), ImageAuditorStage(),
            ReferenceabilityAuditorStage(), LadderBuilderStage()]


def city_messages(cities: Sequence[CitySpec]) -> list[Message]:
    """The ``cities`` edge messages (key ``city:<slug>``, stable across runs)."""
    return [(f"city:{city_key(c.city)}", {"city": c.model_dump()}) for c in cities]


async def enqueue_cities(queue: WorkQueue, cities: Sequence[CitySpec]) -> int:
    """Put each city on the ``cities`` edge (key ``city:<slug>``; already known cities are no-ops)."""
    return await queue.put_many(city_messages(cities))


async def watch_config_cities(config_path: str | Path, queue: WorkQueue, *, interval_s: float = 10.0,
                              stop: asyncio.Event | None = None,
                              on_new: Callable[[CitySpec], None] | None = None,
                              on_read: Callable[[list[CitySpec]], None] | None = None,
                              on_not_queued: Callable[[CitySpec], None] | None = None,
                              known_keys: Iterable[str] = ()) -> None:
    """Re-read the config every ``interval_s`` and enqueue cities added to ``[[crawl.cities]]`` (daemon
    ``--watch``: editing the config file is how a city is added to a running crawl). A config that cannot be
    read or fails to parse is skipped and the previous cities stay; a warning says so
    (:class:`geoagent.config.InputWarning`: a ``warning: crawl --watch: cannot re-read CONFIG ...`` line on the
    CLI's console, once per distinct error).

    Each city that is new to the ``cities`` queue (its key ``city:<slug>`` was never queued, in any state) is
    logged on its own line (``crawl --watch: planned new city 'Name' (city:<slug>), found in CONFIG``: the file
    is only read, never edited; printed, since a watching crawl is
    interactive); cities already queued (the run's own plan, an earlier run's) are not. ``on_read`` gets the
    file's whole ``[[crawl.cities]]`` list (in its order) after each read that parsed.

    Record first, then queue (crash safety): a city not among ``known_keys`` (the keys the run planned at its
    start) nor queued by an earlier read is passed to ``on_new`` (the crawl records it in the run's manifest entry)
    BEFORE it is put on the queue, so a process killed between the two steps leaves it recorded and not queued,
    which the next run, planning every city of its config, queues; never queued and unrecorded. When the put
    finds the key queued already (another process of the campaign) or raises, ``on_not_queued`` gets the city (the
    crawl takes its record back; a failed put is tried again at the next read; a put cancelled by a stop keeps the
    record, as it may have committed). A :class:`~geoagent.runtime.queue.QueueError` from the put (the queue locked
    by another process past its busy timeout, a Redis script refused) is a warning too (``crawl --watch: cannot
    queue city ...``); the rest of that read waits for the next one. Source: issue 5 (the crawl
    daemon's watch mode); the order: session 14's leftover (a kill between queueing and recording)."""
    import logging
    import tomllib

    from geoagent.crawl.settings import load_crawl_settings

    log = logging.getLogger(__name__)
    stop = stop or asyncio.Event()
    known: set[str] = set(known_keys)
    while not stop.is_set():
        try:
            with open(config_path, "rb") as f:  # as load_config reads it: a byte-order mark is dropped
                data = tomllib.loads(f.read().decode("utf-8-sig"))
            settings = load_crawl_settings(data.get("crawl", {}), where=str(config_path))
            if on_read is not None:
                on_read(list(settings.cities))
            for key, payload in city_messages(settings.cities):
                if key in known:
                    continue
                city = CitySpec.model_validate(payload["city"])
                if on_new is not None:  # recorded before it is queued: a kill between the two leaves it recorded
                    on_new(city)
                try:
                    queued = await queue.put(key, payload)
                except Exception as e:  # not queued: taken back, tried again at the next read
                    if on_not_queued is not None:
                        on_not_queued(city)
                    if not isinstance(e, QueueError):
                        raise
                    # the queue locked past its busy timeout, a Redis script refused: a warning line, as for a
                    # file that cannot be read; the watcher keeps watching (the next puts would likely fail too)
                    import warnings

                    from geoagent.config import InputWarning

                    warnings.warn(f"crawl --watch: cannot queue city {city.city!r} ({key}) now (tried again at the "
                                  f"next read): {e}", InputWarning, stacklevel=2)
                    break
                # (a stop cancelling the put leaves the record: the put may have committed, and a city recorded but
                # not queued is queued by the next run, which plans every city of its config)
                known.add(key)
                if queued:
                    line = f"crawl --watch: planned new city {city.city!r} ({key}), found in {config_path}"
                    log.info("%s", line)
                    print(line, flush=True)
                elif on_not_queued is not None:
                    on_not_queued(city)
        except (OSError, ValueError) as e:
            # a "warning: ..." line on the CLI's console, as the crawl's other warnings (InputWarning); the same
            # text every interval_s while the file stays broken is printed once (Python's default filter)
            import warnings

            from geoagent.config import InputWarning

            warnings.warn(f"crawl --watch: cannot re-read {config_path} (its cities stay as last read): {e}",
                          InputWarning, stacklevel=2)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except asyncio.TimeoutError:
            pass


async def run_crawl(settings: CrawlSettings, *, campaign: str, queues_root: str | Path, state_dir: str | Path,
                    http: Any, images_root: str | Path | None = None, mapillary_token: str | None = None,
                    providers: dict[str, Any] | None = None, burst: bool = True, handle_signals: bool = False,
                    tick: Any = None, services: CrawlServices | None = None, queue: Any = None) -> Any:
    """Run the whole crawl pipeline over ``settings.cities`` (burst: until done; ``burst=False`` keeps
    polling for new cities, e.g. with :func:`watch_config_cities`); returns the runtime's ``PipelineRun``.
    Resumable: re-running picks up from the queues and the stored results. Pass ``services`` (from
    :func:`build_crawl_services`) to read :meth:`CrawlServices.api_stats` for ``status`` while it runs.

    ``queue``: the config's ``[queue]`` section (:class:`geoagent.config.QueueSection`, or any object with its
    ``watch_probe_after_s`` / ``watch_probe_max_s``), read as ``run --watch`` and ``crawl --watch`` read it: in
    watch mode (``burst=False``) a stage whose unreachable-host breaker opened probes the host after
    ``watch_probe_after_s`` s, the cool-down doubling up to ``watch_probe_max_s`` s
    (:mod:`geoagent.runtime.worker`, "Unreachable hosts"). None: the runtime's defaults
    (:data:`geoagent.constants.DEFAULT_WATCH_PROBE_AFTER_S` / ``DEFAULT_WATCH_PROBE_MAX_S``).

    The stages' context carries the services' HTTP client as ``http`` (as under the campaign engine), so a
    stop request ends the retries of requests in flight (:meth:`~geoagent.runtime.http.HttpClient.stop_retries`:
    their tasks go back to the queue untouched)."""
    from geoagent.runtime.daemon import open_edge_queues, run_pipeline

    svc = services or build_crawl_services(settings, http, state_dir=state_dir, images_root=images_root,
                                           mapillary_token=mapillary_token, providers=providers)
    stages = crawl_stages()
    queues = open_edge_queues(queues_root, campaign, stages)
    try:
        await enqueue_cities(queues[C.EDGE_CITIES], settings.cities)
        # the shared client as the "http" service, as the campaign engine gives it: a stop request (Ctrl-C,
        # SIGTERM) reaches HttpClient.stop_retries through it, so no request backs off and retries after it
        ctx = StageContext(campaign, {"crawl": svc, "config": settings, "http": svc.http})
        options = {}
        if queue is not None:  # the half-open settings of watch mode, as the campaign engine passes them
            options = {"probe_after_s": float(queue.watch_probe_after_s), "probe_max_s": float(queue.watch_probe_max_s)}
        return await run_pipeline(campaign, stages, queues, ctx, burst=burst, handle_signals=handle_signals, tick=tick,
                                  runner_options=options)
    finally:
        for q in queues.values():
            await q.close()
