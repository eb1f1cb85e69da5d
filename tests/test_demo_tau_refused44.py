"""``run.py demo`` with its GeoVerify template edited to another tau leaves the config it ran with as it was
(review44b #6e).

The run was refused (the campaign's work was made at 150 m), but the demo had already overwritten
``state/demo-configs/demo_geoverify.toml`` with the new tau, so ``status``, ``dead`` and ``export`` of that file no
longer described the campaign. The demo now writes each filled-in config only once its campaign kind would not refuse
it. Run end to end on a copy of the package whose template is edited (the packaged one is left alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _demo(pkg: Path, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pkg)}
    for key in ("GEOAGENT_RELEASE", "GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        env.pop(key, None)
    return subprocess.run([sys.executable, str(pkg / "run.py"), "demo", "--workdir", str(work)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=str(pkg))


def test_a_demo_template_edited_to_another_tau_is_refused_before_its_config_file_is_written(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(REPO / "geoagent", pkg / "geoagent", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "run.py", pkg / "run.py")
    work = tmp_path / "work"
    first = _demo(pkg, work)
    assert first.returncode == 0, first.stderr[-3000:]
    written = work / "state" / "demo-configs" / "demo_geoverify.toml"
    before = written.read_bytes()

    template = pkg / "geoagent" / "configs" / "demo_geoverify.toml"
    text = template.read_text(encoding="utf-8")
    assert "\nn_boot = 200\n" in text and "tau_m" not in text  # the default, 150 m
    template.write_text(text.replace("\nn_boot = 200\n", "\nn_boot = 200\ntau_m = 200\n"), encoding="utf-8")
    second = _demo(pkg, work)
    assert second.returncode == 2, (second.stdout[-2000:], second.stderr[-3000:])
    assert (f"config error: {written}: [geoverify] tau_m = 200 m, but campaign demo-geoverify was run at tau_m = "
            "150 m (recorded in") in second.stderr, second.stderr[-3000:]
    assert "[2/3] GeoVerify" not in second.stdout
    assert written.read_bytes() == before  # the config the campaign ran with, as it was
    assert not written.with_name(written.name + ".tmp").exists()
