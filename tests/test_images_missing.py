"""Images without a file (walkthrough finding: a wrong image_root silently sent placeholder pixels to paid models).

A GeoVerify or GeoHint plan whose images have no file under the task's ``image_root`` refuses (exit 2, at plan
time, so also the dry run) when a model on a real provider would get placeholder pixels, naming the count, the
config key, the folder and the first missing files; ``[images] missing = "placeholder"`` opts in. Where
placeholders are legitimate (replay, simulated, the local ``*.sandbox.invalid`` fakes) the run works and one
warning line gives the count, which the manifest and the report record too. Counts are computed here straight
from the release's CSV and JSONL files (independent of the importer and planners).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import anyio
import pytest
from PIL import Image as PILImage

from geoagent.cli import main
from geoagent.config import ConfigError, config_from_dict, load_config
from geoagent.engine import run_campaign
from geoagent.image_files import needs_photos
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-", 32, seed="images-test-n20")


def _trial_rows(release_dir: Path) -> list[dict[str, str]]:
    with open(release_dir / "verify_trials_sample.csv", newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def _images(release_dir: Path) -> dict[str, str]:
    """image id -> relative path (``/`` separators) of every image of the trial table."""
    return {r["image_id"]: r["path"].replace("\\", "/") for r in _trial_rows(release_dir)}


def _photo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", (64, 48), (120, 140, 160)).save(path, "JPEG")


def _photos(root: Path, images: dict[str, str], ids: list[str]) -> None:
    for iid in ids:
        _photo(root / images[iid])


def _gv_toml(tmp: Path, name: str, *, base_url: str, image_root: Path | None, extra: str = "",
             provider: str = "openai") -> Path:
    root_line = f'image_root = "{image_root}"\n' if image_root is not None else ""
    p = tmp / f"{name}.toml"
    p.write_text(
        f'[campaign]\nname = "{name}"\nkind = "geoverify"\nseed = 1\n'
        f'[budget]\ncap_usd = 5.0\n'
        f'[queue]\nmax_attempts = 2\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\n'
        f'[[models]]\nname = "gpt"\nprovider = "{provider}"\nmodel = "gpt-4o-mini"\nbase_url = "{base_url}"\n'
        f'api_key_env = "IMAGES_TEST_KEY"\nprice_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n'
        f'max_output_tokens = 64\nconcurrency = 8\nrate = {{ requests = 5000, period_s = 1.0 }}\n'
        f'[geoverify]\nn_boot = 0\n{root_line}{extra}',
        encoding="utf-8")
    return p


@pytest.fixture
def env(isolated_roots, release_dir, monkeypatch):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("IMAGES_TEST_KEY", KEY)
    return isolated_roots


# --- which models must get photos -------------------------------------------------------------------


def test_needs_photos_real_providers_only():
    doc = {"campaign": {"name": "x", "kind": "geoverify"}, "budget": {"cap_usd": 1.0}, "models": [
        {"name": "a", "provider": "openai", "model": "m", "base_url": "https://api.openai.com/v1",
         "price_input_usd_per_mtok": 1, "price_output_usd_per_mtok": 1},
        {"name": "b", "provider": "anthropic", "model": "m2", "base_url": "https://api.anthropic.com",
         "price_input_usd_per_mtok": 1, "price_output_usd_per_mtok": 1},
        {"name": "c", "provider": "gemini", "model": "m3", "base_url": "http://gemini.sandbox.invalid"},
        {"name": "d", "provider": "openai", "model": "m4", "base_url": "http://127.0.0.1:11434/v1"},
        {"name": "e", "provider": "simulated", "model": "m5"},
    ]}
    cfg = config_from_dict(doc)
    assert [m.name for m in cfg.models if needs_photos(m)] == ["a", "b", "d"]


@pytest.mark.parametrize(("table", "message"), [
    ({"missing": "warn"}, "images.missing: expected one of 'error' or 'placeholder', got 'warn'"),
    ({"mising": "error"}, "images.mising: unknown key (did you mean 'missing'?)"),
])
def test_images_section_is_validated_at_load(table, message):
    doc = {"campaign": {"name": "x", "kind": "geoverify"}, "budget": {"cap_usd": 1.0}, "images": table,
           "models": [{"name": "s", "provider": "simulated", "model": "m"}]}
    with pytest.raises(ConfigError) as ei:
        config_from_dict(doc)
    assert message in str(ei.value)


def test_images_section_default_and_opt_in():
    base = {"campaign": {"name": "x", "kind": "geoverify"}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "s", "provider": "simulated", "model": "m"}]}
    assert config_from_dict(base).section("images").missing == "error"
    assert config_from_dict({**base, "images": {"missing": "placeholder"}}).section("images").missing == "placeholder"


# --- GeoVerify -----------------------------------------------------------------------------------------


def test_geoverify_paid_model_wrong_image_root_refuses_run_and_dry_run(env, release_dir, capsys):
    images = _images(release_dir)
    root = env / "no-such-folder"
    cfg = _gv_toml(env, "gv-wrong-root", base_url="https://api.openai.com/v1", image_root=root)
    first = sorted(images)[0]
    for args in (["run", str(cfg), "--no-live"], ["run", str(cfg), "--simulate", "--no-live"]):
        assert main(args) == 2
        err = "".join(capsys.readouterr())  # the dry run reports it on stdout, the run on stderr
        assert f"{len(images)} of {len(images)} images of the planned GeoVerify requests have no file" in err
        assert "geoverify.image_root" in err and str(root) in err and "which does not exist" in err
        assert '[images] missing = "placeholder"' in err and "'gpt' (openai)" in err
        # the first missing files are named (trial table path under the image root)
        assert "First missing: " in err and str(root / images[first].split("/")[0]) in err
        assert not (env / "state").exists() and not (env / "queues").exists()


def test_geoverify_paid_model_some_files_missing_names_count_and_paths(env, release_dir, capsys):
    images = _images(release_dir)
    have = sorted(images)[:5]
    root = env / "photos"
    _photos(root, images, have)
    lacking = sorted(set(images) - set(have))
    rows = _trial_rows(release_dir)
    n_req = len({(r["image_id"], r["cand"]) for r in rows if r["image_id"] in set(lacking)})
    cfg = _gv_toml(env, "gv-some", base_url="https://api.openai.com/v1", image_root=root)
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    err = "".join(capsys.readouterr())  # the dry run reports it on stdout, the run on stderr
    assert f"{len(lacking)} of {len(images)} images" in err
    assert f"so {n_req} requests to real model(s) 'gpt' (openai)" in err
    named = [iid for iid in lacking if str(root / images[iid]) in err]
    assert len(named) == 5 and f"(and {len(lacking) - 5} more)" in err
    assert not any(str(root / images[iid]) in err for iid in have)


def test_geoverify_paid_model_all_files_present_dry_run_has_no_warning(env, release_dir, capsys):
    images = _images(release_dir)
    root = env / "photos"
    _photos(root, images, list(images))
    cfg = _gv_toml(env, "gv-all", base_url="https://api.openai.com/v1", image_root=root)
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "have no file" not in out and "placeholder" not in out


def test_geoverify_opt_in_dry_run_warns_once_and_exits_0(env, release_dir, capsys):
    images = _images(release_dir)
    cfg = _gv_toml(env, "gv-optin", base_url="https://api.openai.com/v1", image_root=None,
                   extra='[images]\nmissing = "placeholder"\n')
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "have no file" in ln]
    assert len(lines) == 1, out
    assert f"{len(images)} of {len(images)} images" in lines[0] and "geoverify.image_root = not set" in lines[0]
    assert lines[0].lstrip().startswith("warning:") and '[images] missing = "placeholder" for \'gpt\'' in lines[0]


def test_geoverify_local_server_refused_without_opt_in_runs_with_it(env, release_dir, capsys):
    """A model behind an OpenAI-compatible server on this machine is a real model: refused before any call;
    with the opt-in the run completes, the manifest and the report record the count."""
    images = _images(release_dir)
    have = sorted(images)[:3]
    root = env / "photos"
    _photos(root, images, have)
    n_missing = len(images) - len(have)
    apps = []

    async def go(path: Path):
        app = llm_openai.make_app(api_keys=[KEY])
        apps.append(app)
        async with serve(app) as base:
            text = path.read_text().replace("http://PLACEHOLDER/v1", f"{base}/v1")
            path.write_text(text)
            return await run_campaign(load_config(path), live=False, handle_signals=False, export=False)

    cfg = _gv_toml(env, "gv-local", base_url="http://PLACEHOLDER/v1", image_root=root)
    with pytest.raises(ConfigError) as ei:
        anyio.run(go, cfg)
    assert f"{n_missing} of {len(images)} images" in str(ei.value)
    assert not apps[0]["calls"]  # refused at plan time: nothing was sent
    # walkthrough s11: the refusal called this local server a "paid" model; README's term is "real model"
    assert "paid" not in str(ei.value) and "real model" in str(ei.value), str(ei.value)

    cfg = _gv_toml(env, "gv-local2", base_url="http://PLACEHOLDER/v1", image_root=root,
                   extra='[images]\nmissing = "placeholder"\n')
    out = anyio.run(go, cfg)
    assert out.exit_code == 0, out.summary()
    warn = [ln for ln in out.extra_lines if "have no file" in ln]
    assert len(warn) == 1 and f"{n_missing} of {len(images)} images" in warn[0]
    run = json.loads((env / "state" / "gv-local2" / "manifest.json").read_text())["runs"][-1]
    assert run["images_missing"] == n_missing and run["images_planned"] == len(images)
    assert run["image_root"] == str(root) and run["image_root_key"] == "geoverify.image_root"
    report = (env / "state" / "gv-local2" / "report").glob("*.md")
    assert any(f"{n_missing} of {len(images)} images" in p.read_text() for p in report)


def test_geoverify_release_replay_records_count_without_placeholder_warning(env, release_dir, capsys):
    """The shipped replay config (replay provider, no pixels in the release): runs, counts in manifest.json, and
    no line about placeholder pixels (walkthrough finding 17: it said "336 requests carry placeholder pixels
    instead of photos", but a replay model answers from the recorded file and sends no image at all)."""
    with open(release_dir / "verify_raw_sample.jsonl", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    n_img = len({r["image_id"] for r in recs if not r.get("error")})
    assert main(["run", str(REPO / "geoagent" / "configs" / "geocontext_replay.toml"), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert not [ln for ln in out.splitlines() if "have no file" in ln or "placeholder" in ln], out
    state = env / "state" / "geocontext-replay"
    run = json.loads((state / "manifest.json").read_text())["runs"][-1]
    assert run["images_missing"] == n_img and run["image_root"] is None
    assert "placeholder" not in (state / "report" / "geoverify_table.md").read_text()


# --- GeoHint -------------------------------------------------------------------------------------------


def _gh_toml(tmp: Path, name: str, *, image_root: Path | None, images: str = "release", extra: str = "") -> Path:
    root_line = f'image_root = "{image_root}"\n' if image_root is not None else ""
    p = tmp / f"{name}.toml"
    p.write_text(
        f'[campaign]\nname = "{name}"\nkind = "geohint"\nseed = 1\ncontact = "mailto:t@example.org"\n'
        f'[budget]\ncap_usd = 5.0\n'
        f'[[models]]\nname = "claude"\nprovider = "anthropic"\nmodel = "claude-haiku-4-5"\n'
        f'base_url = "https://api.anthropic.com"\napi_key_env = "IMAGES_TEST_KEY"\n'
        f'price_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 5.0\nmax_output_tokens = 300\n'
        f'[geohint]\nconditions = ["baseline", "forced"]\nimages = "{images}"\n{root_line}{extra}',
        encoding="utf-8")
    return p


def test_geohint_release_images_wrong_root_refuses_run_and_dry_run(env, release_dir, capsys):
    images = _images(release_dir)
    root = env / "typo"
    cfg = _gh_toml(env, "gh-wrong", image_root=root)
    for args in (["run", str(cfg), "--no-live"], ["run", str(cfg), "--simulate", "--no-live"]):
        assert main(args) == 2
        err = "".join(capsys.readouterr())  # the dry run reports it on stdout, the run on stderr
        assert f"{len(images)} of {len(images)} images of the planned GeoHint requests have no file" in err
        assert "geohint.image_root" in err and str(root) in err and "'claude' (anthropic)" in err
        assert str(root / images[sorted(images)[0]]) in err or "First missing: " + str(root) in err
        assert not (env / "state").exists()


def test_geohint_synthetic_images_with_paid_model_refused(env, release_dir, capsys):
    with open(release_dir / "sites.csv", newline="", encoding="utf-8-sig") as f:
        n_sites = sum(1 for _ in csv.DictReader(f))
    cfg = _gh_toml(env, "gh-synth", image_root=None, images="synthetic")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    err = "".join(capsys.readouterr())  # the dry run reports it on stdout, the run on stderr
    assert f"{n_sites} of {n_sites} images" in err and "synthetic placeholder" in err
    # images = "synthetic" plans placeholders by design: the fix is the images mode, not an image folder
    assert 'geohint.images = "release"' in err and "image_root = not set" not in err, err


def test_geohint_auto_images_refusal_comes_first_with_the_release_plan_size(env, release_dir, capsys):
    """newuser41 #A: with images = "auto" and a real model, the dry run's first line after its headline names the
    refusal and its fix, and how many calls the plan of the trial-table images alone holds: what a dry run of
    images = "release" plans (its 1,500-character warning and the estimate of the refused plan follow)."""
    with open(release_dir / "sites.csv", newline="", encoding="utf-8-sig") as f:
        n_sites = sum(1 for _ in csv.DictReader(f))
    images = _images(release_dir)
    cfg = _gh_toml(env, "gh-release", image_root=None, images="release")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    release_planned = int(re.search(r"planned (\d+) requests", capsys.readouterr().out).group(1))
    cfg = _gh_toml(env, "gh-auto", image_root=None, images="auto")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    lines = capsys.readouterr().out.splitlines()
    planned = int(re.search(r"planned (\d+) requests", "\n".join(lines)).group(1))
    n_sites_with = len({r["site"] for r in _trial_rows(release_dir)})
    n_syn = n_sites - n_sites_with
    assert 0 < release_planned < planned and n_syn > 0
    assert lines[1] == (f'  `run` would refuse this plan (exit 2): {n_syn} of {n_syn + len(images)} images are synthetic '
                        'placeholders (images = "auto"), refused for a real model: set [geohint] images = "release" '
                        f"(its {len(images)} trial-table images: {release_planned} of the {planned} planned calls) and "
                        f"geohint.image_root to the folder of their photos ({len(images)} without a file now)"), lines[1]
    assert lines[2].startswith("  planned ") and lines[-1].startswith("  exit 2: ")


def test_geohint_release_images_present_dry_run_clean(env, release_dir, capsys):
    images = _images(release_dir)
    root = env / "photos"
    _photos(root, images, list(images))
    cfg = _gh_toml(env, "gh-ok", image_root=root)
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "have no file" not in out


def test_geohint_sandbox_config_dry_run_warns_with_count(env, release_dir, capsys):
    with open(release_dir / "sites.csv", newline="", encoding="utf-8-sig") as f:
        n_sites = sum(1 for _ in csv.DictReader(f))
    assert main(["run", str(REPO / "geoagent" / "configs" / "geohint_sandbox.toml"), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    warn = [ln for ln in out.splitlines() if "placeholder" in ln and "warning" in ln]
    # images = "synthetic": one placeholder per site; the model is the local OpenAI-compatible fake. The line says
    # what happens (synthetic placeholders by design), not a fix that does not apply (set geohint.image_root)
    assert len(warn) == 1 and f"{n_sites} of {n_sites} images" in warn[0] and "local fake" in warn[0], out
    assert "are synthetic placeholders" in warn[0] and "geohint.images = 'synthetic'" in warn[0], warn[0]
    assert "have no file" not in warn[0] and "set it to the folder" not in warn[0], warn[0]


def test_geohint_simulated_run_warns_and_records_count(env, release_dir, capsys):
    """Simulated model on two sites' synthetic images (legitimate placeholders): runs, one warning line, the count
    in the run's manifest entry and in report.md."""
    with open(release_dir / "sites.csv", newline="", encoding="utf-8-sig") as f:
        two = sorted(r["site"] for r in csv.DictReader(f))[:2]
    cfg = env / "gh-sim.toml"
    cfg.write_text(
        '[campaign]\nname = "gh-sim"\nkind = "geohint"\nseed = 1\ncontact = "mailto:t@example.org"\n'
        '[budget]\ncap_usd = 1.0\n'
        '[[models]]\nname = "sim"\nprovider = "simulated"\nmodel = "sim-1"\nmax_output_tokens = 300\n'
        f'[geohint]\nconditions = ["baseline", "forced"]\nimages = "synthetic"\nsites = {json.dumps(two)}\n'
        'n_flips = 10\nn_splits = 2\n'
        '[geohint.geocoder]\nwikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
        'nominatim_url = "http://nominatim.sandbox.invalid"\n', encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    warn = [ln for ln in out.splitlines() if "are synthetic placeholders" in ln]
    assert len(warn) == 1 and "2 of 2 images" in warn[0] and "simulated" in warn[0], out
    assert "image_root" not in warn[0], warn[0]
    state = env / "state" / "gh-sim"
    run = json.loads((state / "manifest.json").read_text())["runs"][-1]
    assert run["images_missing"] == 2 and run["images_planned"] == 2 and run["image_root"] is None
    assert run["placeholder_requests"] == {"sim": run["planned"]} and run["planned"] > 2  # every request: synthetic
    md = (state / "report" / "report.md").read_text()
    assert "Placeholder images: 2 of 2 images" in md and "set it to the folder" not in md.split("Terms:")[0]


def test_placeholder_line_counts_no_replay_requests():
    """Replay and simulated models in one plan: only the simulated model's requests carry placeholder pixels."""
    from geoagent.config import config_from_dict
    from geoagent.image_files import MissingImages, check_missing

    cfg = config_from_dict({"campaign": {"name": "mixed"}, "budget": {"cap_usd": 0.0}, "models": [
        {"name": "rep", "provider": "replay", "model": "recorded", "replay": {"path": "rec.jsonl"}},
        {"name": "sim", "provider": "simulated", "model": "m"}]})
    found = MissingImages(task="GeoVerify", key="geoverify.image_root", image_root=None, n_images=3,
                          missing={"1": "a.jpg", "2": "b.jpg", "3": "c.jpg"}, requests={"rep": 7, "sim": 5})
    line = check_missing(cfg, found, fix="set it")
    assert "5 requests carry placeholder pixels" in line and "'sim'" in line and "'rep'" not in line
    only_replay = MissingImages(task="GeoVerify", key="geoverify.image_root", image_root=None, n_images=3,
                                missing={"1": "a.jpg"}, requests={"rep": 7})
    assert check_missing(cfg, only_replay, fix="set it") is None
