"""Fetching a release's photos from Mapillary (newuser39 #3: the release ships ids, not pixels, and nothing fetched
them for a real-model campaign). Real client against the local Mapillary Graph API fake and its CDN."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.release_images import fetch_release_images, main, target_path
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly_fake
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02)


def _img(iid: str, site: str = "paris_x", path: str | None = None):
    return SimpleNamespace(image_id=iid, site_id=site, path=path)


def _fetch(images, out: Path, known: list[str], no_thumb: tuple[str, ...] = ()):
    fakes = [mly_fake.FakeImage(image_id=i, lat=48.86, lon=2.35, has_thumb=i not in no_thumb) for i in known]

    async def go():
        async with serve(mly_fake.make_app(fakes)) as base, HttpClient(default_policy=FAST) as http:
            client = MapillaryClient(http, base, "MLY|1|x", "geoagent-test (contact: mailto:t@example.org)",
                                     policy=FAST, thumb_policy=FAST)
            return await fetch_release_images(images, out, client)

    return asyncio.run(go())


def test_photos_are_written_where_the_trial_table_says_and_a_rerun_fetches_only_the_missing(tmp_path):
    images = [_img("1001", path="streetview/paris_x/1001.jpg"), _img("1002"), _img("1003"), _img("1004")]
    rep = _fetch(images, tmp_path, ["1001", "1002", "1004"], no_thumb=("1004",))
    assert rep.written == 2 and rep.present == 0 and set(rep.failed) == {"1003", "1004"}
    for iid in ("1001", "1002"):
        data = (tmp_path / "streetview" / "paris_x" / f"{iid}.jpg").read_bytes()
        assert data[:3] == b"\xff\xd8\xff"  # a JPEG
    again = _fetch(images, tmp_path, ["1001", "1002", "1003", "1004"])
    assert again.written == 2 and again.present == 2 and not again.failed


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.jpg", "streetview/../../x.jpg", "C:/x.jpg"])
def test_a_path_that_leaves_the_output_folder_is_refused(tmp_path, path):
    with pytest.raises(ValueError, match="not a relative path inside"):
        target_path(tmp_path, path, "paris_x", "1001")
    rep = _fetch([_img("1001", path=path)], tmp_path, ["1001"])
    assert rep.written == 0 and "1001" in rep.failed


def test_the_command_needs_a_token_and_names_its_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLY_T39", raising=False)
    monkeypatch.setenv("GEOAGENT_DOTENV", str(tmp_path / "none.env"))
    assert main(["--out", str(tmp_path), "--token-env", "MLY_T39"]) == 2
    assert "set the environment variable MLY_T39" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "--token-env", "MLY|123|abc"]) == 2
    assert "NAME of an environment variable" in capsys.readouterr().err


@pytest.mark.parametrize("path", ["streetview/C:x.jpg", "a/C:/x.jpg", "x.jpg:ads", "streetview/NUL.jpg", "a/\x00.jpg"])
def test_windows_drives_streams_and_devices_are_refused_anywhere_in_the_path(tmp_path, path):
    """review39c #8: a drive letter after the first part landed outside --out on Windows."""
    with pytest.raises(ValueError, match="not a relative path inside"):
        target_path(tmp_path, path, "paris_x", "1001")


def test_a_refused_token_stops_the_fetch_and_a_write_failure_is_one_images(tmp_path):
    """review39c #2: every queued image was still sent with the refused token; #6: a folder in the way was a
    traceback and a write failure was reported as a refused token."""
    from geoagent.clients.mapillary import MapillaryError
    from geoagent.crawl.release_images import TokenRefused

    class Refusing:
        calls = 0

        async def download_thumbnail(self, image_id, thumb_field):
            Refusing.calls += 1
            await asyncio.sleep(0.01)
            raise MapillaryError("Mapillary error 190: Invalid OAuth access token", code=190, status=401)

        def token_refused(self, exc):
            return "HTTP 401, Mapillary error 190"

    with pytest.raises(TokenRefused, match="refused the token"):
        asyncio.run(fetch_release_images([_img(str(1000 + i)) for i in range(50)], tmp_path, Refusing(),
                                         concurrency=4))
    assert Refusing.calls <= 4  # the ones in flight when the first refusal came back

    (tmp_path / "out" / "streetview").mkdir(parents=True)
    (tmp_path / "out" / "streetview" / "paris_x").write_text("a file where a folder should be", encoding="utf-8")
    rep = _fetch([_img("1001"), _img("2002", site="other")], tmp_path / "out", ["1001", "2002"])
    assert rep.written == 1 and "not written to" in rep.failed["1001"]


@pytest.mark.parametrize("args, needle", [
    (["--mapillary", "http://graph.mapillary.com"], "unencrypted"),
    (["--contact", "me@x.org\r\nX-Evil: 1"], "control character"),
])
def test_the_command_refuses_a_plain_http_api_and_a_contact_with_a_line_break(tmp_path, monkeypatch, capsys, args,
                                                                              needle):
    monkeypatch.setenv("MLY_T39B", "MLY|1|x")
    assert main(["--out", str(tmp_path), "--token-env", "MLY_T39B", *args]) == 2
    assert needle in capsys.readouterr().err


def _release_ids(release_dir: Path) -> tuple[int, int]:
    """(images, sites with an image) of the release's trial table, read as a user would (csv)."""
    import csv

    from geoagent.data.importer import import_release

    rel = import_release(release_dir)
    with open(release_dir / "sites.csv", newline="", encoding="utf-8-sig") as f:
        assert len(rel.sites) == sum(1 for _ in csv.DictReader(f))
    return len(rel.images), len({i.site_id for i in rel.images.values()})


def test_a_fetch_with_no_host_counts_the_images_sites_stops_early_and_names_no_image_root(
        release_dir, tmp_path, monkeypatch, capsys):
    """newuser41 #F: with no network the command said "17 images of 109 sites" (every site of the release) and
    ended "use it as the task's image_root: image_root = ..." for a folder it never created; every image waited
    out its own retries. Now: the sites those images show, a stop after 5 images in a row whose host could not be
    reached (the rest not tried), and no image_root line until a photo is on disk. A closed local port stands in
    for the unreachable Mapillary host; then the Mapillary fake serves them all and the hint comes."""
    from geoagent.crawl.release_images import UNREACHABLE_STOP_AFTER
    from geoagent.sandbox.server import free_port

    n_images, n_sites = _release_ids(release_dir)
    assert n_images > UNREACHABLE_STOP_AFTER + 8  # more than a stop and the images in flight at it
    monkeypatch.setenv("MLY_T41", "MLY|1|x")
    out = tmp_path / "photos"
    argv = ["--release", str(release_dir), "--out", str(out), "--token-env", "MLY_T41", "--concurrency", "1"]
    assert main([*argv, "--mapillary", f"http://127.0.0.1:{free_port()}"]) == 3
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[0] == (f"{n_images} images of {n_sites} sites: 0 fetched now, 0 already under {out}, {n_images} "
                        "could not be fetched"), lines[0]
    not_tried = [ln for ln in lines if ": not tried: host 127.0.0.1:" in ln]
    assert len(not_tried) == min(20, n_images - UNREACHABLE_STOP_AFTER), text
    assert any(ln.startswith("stopped early: host 127.0.0.1:") and "(connection refused on 5 images in a row)" in ln
               for ln in lines), text
    assert "image_root = " not in text and lines[-1] == f"no photo is under {out} yet: nothing to use as an image_root"
    assert not out.exists()

    from geoagent.data.importer import import_release

    fakes = [mly_fake.FakeImage(image_id=i, lat=48.86, lon=2.35) for i in import_release(release_dir).images]

    async def served():
        async with serve(mly_fake.make_app(fakes)) as base:
            return await asyncio.to_thread(main, [*argv, "--mapillary", base])

    assert asyncio.run(served()) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith(f"{n_images} images of {n_sites} sites: {n_images} fetched now, 0 already")
    assert text.endswith(f'use it as the task\'s image_root: image_root = "{out}" under [geoverify] or [geohint]\n')
