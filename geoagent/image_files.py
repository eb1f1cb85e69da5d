"""Planned images without a file: count them, and refuse to send placeholder pixels to a real model.

A GeoVerify trial or a GeoHint image is sent with its photo when ``<image_root>/<path>`` is a file (``path``
from the trial table, relative to the task's ``image_root``); otherwise the model caller attaches
deterministic placeholder pixels (:mod:`geoagent.workers.images`). That is right where no photo is needed
or none exists: the ``simulated`` and ``replay`` providers, the local fakes (``*.sandbox.invalid``, e.g. the
offline demo and ``geohint_sandbox.toml``), a replay of the public release (which gives Mapillary image ids,
not pixels). It is wrong for a model on a real provider: a mistyped ``image_root`` would pay for hundreds of
calls about placeholder pictures and report their H, F and d' as if they were about photos.

So the planners tally the images of their plan (:class:`MissingImages`; a GeoVerify gray-field control is
intended and not counted) and :func:`check_missing` decides:

* a model on a real provider (:func:`needs_photos`) would get a placeholder and ``[images] missing`` is
  ``"error"`` (the default): :class:`~geoagent.config.ConfigError` at plan time, so ``run`` exits 2 before
  anything is enqueued, naming the count, the config key, the folder and the first missing paths; its dry run
  (``--simulate``) keeps the same text as a warning (``check_missing(refusals=...)``), estimates the campaign
  with the missing photos at the expected photo size and exits 2 naming it beside the other pre-flight
  problems (unset API keys);
* otherwise (placeholders legitimate, or ``[images] missing = "placeholder"``): one warning line with the
  count, which the campaign prints (dry run and summary) and records in the run's manifest entry and the
  report.

A request sent with placeholder pixels has a request key of its own (``pixel_source``, part of the key only
then: :func:`geoagent.workers.model_caller.build_request`), so its stored answer never answers the same request
with the photo. But a task keeps the request it was queued with: when the photos are put in place after a run
that queued tasks with placeholders, the next run plans those tasks with their photos and finds them queued (or
done) with the placeholder request. :func:`photos_after_placeholders` counts them from the queue (which keeps
every task's payload; this works for campaigns run before the key had the pixel source too) and the campaign
prints one warning line naming how many and the way out: a new ``[campaign]`` name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: provider kinds that send the image to a real vision model (outside the local sandbox fakes)
PHOTO_PROVIDERS = ("openai", "anthropic", "gemini")
#: host suffix of the local fakes (:data:`geoagent.sandbox.launch.SANDBOX_SUFFIX`)
SANDBOX_SUFFIX = ".sandbox.invalid"
#: missing paths named in the refusal
SHOWN_MISSING = 5
#: the opt-in line quoted in messages
OPT_IN = '[images] missing = "placeholder"'
#: ``image_ref`` prefixes of intended generated images (a gray field, a seeded synthetic picture): never a photo
GENERATED_PREFIXES = ("blank:", "synthetic:")


def needs_photos(model: Any) -> bool:
    """Whether ``model`` (a ``[[models]]`` entry as written in the campaign file) is a real vision model that
    must not be sent placeholder pixels without the opt-in: provider ``openai``, ``anthropic`` or ``gemini``
    whose ``base_url`` is not a local fake (``*.sandbox.invalid``). A server on this machine (Ollama, a
    proxy in front of a paid API, a fake started by hand on a local port) counts as real: "real model" in
    messages and docs/campaigns.md."""
    if getattr(model, "provider", None) not in PHOTO_PROVIDERS:
        return False
    host = urlsplit(getattr(model, "base_url", None) or "").hostname or ""
    return not host.endswith(SANDBOX_SUFFIX)


def _why_legit(model: Any) -> str:
    provider = getattr(model, "provider", "?")
    if provider in PHOTO_PROVIDERS:
        return "local fake"
    return provider


@dataclass
class MissingImages:
    """The images of a plan and those without a file.

    Attributes
    ----------
    task : str
        ``"GeoVerify"`` or ``"GeoHint"`` (named in messages).
    key : str
        Config key of the image folder (``"geoverify.image_root"``).
    image_root : str or None
        Its value as written (None: not set).
    n_images : int
        Distinct images the planned requests show (gray-field controls not counted).
    missing : dict of str -> str
        Image id -> the file looked for (or why there is none), for each image without a file, in plan order.
    requests : dict of str -> int
        Model name -> planned requests that would carry placeholder pixels.
    synthetic : set of str
        The ids of ``missing`` that are synthetic placeholders by design (GeoHint ``images = "synthetic"``, or
        ``"auto"`` for a site without a release image): no file is looked for, so the image folder does not apply.
    synthetic_setting : str
        The setting that planned them, as messages quote it (``geohint.images = 'synthetic'``).
    synthetic_fix : str
        What sends photos instead, for the refusal (e.g. ``set geohint.images = "release" ...``).
    image_requests : int
        Planned requests that show an image (every model, a file or not; gray-field controls not counted).
    synthetic_requests : int
        Those of them whose image is a synthetic placeholder by design (:attr:`synthetic`): ``image_requests``
        minus this is what a plan of the trial table's images alone holds of this one (newuser41 #A).
    """

    task: str
    key: str
    image_root: str | None
    n_images: int = 0
    missing: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    synthetic: set[str] = field(default_factory=set)
    synthetic_setting: str = ""
    synthetic_fix: str = ""
    image_requests: int = 0
    synthetic_requests: int = 0

    @property
    def n_missing(self) -> int:
        return len(self.missing)

    @property
    def n_synthetic(self) -> int:
        """Images of ``missing`` that are synthetic placeholders by design (no file looked for)."""
        return len(self.synthetic & set(self.missing))

    @property
    def n_no_file(self) -> int:
        """Images of ``missing`` whose file was looked for under the image folder and not found."""
        return self.n_missing - self.n_synthetic

    @property
    def photo_ids(self) -> frozenset[str]:
        """Image ids of ``missing`` that stand for photos (a file looked for and not found), not synthetic
        placeholders by design: the dry run estimates them at the expected photo size (:func:`expected_photo`)."""
        return frozenset(set(self.missing) - self.synthetic)

    @property
    def n_requests(self) -> int:
        return sum(self.requests.values())

    def folder_text(self) -> str:
        """``'photos' (= /abs/photos, which does not exist)``, or ``not set (...)`` saying that then no file is
        looked for."""
        if not self.image_root:
            return (f"not set (no folder: the {self.task} table's image paths are looked up nowhere and every image "
                    "gets placeholder pixels; set it to the folder those paths are relative to)")
        root = Path(self.image_root)
        shown = repr(self.image_root) if root.is_absolute() else f"{self.image_root!r} (= {os.path.abspath(root)})"
        if not root.exists():
            return f"{shown}, which does not exist"
        if not root.is_dir():
            return f"{shown}, which is not a folder"
        return shown

    def count_text(self) -> str:
        """``3 of 17 images ... have no file under geoverify.image_root = 'photos' (= ...)``; for synthetic
        placeholders planned by design (:attr:`synthetic`), what happens instead of a folder that does not apply:
        ``8 of 8 images ... are synthetic placeholders (geohint.images = 'synthetic': no photo file is looked
        for)``; both parts when a plan has both."""
        head = f"{self.n_missing} of {self.n_images} image{'' if self.n_images == 1 else 's'} of the planned {self.task} requests"
        syn, files = self.n_synthetic, self.n_no_file
        syn_text = (f"{'is a synthetic placeholder' if syn == 1 else 'are synthetic placeholders'} "
                    f"({self.synthetic_setting or 'by design'}: no photo file is looked for)")
        file_text = f"{'has' if files == 1 else 'have'} no file under {self.key} = {self.folder_text()}"
        if not syn:
            return f"{head} {file_text}"
        if not files:
            return f"{head} {syn_text}"
        return f"{head} have no photo: {syn} {syn_text}; {files} {file_text}"

    def paths_note(self) -> str:
        """What the paths of :meth:`first_missing` are relative to, for messages: `` (paths as written in the
        table: not resolved against any folder, since geoverify.image_root is not set)`` without ``image_root``
        (the config key :attr:`key` named, not "the key": the message is read next to API key errors), `` (relative to the working directory
        /cwd)`` for a relative ``image_root``, "" for an absolute one (the paths are absolute)."""
        if not self.image_root:
            return f" (paths as written in the table: not resolved against any folder, since {self.key} is not set)"
        if not Path(self.image_root).is_absolute():
            return f" (relative to the working directory {os.getcwd()})"
        return ""

    def first_missing(self, n: int = SHOWN_MISSING) -> str:
        shown = list(self.missing.values())[:n]
        more = self.n_missing - len(shown)
        return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")

    def to_json(self) -> dict[str, Any]:
        """The manifest fields: ``images_planned``, ``images_missing``, ``placeholder_requests`` (per model),
        ``image_root`` (as written) and ``image_root_key``."""
        return {"images_planned": self.n_images, "images_missing": self.n_missing,
                "placeholder_requests": dict(self.requests), "image_root": self.image_root, "image_root_key": self.key}


def tally(messages: Iterable[tuple[str, Mapping[str, Any]]], describe: Callable[[Mapping[str, Any]], str], *,
          task: str, key: str, image_root: str | None, intended: Callable[[Mapping[str, Any]], bool] | None = None,
          synthetic: Callable[[Mapping[str, Any]], bool] | None = None, synthetic_setting: str = "",
          synthetic_fix: str = "") -> MissingImages:
    """Tally the images of planned request messages.

    Parameters
    ----------
    messages : iterable of (key, payload)
        Planned ``requests`` messages (``model``, ``image_id``, ``image_ref``).
    describe : callable
        Payload without ``image_ref`` -> the file looked for (or why there is none), for the message.
    task, key, image_root
        As in :class:`MissingImages`.
    intended : callable, optional
        Payload -> True for an image that is meant to be synthetic (a gray-field control): not counted.
    synthetic : callable, optional
        Payload -> True for a placeholder image the config asked for (GeoHint ``images = "synthetic"``): counted
        (its requests still carry placeholder pixels) but worded as such, not as a file missing from the image
        folder (:attr:`MissingImages.synthetic`); ``synthetic_setting`` and ``synthetic_fix`` as there.
    """
    out = MissingImages(task=task, key=key, image_root=image_root)
    if synthetic is not None:
        out.synthetic_setting, out.synthetic_fix = synthetic_setting, synthetic_fix
    seen: set[str] = set()
    for _key, p in messages:
        if intended is not None and intended(p):
            continue
        image_id = p.get("image_id")
        if not image_id:
            continue
        image_id = str(image_id)
        out.image_requests += 1
        if image_id not in seen:
            seen.add(image_id)
            out.n_images += 1
        if p.get("image_ref"):
            continue
        if image_id not in out.missing:
            out.missing[image_id] = describe(p)
            if synthetic is not None and synthetic(p):
                out.synthetic.add(image_id)
        if image_id in out.synthetic:
            out.synthetic_requests += 1
        model = str(p.get("model"))
        out.requests[model] = out.requests.get(model, 0) + 1
    return out


#: what the dry run says a photo without a file is counted as when no crawl's ``thumb_field`` is known
DEFAULT_PHOTO_BASIS = "a Mapillary thumb_1024_url thumbnail, the crawl's default [crawl.fetcher] thumb_field"


def crawl_thumb_field(folder: str | os.PathLike[str] | None) -> str | None:
    """The ``[crawl.fetcher] thumb_field`` of the crawl whose state folder is ``folder`` (a GeoVerify or GeoHint
    campaign's release folder, ``release_dir``, when it points at a crawl), read from the ``manifest.json`` the
    crawl wrote (its ``kind`` ``"crawl"``, ``config.crawl.fetcher.thumb_field``); None for a folder without one
    (the public release, a copy of it) or whose manifest cannot be read (:func:`_crawl_thumb` says why)."""
    return _crawl_thumb(folder)[0]


def _crawl_thumb(folder: str | os.PathLike[str] | None) -> tuple[str | None, str]:
    """``(thumb_field or None, why it is not known or "")`` of the crawl in ``folder`` (:func:`crawl_thumb_field`).
    The reason is "" where nothing is amiss: no folder, no manifest, another campaign's manifest, or a crawl's
    that records no ``[crawl.fetcher]`` (the crawl's default then applied). It names the file when the manifest
    cannot be read or a part of it has another shape (hand-edited: a list where a table belongs)."""
    from geoagent.runtime.manifest import read_manifest

    if folder is None:
        return None, ""
    where = Path(folder) / "manifest.json"
    try:
        data = read_manifest(folder)
    except (OSError, ValueError) as exc:
        return None, f"{where} cannot be read ({type(exc).__name__}), so a crawl's thumb_field is not known"
    if not isinstance(data, dict) or data.get("kind") != "crawl":
        return None, ""
    node: Any = data
    for part in ("config", "crawl", "fetcher"):
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None, ""
        if not isinstance(node, dict):
            return None, f"the crawl's {where} holds no readable [crawl.fetcher] thumb_field ({part} is no table)"
    thumb = node.get("thumb_field")
    if thumb is None:
        return None, ""
    if not isinstance(thumb, str):
        return None, f"the crawl's {where} holds no readable [crawl.fetcher] thumb_field ({thumb!r})"
    return thumb, ""


def expected_photo(folder: str | os.PathLike[str] | None) -> tuple[tuple[int, int], str]:
    """``((width, height) in px, what it is)``: the photo a campaign reading the release folder ``folder`` will
    send for an image whose file is not there yet, for the dry run's estimate. A crawl's folder with a known
    ``thumb_field`` (:func:`crawl_thumb_field`): that thumbnail's size
    (:data:`geoagent.workers.images.THUMB_PHOTO_SIZE_PX`; ``thumb_original_url``: an assumed 4000 x 3000, said
    so); otherwise :data:`geoagent.workers.images.EXPECTED_PHOTO_SIZE_PX` (1024 x 768, the crawl's default
    ``thumb_1024_url``) and :data:`DEFAULT_PHOTO_BASIS`, or, where the crawl's manifest cannot be read or names a
    field of no known size, that size with the reason instead of "the crawl's default"."""
    from geoagent.workers.images import EXPECTED_PHOTO_SIZE_PX, THUMB_PHOTO_SIZE_PX

    thumb, problem = _crawl_thumb(folder)
    size = THUMB_PHOTO_SIZE_PX.get(thumb or "")
    if size is None:
        if thumb is not None:
            problem = (f"the crawl in {folder} fetches {thumb}, a [crawl.fetcher] thumb_field of no known size "
                       f"(known: {', '.join(THUMB_PHOTO_SIZE_PX)})")
        if problem:
            return EXPECTED_PHOTO_SIZE_PX, f"a Mapillary thumb_1024_url thumbnail assumed: {problem}"
        return EXPECTED_PHOTO_SIZE_PX, DEFAULT_PHOTO_BASIS
    basis = f"a Mapillary {thumb} thumbnail, the [crawl.fetcher] thumb_field of the crawl in {folder}"
    if thumb == "thumb_original_url":
        basis = (f"a Mapillary thumb_original_url photo, the [crawl.fetcher] thumb_field of the crawl in {folder}: "
                 f"originals have no fixed size, {size[0]}x{size[1]} assumed (12 MP, 4:3, a common phone and "
                 "action-camera size; a larger original costs more under tiled billing)")
    return size, basis


def check_missing(cfg: Any, found: MissingImages, *, fix: str, refusals: list[str] | None = None) -> str | None:
    """Refuse placeholder pixels for real models, else the warning line (None when every image has a file).

    Parameters
    ----------
    cfg : CampaignConfig
        The campaign as written (model ``base_url`` before the sandbox's loopback rewrite), with ``[images]``.
    found : MissingImages
        The plan's tally (:func:`tally`).
    fix : str
        What to do about it, for the refusal (e.g. where the trial table's paths point).
    refusals : list of str, optional
        The dry run's list of pre-flight problems: when given, the refusal is appended to it (its text, without
        raising) and None is returned, so the dry run can estimate the campaign (missing photos at the expected
        photo size) and report every problem a real run would refuse for in one exit
        (:func:`geoagent.engine.run_campaign`); a real run passes None and gets the ``ConfigError``.

    Returns
    -------
    str or None
        One line: ``N of M images ... have no file under <key> = <folder>: K requests carry placeholder pixels
        instead of photos (<why that is allowed>)``; requests of ``replay`` models are not counted (they send no
        image: the answer comes from the recorded file), and a plan whose only such requests are replay ones
        gets None.

    Raises
    ------
    geoagent.config.ConfigError
        ``[images] missing = "error"`` and a model on a real provider (:func:`needs_photos`) would get a
        placeholder (and ``refusals`` is None): names the count, the key, the folder, the models, the first
        missing files, the dry run (``--simulate``) as the way to estimate before the photos exist, and the
        opt-in (which sends placeholder pixels to those real models).
    """
    from geoagent.config import ConfigError

    if not found.n_missing:
        return None
    section = cfg.section("images") if hasattr(cfg, "section") else None
    mode = getattr(section, "missing", "error")
    by_name = {m.name: m for m in getattr(cfg, "models", [])}
    # a replay model answers from its recorded file and sends no image at all: no placeholder is sent to it
    sent = {n: k for n, k in found.requests.items() if getattr(by_name.get(n), "provider", None) != "replay"}
    if not sent:
        return None
    if len(sent) < len(found.requests):
        found = MissingImages(task=found.task, key=found.key, image_root=found.image_root, n_images=found.n_images,
                              missing=found.missing, requests=sent, synthetic=found.synthetic,
                              synthetic_setting=found.synthetic_setting, synthetic_fix=found.synthetic_fix,
                              image_requests=found.image_requests, synthetic_requests=found.synthetic_requests)
    real = [name for name in found.requests if name in by_name and needs_photos(by_name[name])]
    if real and mode == "error":
        models = ", ".join(f"{n!r} ({by_name[n].provider})" for n in real)
        n_req = sum(found.requests[n] for n in real)
        if found.n_no_file:
            where, first, fix_text = found.key, f" First missing{found.paths_note()}: {found.first_missing()}.", fix
        else:  # synthetic placeholders by design: the image folder does not apply, the images mode does
            where, first = found.synthetic_setting.split(" = ")[0] or found.key, ""
            fix_text = found.synthetic_fix or fix
        text = (f"{where}: {found.count_text()}, so {n_req} request{'' if n_req == 1 else 's'} to real model(s) {models} "
                f"would carry placeholder pixels instead of photos.{first} {fix_text}. To estimate the campaign's "
                f"cost before the photos exist, use the dry run (`run CONFIG --simulate`): it counts each missing "
                f"photo at the size the run will send, without any config change ({OPT_IN} would instead send "
                f"placeholder pixels to these real models (not *.sandbox.invalid fakes): only for a deliberate test)")
        if refusals is not None:
            refusals.append(text)
            return None
        raise ConfigError(str(getattr(cfg, "source", None) or getattr(cfg, "name", "campaign")),
                          [text + ". Nothing was run"])
    if real:
        why = f"{OPT_IN} for {', '.join(repr(n) for n in real)}"
    else:
        kinds = sorted({_why_legit(by_name[n]) if n in by_name else "?" for n in found.requests})
        why = f"allowed: {', '.join(kinds)} model{'' if len(found.requests) == 1 else 's'} " \
              f"{', '.join(repr(n) for n in found.requests)}"
    return (f"{found.count_text()}: {found.n_requests} request{'' if found.n_requests == 1 else 's'} carry placeholder "
            f"pixels instead of photos ({why})")


def photos_after_placeholders(cfg: Any, messages: Iterable[tuple[str, Mapping[str, Any]]], *, key: str
                              ) -> str | None:
    """The warning for planned tasks that now have their photo but were queued earlier with placeholder pixels.

    A task planned again keeps the payload it was first queued with (a put of a queued key is a no-op), so a
    GeoVerify trial or GeoHint request queued by an earlier run with no file under the image folder (payload
    ``image_id`` without ``image_ref``: placeholder pixels) is still asked, or was answered, about the
    placeholder when a later run finds its photo: its answer counts in the results as if it were about the
    photo. Read-only; looks only at the planned tasks that carry a photo now (``image_ref`` a file path, not a
    generated ``blank:``/``synthetic:`` image) of models that are sent pixels (not ``replay``).

    Parameters
    ----------
    cfg : CampaignConfig
        The campaign as run (its queue folder and name, its models' providers).
    messages : iterable of (task key, payload)
        The planned ``requests`` messages.
    key : str
        Config key of the image folder (``"geoverify.image_root"``), named in the line.

    Returns
    -------
    str or None
        One line: ``N planned tasks (model 'gpt': N) were queued by an earlier run of campaign C with placeholder
        pixels (no file under <key> then) and now have their photo: ... To ask with the photos, run the campaign
        under a new [campaign] name (...)``; None when there are none, or the campaign has no queue yet. A task
        dead-lettered with its placeholder request counts too (a requeue sends that request).
    """
    from geoagent import constants as C
    from geoagent.runtime.sqlite_queue import read_payloads
    from geoagent.textfmt import count_text

    replay = {m.name for m in getattr(cfg, "models", []) if getattr(m, "provider", None) == "replay"}
    model_of: dict[str, str] = {}
    for task_key, p in messages:
        ref = p.get("image_ref")
        if (p.get("image_id") and isinstance(ref, str) and ref and not ref.startswith(GENERATED_PREFIXES)
                and p.get("model") not in replay):
            model_of[task_key] = str(p.get("model"))
    if not model_of:
        return None
    # only the payloads queued with placeholder pixels (image id, no file) are kept in memory
    queued = read_payloads(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS, model_of,
                           keep=lambda old: isinstance(old, dict) and bool(old.get("image_id"))
                           and not old.get("image_ref"))
    by_model: dict[str, int] = {}
    for task_key in queued or {}:
        by_model[model_of[task_key]] = by_model.get(model_of[task_key], 0) + 1
    n = sum(by_model.values())
    if not n:
        return None
    models = ", ".join(f"{name!r}: {k}" for name, k in by_model.items())
    return (f"{count_text(n, 'planned task')} (model{'s' if len(by_model) > 1 else ''} {models}) "
            f"{'was' if n == 1 else 'were'} queued by an earlier run of campaign {cfg.name} with placeholder pixels "
            f"(no file under {key} then) and now {'has its' if n == 1 else 'have their'} photo: a task keeps the "
            f"request it was first queued with, so {'its answer is' if n == 1 else 'their answers are'} (or will be) "
            f"about the placeholder and count{'s' if n == 1 else ''} in the results as if about the photo. To ask "
            f"with the photos, run the campaign under a new [campaign] name (a new state folder: every request is "
            f"asked, and paid for, again)")
