"""Dry-run estimates of images (walkthrough, session 10): the local fakes' bill, photos without a file yet.

The sandbox fakes (``*.sandbox.invalid``, :mod:`geoagent.sandbox`) bill every image
:data:`geoagent.sandbox.responders.SIM_IMAGE_TOKENS` (765) input tokens and text at chars / 4; the dry run
used the model's ``image_input_tokens`` (1,600) for a fake model id without a documented rule, so its
expected figure was ~70 % above what the run then spent. Everything here runs through the engine and the
in-process fakes (no mocks).
"""

from __future__ import annotations

import re

import anyio
from _model_harness import generic_campaign, model_table

from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox.responders import SIM_IMAGE_TOKENS
from _made_up_keys import made_up_key

KEY_VAR = "WALKB_TEST_KEY"
KEY_VALUE = made_up_key("sk-", 26, seed="walkbtest-n16")


def _expected_in(lines: list[str], model: str) -> int:
    text = "\n".join(lines)
    m = re.search(rf"{model}: \d+ calls, (\d+) in", text)
    assert m, text
    return int(m.group(1))


def test_sandbox_dry_run_expects_what_the_fakes_bill_for_images(tmp_path, monkeypatch):
    """A campaign of 12 image requests to the OpenAI fake (model id without a documented rule): the dry run's
    expected input tokens equal the input tokens the run is then billed, and its line names the fakes' 765."""
    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    path = generic_campaign(tmp_path, name="walkfake", n=12, cap_usd=1.0,
                            models=model_table("fake", base_url="http://openai.sandbox.invalid", key_var=KEY_VAR,
                                               model="sandbox-gpt", max_output_tokens=60))
    path.write_text(path.read_text().replace("n_requests = 12\n", "n_requests = 12\nimage = true\n"))
    cfg = load_config(path)

    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, export=False))
    lines = dry.extra_lines
    assert f"{SIM_IMAGE_TOKENS} per image" in "\n".join(lines), lines
    assert "1600 per image" not in "\n".join(lines), lines
    expected = _expected_in(lines, "fake")

    anyio.run(lambda: run_campaign(load_config(path), live=False, handle_signals=False, export=False))
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        spent = st.ledger.summary()
    assert spent.calls == 12
    assert spent.input_tokens == expected  # the fakes bill exactly the dry run's expected input


# --- photos without a file yet: estimated at the photo the run will send --------------------------------


def _gv_real_toml(tmp, name: str, *, extra: str = "") -> str:
    p = tmp / f"{name}.toml"
    p.write_text(
        f'[campaign]\nname = "{name}"\nkind = "geoverify"\nseed = 1\n[budget]\ncap_usd = 500.0\n'
        f'[[models]]\nname = "gpt"\nprovider = "openai"\nmodel = "gpt-4o"\napi_key_env = "WALKB_OPENAI"\n'
        f'price_input_usd_per_mtok = 2.5\nprice_output_usd_per_mtok = 10.0\nmax_output_tokens = 64\n'
        f'[[models]]\nname = "claude"\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        f'api_key_env = "WALKB_ANTHROPIC"\nprice_input_usd_per_mtok = 3.0\nprice_output_usd_per_mtok = 15.0\n'
        f'max_output_tokens = 64\n[geoverify]\nn_boot = 0\n{extra}', encoding="utf-8")
    return str(p)


def test_dry_run_with_placeholder_opt_in_counts_photos_without_a_file_at_the_placeholder_size(
        isolated_roots, release_dir, monkeypatch, capsys):
    """A real campaign before its photos exist with ``[images] missing = "placeholder"`` (no image folder): that run
    sends the 640 x 480 placeholder pixels for them (a queued task keeps its payload), so the dry run's expected
    tokens per image are the placeholder's (gpt-4o: 85 + 170 x 2 tiles = 425; Claude: ceil(640 x 480 / 750) =
    410), and the line says so. Before (session 11 leftovers): it counted them at the 1,024 x 768 thumbnail (765,
    1,049) and said "the photo the run will send ..., not the 640x480 placeholder", which that run did not send.
    Without the opt-in the run refuses until the photos exist, and the dry run keeps the thumbnail size
    (:func:`test_dry_run_without_photos_names_keys_and_images_together_and_estimates`)."""
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("WALKB_OPENAI", "x")
    monkeypatch.setenv("WALKB_ANTHROPIC", "y")
    cfg = _gv_real_toml(isolated_roots, "gv-nophotos", extra='[images]\nmissing = "placeholder"\n')
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    gpt = next(ln for ln in out.splitlines() if ln.lstrip().startswith("gpt:"))
    claude = next(ln for ln in out.splitlines() if ln.lstrip().startswith("claude:"))
    assert "about 425 tokens per image" in gpt, gpt
    assert "about 410 tokens per image" in claude, claude
    for line in (gpt, claude):
        assert "has no file counted at 640x480, the placeholder pixels the run sends" in line, line
        assert '[images] missing = "placeholder"' in line and "thumb_1024_url" in line, line
        assert "not the 640x480 placeholder" not in line and "the photo the run will send" not in line, line


# --- a dry run before the photos exist: every pre-flight problem in one exit, and still an estimate -------


def test_dry_run_without_photos_names_keys_and_images_together_and_estimates(isolated_roots, release_dir,
                                                                            monkeypatch, capsys):
    """A real campaign with no photo files, no ``[images]`` setting and its API keys unset: the dry run prints its
    estimate (missing photos at 1024 x 768), warns about the images and the unset key variables alike, and
    exits 2 naming both; the real run still refuses, and its message recommends the dry run for an estimate."""
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.delenv("WALKB_OPENAI", raising=False)
    monkeypatch.delenv("WALKB_ANTHROPIC", raising=False)
    cfg = _gv_real_toml(isolated_roots, "gv-preflight")
    assert main(["run", cfg, "--simulate", "--no-live"]) == 2
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "WALKB_OPENAI" in out and "WALKB_ANTHROPIC" in out, out
    assert "would carry placeholder pixels instead of photos" in out, out
    assert "about 765 tokens per image" in out and "about 1049 tokens per image" in out, out
    last = [ln for ln in out.splitlines() if "exit 2:" in ln]
    assert len(last) == 1 and "WALKB_OPENAI" in last[0] and "images without a file" in last[0], last
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()

    monkeypatch.setenv("WALKB_OPENAI", "x")
    monkeypatch.setenv("WALKB_ANTHROPIC", "y")
    assert main(["run", cfg, "--no-live"]) == 2  # the real run still refuses to send placeholders
    err = capsys.readouterr().err
    assert "would carry placeholder pixels" in err and "--simulate" in err and "Nothing was run" in err, err
    assert not (isolated_roots / "queues").exists()
