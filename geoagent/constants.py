"""Every queue, stage, file and environment-variable name in one place (imports nothing of ours).

Data flows one way (the diagram of docs/how-it-works.md, "How it works"):

    crawl:    cities -> screener -> admitted -> sampler -> sites -> fetcher -> images -> image_auditor
              -> sites_for_audit -> referenceability auditor -> rated -> ladder builder
              (one linear chain, so burst mode knows every stage's upstream)
    evaluate: planner -> requests -> model caller -> responses -> parser -> answers
              -> (geocoder, GeoHint only) -> located -> scorer -> scored -> aggregator
"""

from __future__ import annotations

# --- environment variables -------------------------------------------------------------------
ENV_QUEUES_ROOT = "GEOAGENT_QUEUES"
ENV_STATE_ROOT = "GEOAGENT_STATE"
ENV_RELEASE_DIR = "GEOAGENT_RELEASE"
#: the per-user index of the folders each campaign config ran from ("" turns it off; geoagent.runtime.runs_index)
ENV_RUNS_INDEX = "GEOAGENT_RUNS_INDEX"

# --- default data roots (relative to the working directory) ----------------------------------
DEFAULT_QUEUES_ROOT = "queues"
DEFAULT_STATE_ROOT = "state"
DEFAULT_RELEASE_DIR = "../shared/reference/geocontext"

# --- continents -------------------------------------------------------------------------------
#: The continent codes of the release (``city_pool.csv``, ``sites.csv``; ``verify_trials.csv`` column ``cont``),
#: code -> name. The release writes North America as ``AN`` (New York, Toronto, Mexico City), so AN is not
#: Antarctica here; the usual ``NA`` is read as ``AN`` (:data:`CONTINENT_ALIASES`). The swapped-image control
#: (``ctrl_mismatch``) pairs sites whose codes differ, so every source normalises to these
#: (:func:`geoagent.geo.continent_code`).
CONTINENT_CODES = {"AF": "Africa", "AN": "North America", "AS": "Asia", "EU": "Europe", "OC": "Oceania",
                   "SA": "South America"}
CONTINENT_ALIASES = {"NA": "AN"}

# --- queue edges (one SQLite file per edge under queues/<campaign>/) -------------------------
EDGE_REQUESTS = "requests"  # planner -> model caller
EDGE_RESPONSES = "responses"  # model caller -> parser
EDGE_ANSWERS = "answers"  # parser -> geocoder (GeoHint) or scorer (GeoVerify)
EDGE_LOCATED = "located"  # geocoder -> scorer
EDGE_SCORED = "scored"  # scorer -> aggregator

EDGE_CITIES = "cities"  # config -> city screener
EDGE_ADMITTED = "admitted"  # screener -> site sampler
EDGE_SITES = "sites"  # sampler -> imagery fetcher and referenceability auditor
EDGE_IMAGES = "images"  # fetcher -> image auditor
EDGE_SITES_FOR_AUDIT = "sites_for_audit"  # image auditor -> referenceability auditor (one per site)
EDGE_RATED = "rated"  # referenceability auditor -> ladder builder

#: the words of the model caller's not-found stop (its host does not serve the model's path or id, walk39 #6) that
#: ``status`` reads in a stage's last errors (:class:`geoagent.workers.model_caller.AuthFailure`,
#: :func:`geoagent.status.stop_reason`)
NOT_FOUND_WHAT = "path or model not found"

# --- stage (worker) names ---------------------------------------------------------------------
STAGE_PLANNER = "planner"
STAGE_MODEL_CALLER = "model_caller"
STAGE_PARSER = "parser"
STAGE_GEOCODER = "geocoder"
STAGE_SCORER = "scorer"
STAGE_AGGREGATOR = "aggregator"
STAGE_SCREENER = "city_screener"
STAGE_SAMPLER = "site_sampler"
STAGE_FETCHER = "imagery_fetcher"
STAGE_IMAGE_AUDITOR = "image_auditor"
STAGE_REF_AUDITOR = "referenceability_auditor"
STAGE_LADDER_BUILDER = "ladder_builder"

# --- files under queues/<campaign>/ -------------------------------------------------------------
QUEUES_STATE_FILE = "state_root.json"  # the state folder these queues belong to (engine.check_queues_state_root)
#: the folder of a campaign's owner lock files in its state folder, ``leases/<lease owner id>.lock``: each run holds
#: its own (engine.run_lock), and one free or missing is a process gone (engine's dead-owner scan, the ledger's owners)
OWNER_LOCKS_DIR = "leases"

# --- files under state/<campaign>/ ------------------------------------------------------------
CAMPAIGN_DB = "campaign.sqlite"  # response store + ledger (one file so store+settle is one transaction)
MANIFEST_FILE = "manifest.json"
#: held exclusively by a run from the re-check of its config against the campaign's earlier runs to the manifest's
#: record of its start, the plan queued between (engine.PlanLock; review44b #1: two first runs at other taus mixed)
PLAN_LOCK_FILE = "plan.lock"
PROGRESS_FILE = "progress.jsonl"
RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"
REPORT_DIR = "report"
AUDIT_DECISIONS_FILE = "audit_decisions.jsonl"
AUDIT_SENSITIVE_FILE = "audit_sensitive.jsonl"
CRAWL_DECISIONS_FILE = "crawl_decisions.jsonl"  # a crawl's own decisions (e.g. WDQS spatial splits), one JSON per line
IMAGES_DIR = "images"  # state/images/<site>/<image_id>.jpg
#: state/<campaign>/state_folder_id: the random id of the one state folder a Redis-backed crawl runs from, the
#: same id recorded on the server (geoagent.runtime.backend.check_one_state_folder; redis41 #1)
STATE_FOLDER_ID_FILE = "state_folder_id"
#: the folder under the state root where ``run.py demo`` writes its filled-in configs (:mod:`geoagent.demo`); no
#: campaign may take its name
DEMO_CONFIGS_DIR = "demo-configs"
EXPORT_DIR = "export"  # state/<campaign>/export/: a crawl's tables as Parquet and CSV (run.py export)
LADDERS_DIR = "ladders"  # state/<campaign>/ladders/<site>_ladder_<auditor>-<lang>.csv: a crawl's context ladders
#: state/<campaign>/ladders_superseded/: ladders built under another referenceability auditor than the config's
#: (moved out of LADDERS_DIR, kept, read by nothing: geoagent.crawl.stages.set_aside_other_auditor_ladders)
SUPERSEDED_LADDERS_DIR = "ladders_superseded"

# --- queue defaults ---------------------------------------------------------------------------
DEFAULT_VISIBILITY_TIMEOUT_S = 300.0
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BACKOFF_BASE_S = 2.0
DEFAULT_BACKOFF_MAX_S = 300.0

# --- protocol constants (seed 000) ------------------------------------------------------------
EARTH_RADIUS_KM = 6371.0088  # mean Earth radius (IUGG); matches the release's d_km to 1e-4 km
#: the largest distance two points on Earth's surface can have, km: half the equatorial circumference (WGS 84
#: equatorial radius 6378.137 km; above pi * EARTH_RADIUS_KM, the haversine maximum, so any radius convention
#: fits under it). A ladder ``dist_km`` or trial ``d_km`` above it is a corrupt value, refused where it is read.
MAX_SURFACE_DISTANCE_KM = 3.141592653589793 * 6378.137
GEOVERIFY_TAU_KM = 0.15  # Sec. 5: claim tolerance tau = 150 m
GEOVERIFY_DECOY_BANDS_KM = ((0.15, 0.3), (0.3, 0.7), (0.7, 1.5), (1.5, 3.0), (3.0, 6.0))  # Sec. 5.2
LADDER_BANDS_KM = ((0.5, 1.5), (1.5, 3.0), (3.0, 6.0))  # Sec. 3.3
HIT_THRESHOLD_KM = 1.0  # Sec. 4.2: hit = error < 1 km and finer than city

#: stage-context service flag set by the campaign engine: the campaign kind writes the final report after the
#: stages stop, so aggregator stages skip their own final rewrite
SERVICE_CAMPAIGN_WRITES_REPORT = "campaign_writes_report"

#: stage-context service set by a campaign kind's plan (GeoVerify, GeoHint): a callable returning the header lines of
#: a live report rewrite as keyword arguments of the kind's report writer (``interim``: the rewrite is of a running
#: campaign; ``simulated``, ``replay_note``, ``image_note``: as the final report says them), so a live report, and one
#: a killed run leaves behind, never reads as final or as a real model's (:class:`geoagent.report.live.LiveBanners`)
SERVICE_LIVE_BANNERS = "live_report_banners"
#: stage-context service set by the campaign engine: a callable ``() -> bool``, whether another live process of the
#: campaign may run the aggregator stage now (this machine's manifest: :func:`geoagent.runtime.manifest.
#: stages_run_elsewhere`; Redis: any other process of the campaign alive on the server, which does not record stages),
#: called in the report thread before each live rewrite. True: the rewrite rebuilds the sums from the store first,
#: since each such process counts only the scored rows it leased (live42 #1; :mod:`geoagent.report.live`)
SERVICE_AGGREGATED_ELSEWHERE = "aggregated_elsewhere"

#: ``run --watch``: seconds a stage whose unreachable-host breaker opened waits before probing the host with one
#: task, and the most it waits (the wait doubles after each failed probe); ``[queue] watch_probe_after_s`` /
#: ``watch_probe_max_s`` (geoagent.runtime.worker, "Unreachable hosts")
DEFAULT_WATCH_PROBE_AFTER_S = 30.0
DEFAULT_WATCH_PROBE_MAX_S = 600.0
#: ctx.services key: a one-element list ``[n]`` counting plan messages a stage added while the run watched (a crawl
#: ``--watch`` picking up a city added to the config); the engine adds it to the run's "planned N" figure
SERVICE_PLANNED_DURING_RUN = "planned_during_run"
#: ctx service (set by the engine once the run's manifest entry exists): a callable ``() -> None`` that records in
#: that entry, durably, the run's planned count and the config it runs with so far (what the end of the run
#: records: geoagent.runtime.manifest.Manifest.record_progress); a stage that plans more while the run goes on
#: (a crawl --watch adding a city) calls it after each addition, so a process killed outright leaves them recorded
SERVICE_RECORD_RUN_SO_FAR = "record_run_so_far"
#: ctx service (set by the engine once the run's manifest entry exists): a callable ``() -> None`` that records in
#: that entry, durably and once, that the run's work began (geoagent.runtime.manifest.Manifest.record_work_began);
#: called before the run changes anything the final report and exports are made from: a stage runner before it
#: hands its first leased task to a worker, a kind before it rewrites a stored row, a --watch hand-off before it
#: rewrites the tables (review40b #5: `status` passes over a run killed before it)
SERVICE_WORK_BEGAN = "work_began"
#: ctx service: the stored answers per model and distinct request settings, for the models with more than one
#: (:func:`geoagent.runtime.drift.params_mix`), set by the engine before the report is written
SERVICE_PARAMS_MIX = "params_mix"
#: service: True while a campaign kind plans for a dry run (``--simulate``): a plan problem a real run refuses
#: for is kept for the dry run's report (:meth:`geoagent.engine.CampaignKind.plan_refusals`), not raised
SERVICE_DRY_RUN = "dry_run"
#: service: True while a campaign kind plans only to name what a real run would refuse for
#: (:func:`geoagent.engine.preflight_refusals`, a run refused for unset key variables): the plan writes nothing
#: (no data import into ``state/<campaign>/data/``), and no campaign service (ledger, store, HTTP client, host
#: board, run lock) is open
SERVICE_READ_ONLY = "plan_read_only"

#: A stored model response's ``request_meta.provider_kind``: what answered it, recorded at call time (the export's
#: ``replayed`` / ``simulated`` columns read it, :mod:`geoagent.runtime.export`): geoagent's simulator (provider
#: ``"simulated"``, a ``base_url`` on a sandbox model fake, ``*.sandbox.invalid``, or any answer carrying
#: :data:`SANDBOX_ANSWER_HEADER`), a ``replay`` model (a recorded
#: answer, no call), or a model server (any other: the provider's API, a local server of one's own). A response stored
#: before this field existed has none: the export then falls back to the current config and says so.
REQUEST_META_PROVIDER_KIND = "provider_kind"
PROVIDER_KIND_SIMULATED = "simulated"
PROVIDER_KIND_REPLAY = "replay"
PROVIDER_KIND_MODEL = "model"
PROVIDER_KINDS = (PROVIDER_KIND_SIMULATED, PROVIDER_KIND_REPLAY, PROVIDER_KIND_MODEL)
#: ctx service: ``[[models]]`` name -> provider kind (:data:`PROVIDER_KINDS`), from the config as written (a sandbox
#: fake is known by its ``*.sandbox.invalid`` URL, which the launched config no longer has), set by the engine
#: (:func:`geoagent.sandbox.launch.provider_kinds`); the model caller records each answer's kind from it
SERVICE_PROVIDER_KINDS = "provider_kinds"
#: StageContext service: {model name: its request tasks this run has to do}, set by the engine for a run that
#: answers for the whole plan edge with several models (geoagent.engine._lane_work); the model caller paces its
#: lanes by it (geoagent.runtime.worker, "Lanes")
SERVICE_LANE_WORK = "lane_work"
#: ctx service set by the engine before the workers start: the names of the stages this process runs (all of the
#: campaign's, or those ``--stages`` names), so a kind's refresh of stored rows (:meth:`geoagent.engine.CampaignKind.
#: refresh_scored_rows`) does work of a stage only where that stage runs (GeoHint's re-geocoding: fixreparse41)
SERVICE_OWN_STAGES = "own_stages"
#: ctx service: the process's one GeoHint geocoder (:class:`geoagent.geohint.geocode.Geocoder`), built by the first
#: :class:`~geoagent.geohint.geocode_stage.GeocodeStage` started without one of its own (the run's refresh of stored
#: rows, then its workers' stage: one Nominatim request cap, one cache, per process; review41a #1)
SERVICE_GEOCODER = "geocoder"
#: ctx service: why the process's geocoder was refused (HTTP 403), once it was: every
#: :class:`~geoagent.geohint.geocode_stage.GeocodeStage` on that geocoder stops (review41a #1)
SERVICE_GEOCODER_REFUSED = "geocoder_refused"
#: ctx service: a list of callables ``() -> None`` that :func:`geoagent.engine.open_services` calls, last first,
#: when it closes the services (what a stage opened for the whole process: the geocode cache; review41a #1)
SERVICE_CLOSE_AT_END = "close_at_end"
#: Response header every sandbox model fake (:mod:`geoagent.sandbox.llm_openai`, ``llm_anthropic``, ``llm_gemini``)
#: sends with each answer, value ``"1"``; no real API sends it. An HTTP provider that sees it marks the answer
#: (:attr:`geoagent.providers.base.ModelResponse.sandbox`) and the model caller records it as ``simulated``
#: (:data:`REQUEST_META_PROVIDER_KIND`), so a fake the user started on a port of their own counts as simulated
#: just as the ``*.sandbox.invalid`` fakes do.
SANDBOX_ANSWER_HEADER = "X-Geoagent-Sandbox"
