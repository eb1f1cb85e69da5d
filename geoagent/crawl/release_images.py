"""Fetch the photos of a GeoContext release from Mapillary (newuser39 #3).

The release gives Mapillary image ids and coordinates, not pixels (seed 000, "Reproducibility"), so a GeoVerify or
GeoHint campaign over it with a real model has no photo to send. This command downloads each image's thumbnail
through the Mapillary Graph API v4 (``GET /{image_id}?fields=thumb_1024_url``, then the signed CDN URL:
:meth:`geoagent.clients.mapillary.MapillaryClient.download_thumbnail`, with its redirect guard and size cap) and
writes it where the release's trial table says (``path``, e.g. ``streetview/<site>/<id>.jpg``) under ``--out``,
the folder to give as the task's ``image_root``::

    export MAPILLARY_TOKEN=MLY|...            # or put it in .env
    python -m geoagent.crawl.release_images --out state/release_images
    # then: [geoverify] image_root = "state/release_images"   (and/or [geohint] image_root)

Re-running fetches only what is missing (a file already there is kept). Mapillary's usage policy applies as in a
crawl: the ``mapillary`` and ``thumbnails`` host limits of :data:`geoagent.crawl.settings.DEFAULT_POLICIES`.
Exit 0 when every image has its file, 3 when some could not be fetched or written (listed, with why; after
:data:`UNREACHABLE_STOP_AFTER` images in a row whose host could not be reached the rest are not tried), 5 when
Mapillary refuses the token, 2 on bad input. The ``image_root`` line is printed only once a photo is on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geoagent import constants as C

#: how many images are fetched at once (the host limits pace them further)
DEFAULT_CONCURRENCY = 8
#: images in a row whose host could not be reached (each after the HTTP client's retries) that stop the fetch, as
#: the model caller's unreachable-host breaker stops a model (:data:`geoagent.workers.model_caller.UNREACHABLE_AFTER`)
UNREACHABLE_STOP_AFTER = 5


@dataclass
class FetchReport:
    """What one fetch did: images written now, already there, and those that could not be fetched
    (image id -> why)."""

    written: int = 0
    present: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    #: why the fetch stopped early: :data:`UNREACHABLE_STOP_AFTER` images in a row could not reach their host
    #: (``"host H unreachable (DNS lookup failed on 5 images in a row)"``); the images not tried then are in
    #: ``failed`` as ``not tried: ...``; "" when it did not stop
    stopped: str = ""


def target_path(out: Path, path: str | None, site_id: str, image_id: str) -> Path:
    """Where image ``image_id`` of ``site_id`` goes under ``out``: the trial table's ``path`` (``/``-separated,
    relative), else ``streetview/<site>/<id>.jpg``.

    Raises
    ------
    ValueError
        An id or site id that is no safe file name, or a ``path`` that leaves ``out`` (absolute, ``..``) or names a
        file Windows cannot hold (a device name, a name ending with a dot or a space:
        :func:`geoagent.paths.windows_reserved`).
    """
    from geoagent.paths import safe_image_id, safe_name, windows_reserved

    iid = safe_image_id(image_id)
    rel = path or f"streetview/{safe_name(site_id, what='site id')}/{iid}.jpg"
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    # a drive or stream (":") in any part, a control character: review39c #8; a name Windows reserves or drops the
    # end of (COM0, "x.", "x "), by paths.safe_name's rule (security42 #4)
    bad = (not parts or rel.startswith(("/", "\\")) or any(p == ".." or ":" in p or not p.isprintable()
                                                              or windows_reserved(p) for p in parts))
    dest = out.joinpath(*parts) if not bad else None
    if dest is None or not dest.resolve().is_relative_to(out.resolve()):
        raise ValueError(f"image {image_id}: its path {rel!r} is not a relative path inside the output folder")
    return dest


class TokenRefused(Exception):
    """Mapillary refused the access token (the fetch stops: every other request would be refused too)."""


async def fetch_release_images(images: list[Any], out: Path, mapillary: Any, *,
                               thumb_field: str = "thumb_1024_url",
                               concurrency: int = DEFAULT_CONCURRENCY) -> FetchReport:
    """Download the thumbnail of each of ``images`` (:class:`geoagent.data.model.Image`: ``image_id``, ``site_id``,
    ``path``) that has no file under ``out`` yet, with ``mapillary`` (a
    :class:`~geoagent.clients.mapillary.MapillaryClient`); files are written atomically.

    An image Mapillary cannot serve (:class:`~geoagent.clients.mapillary.ThumbnailUnavailable`, a Graph error, an
    id that is no safe file name, transport failures after the client's retries) is reported, not raised: the others
    go on. A refused token (:meth:`~geoagent.clients.mapillary.MapillaryClient.token_refused`) stops the fetch.
    """
    from geoagent.clients.mapillary import MapillaryError, ThumbnailUnavailable
    from geoagent.crawl.fetcher import _atomic_write
    from geoagent.runtime.http import HttpError

    report = FetchReport()
    todo: list[tuple[Any, Path]] = []
    for img in images:
        try:
            dest = target_path(out, getattr(img, "path", None), img.site_id, img.image_id)
        except ValueError as exc:
            report.failed[str(img.image_id)] = str(exc)
            continue
        if dest.is_file() and dest.stat().st_size > 0:
            report.present += 1
        else:
            todo.append((img, dest))
    gate = asyncio.Semaphore(max(1, int(concurrency)))
    refused: list[str] = []
    unreached = [0]  # images in a row whose host could not be reached (newuser41 #F)

    async def one(img: Any, dest: Path) -> None:
        async with gate:
            if refused:  # checked once a slot is free: the tasks queued behind the refusal send nothing (review39c #2)
                report.failed[img.image_id] = "not fetched: the token was refused"
                return
            if report.stopped:  # the host is down: the rest would fail the same way, one retry cycle each
                report.failed[img.image_id] = f"not tried: {report.stopped}"
                return
            try:
                jpeg = await mapillary.download_thumbnail(img.image_id, thumb_field)
            except (ThumbnailUnavailable, MapillaryError, HttpError) as exc:
                why = mapillary.token_refused(exc)
                if why:
                    refused.append(why)
                report.failed[img.image_id] = f"{type(exc).__name__}: {str(exc)[:200]}"
                _count_unreached(exc)
                return
            unreached[0] = 0
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                _atomic_write(dest, jpeg)
            except (OSError, ValueError) as exc:  # a folder in the way, no permission: this image's (review39c #6)
                report.failed[img.image_id] = f"not written to {dest}: {type(exc).__name__}: {exc}"
                return
            report.written += 1

    def _count_unreached(exc: BaseException) -> None:
        from geoagent.runtime.http import RetriesExhausted
        from geoagent.runtime.worker import unreachable_cause

        if not (isinstance(exc, RetriesExhausted) and exc.unreachable):
            unreached[0] = 0  # the host answered (an error of this image's own)
            return
        unreached[0] += 1
        if unreached[0] >= UNREACHABLE_STOP_AFTER and not report.stopped:
            report.stopped = (f"host {exc.host} unreachable ({unreachable_cause(exc.last)} on {unreached[0]} images "
                              "in a row)")

    await asyncio.gather(*(one(img, dest) for img, dest in todo))
    if refused:
        raise TokenRefused(f"Mapillary refused the token ({refused[0]}): check the variable that holds it; "
                           f"{report.written} photos were written before the refusal")
    return report


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m geoagent.crawl.release_images",
                                 description="Fetch the photos of a GeoContext release from Mapillary.")
    ap.add_argument("--release", default=None,
                    help=f"release folder (default: ${C.ENV_RELEASE_DIR}, else {C.DEFAULT_RELEASE_DIR})")
    ap.add_argument("--out", required=True, help="folder to write the photos under (the task's image_root)")
    ap.add_argument("--token-env", default="MAPILLARY_TOKEN",
                    help="NAME of the variable holding the Mapillary token (environment or .env)")
    ap.add_argument("--mapillary", default="https://graph.mapillary.com", help="Graph API base URL")
    ap.add_argument("--thumb-field", default="thumb_1024_url",
                    choices=("thumb_256_url", "thumb_1024_url", "thumb_2048_url", "thumb_original_url"))
    ap.add_argument("--contact", default="", help="e-mail or URL for the User-Agent (courtesy to the API)")
    ap.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    args = ap.parse_args(argv)
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    import os

    from geoagent.clients.mapillary import MapillaryClient
    from geoagent.config import env_var_name
    from geoagent.crawl.settings import build_host_policy
    from geoagent.data.importer import import_release
    from geoagent.runtime.http import HttpClient
    from geoagent.secrets import lookup_secret

    try:
        env_var_name(args.token_env)
    except ValueError as exc:
        print(f"error: --token-env: {exc}", file=sys.stderr)
        return 2
    problem = _url_or_contact_problem(args.mapillary, args.contact)  # as the crawl checks them (review39c #7)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    secret = lookup_secret(args.token_env)
    if secret is None:
        print(f"error: the Mapillary token is missing: set the environment variable {args.token_env} (or put it in "
              ".env); get one at https://www.mapillary.com/dashboard/developers", file=sys.stderr)
        return 2
    from geoagent.clients.mapillary import token_problem

    problem = token_problem(args.token_env, secret.reveal())  # before any request (crawl40 #8)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    root = Path(os.path.expanduser(args.release or os.environ.get(C.ENV_RELEASE_DIR) or C.DEFAULT_RELEASE_DIR))
    try:
        rel = import_release(root)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    images = sorted(rel.images.values(), key=lambda i: (i.site_id, i.image_id))
    if not images:
        print(f"error: {root}: the release's trial table names no image", file=sys.stderr)
        return 2
    out = Path(os.path.expanduser(args.out))
    ua = "geoagent-release-images" + (f" (contact: {args.contact})" if args.contact else "")
    async with HttpClient() as http:
        client = MapillaryClient(http, args.mapillary, secret.reveal(), ua,
                                 policy=build_host_policy("mapillary", {}),
                                 thumb_policy=build_host_policy("thumbnails", {}))
        try:
            report = await fetch_release_images(images, out, client, thumb_field=args.thumb_field,
                                                concurrency=args.concurrency)
        except TokenRefused as exc:
            from geoagent.textfmt import one_line_text

            print(f"error: {one_line_text(str(exc))}", file=sys.stderr)  # names a Graph error code (security42 #2)
            return 5
    print(summary_lines(images, out, report), end="")
    return 3 if report.failed else 0


def summary_lines(images: list[Any], out: Path, report: FetchReport) -> str:
    """The command's report, each line ending with a newline: ``17 images of 17 sites: ...`` (the sites those
    images show, not every site of the release: newuser41 #F read "17 images of 109 sites"), the first 20 images
    not fetched and why, why the fetch stopped early (an unreachable host), and, only when at least one photo is
    on disk under ``out``, the ``image_root`` line to use it (a fetch that wrote nothing named a folder it never
    created). The reasons quote the API's error bodies, so they are printed inert, on one line each
    (:func:`geoagent.textfmt.one_line_text`: control, line-breaking and bidirectional characters as escapes;
    security42 #2: an error body's ESC sequences retitled and cleared the terminal)."""
    from geoagent.textfmt import count_text, one_line_text

    n_sites = len({i.site_id for i in images})
    lines = [f"{count_text(len(images), 'image')} of {count_text(n_sites, 'site')}: {report.written} fetched now, "
             f"{report.present} already under {out}, {len(report.failed)} could not be fetched"]
    lines += [f"  {one_line_text(iid)}: {one_line_text(why)}" for iid, why in list(report.failed.items())[:20]]
    if len(report.failed) > 20:
        lines.append(f"  ... and {len(report.failed) - 20} more")
    if report.stopped:
        lines.append(f"stopped early: {one_line_text(report.stopped)}; check network / DNS / proxy access to it, then "
                     "run the same command again (it fetches only what is missing)")
    if report.written + report.present:
        lines.append(f"use it as the task's image_root: image_root = \"{out}\" under [geoverify] or [geohint]")
    else:
        lines.append(f"no photo is under {out} yet: nothing to use as an image_root")
    return "".join(line + "\n" for line in lines)


def _url_or_contact_problem(url: str, contact: str) -> str | None:
    """Why ``--mapillary`` or ``--contact`` cannot be used (the crawl's rules: an http(s) URL without credentials,
    plain http only to a local host, since the token goes in a header; a contact without control characters, since
    it goes into the User-Agent), or None."""
    from urllib.parse import urlsplit

    from geoagent.config import header_safe, is_local_host, url_problem

    problem = url_problem(url, example="https://graph.mapillary.com",
                          where_key="put the token in the variable --token-env names")
    if problem:
        return f"--mapillary: expected {problem}"
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_local_host(parts.hostname):
        return (f"--mapillary: plain http:// to {parts.hostname}, a host that is not local, would send the Mapillary "
                "token unencrypted; use https://")
    try:
        header_safe(contact)
    except ValueError as exc:
        return f"--contact: {exc}"
    return None


if __name__ == "__main__":  # pragma: no cover - the command line
    sys.exit(main())
