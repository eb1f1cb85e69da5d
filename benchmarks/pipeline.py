"""End-to-end benchmark of the durable campaign pipeline against its raw HTTP ceiling (issue 2 acceptance).

Usage::

    python benchmarks/pipeline.py                      # 100,000 calls (raw ceiling + pipeline)
    python benchmarks/pipeline.py --million            # 100,000 and 1,000,000 calls (RSS growth check;
                                                       # raw ceiling at 100,000 only unless --raw-each)
    python benchmarks/pipeline.py -n 20000 -c 64       # any size / concurrency
    python benchmarks/pipeline.py --no-export          # skip the Parquet/CSV export at the end

What runs
---------
* The local OpenAI-compatible fake (``python -m geoagent.sandbox.llm_openai --no-auth``, no call-log file,
  a bounded in-memory call list) in its own process.
* **raw ceiling**: plain ``aiohttp`` POSTs to ``/v1/chat/completions`` with ``concurrency`` requests in
  flight, the same JSON bodies and ``X-Request-Key`` header the pipeline sends; no queue, no storage,
  no parsing beyond reading the body.
* **pipeline**: ``geoagent.engine.run_campaign`` of a ``generic`` campaign of N calls: planner -> SQLite
  ``requests`` queue -> ModelCaller (store look-up + ledger reservation, HTTP client with rate/concurrency
  policy, OpenAI-compatible provider, store + settle) -> ``responses`` queue -> Collector (results table)
  -> export to Parquet + CSV (unless ``--no-export``). The timed span is the whole ``run_campaign`` call
  (planning, running, summary and export), on fresh queue and state folders.

Each configuration runs in its own child process, so the reported peak RSS (``ru_maxrss`` of that child,
read with ``resource.getrusage(RUSAGE_SELF)`` just before it exits) belongs to that run alone. Figures
print as one table and, with ``--json PATH``, as a JSON file.

Targets (issue 2): pipeline/raw ratio >= 0.7; peak RSS at 1,000,000 calls <= 1.2 x peak RSS at 100,000.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL_NAME = "bench-gpt"
MODEL_ID = "sim-gpt"
MAX_OUTPUT_TOKENS = 200
PROMPT = "Generic task {i}: describe in one sentence what a street photo of a city might show."


# ------------------------------------------------------------------------------------------------
# the server
# ------------------------------------------------------------------------------------------------


def start_server(latency_ms: float = 0.0) -> tuple[subprocess.Popen, str]:
    """Start the OpenAI-compatible fake in its own process (no auth, no log file); return (proc, base URL).

    ``latency_ms`` > 0 makes each answer take that long (simulated model time, no CPU)."""
    from geoagent.sandbox.server import free_port, wait_ready

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port), "--no-auth", "--calls-max", "1000",
         "--latency-ms", str(latency_ms)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(base)
    return proc, base


# ------------------------------------------------------------------------------------------------
# raw ceiling (child process)
# ------------------------------------------------------------------------------------------------


def raw_body(i: int) -> dict[str, Any]:
    """The JSON body the OpenAI-compatible provider sends for generic task ``i`` (see ``build``)."""
    return {
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": PROMPT.format(i=i)}],
        "max_tokens": MAX_OUTPUT_TOKENS,
        "temperature": 0.0,
    }


async def _raw(base: str, n: int, concurrency: int) -> dict[str, Any]:
    import aiohttp
    import orjson

    url = f"{base}/v1/chat/completions"
    counter = iter(range(n))
    errors = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        for i in counter:
            body = orjson.dumps(raw_body(i))
            headers = {"Content-Type": "application/json", "X-Request-Key": hashlib.sha256(body).hexdigest()}
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    errors += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return {"calls": n, "elapsed_s": elapsed, "errors": errors}


# ------------------------------------------------------------------------------------------------
# pipeline (child process)
# ------------------------------------------------------------------------------------------------


def write_config(work: Path, base: str, n: int, concurrency: int) -> Path:
    cfg = work / "bench.toml"
    cfg.write_text(
        f"""
[campaign]
name = "bench"
kind = "generic"
seed = 1

[paths]
queues = "{work / 'queues'}"
state = "{work / 'state'}"

[budget]
cap_usd = 1000000.0

[[models]]
name = "{MODEL_NAME}"
provider = "openai"
model = "{MODEL_ID}"
base_url = "{base}/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = {MAX_OUTPUT_TOKENS}
concurrency = {concurrency}
rate = {{ requests = 1000000, period_s = 1.0 }}
timeout_s = 60.0

[generic]
n_requests = {n}
"""
    )
    return cfg


async def _pipeline(base: str, n: int, concurrency: int, work: Path, export: bool,
                    only_stages: list[str] | None = None) -> dict[str, Any]:
    from geoagent.config import load_config
    from geoagent.engine import run_campaign

    cfg_path = work / "bench.toml"
    if not cfg_path.exists():
        write_config(work, base, n, concurrency)
    cfg = load_config(cfg_path)
    t0 = time.perf_counter()
    outcome = await run_campaign(cfg, live=False, handle_signals=False, export=export and not only_stages,
                                 only_stages=only_stages)
    elapsed = time.perf_counter() - t0
    return {
        "calls": (outcome.spend or {}).get("calls", 0),
        "elapsed_s": elapsed,
        "status": outcome.status,
        "planned": outcome.planned,
        "dead": outcome.missing,
        "export_files": [str(p) for p in outcome.export_files],
    }


def child_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("raw", "pipeline", "floor"))
    ap.add_argument("--base", required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("-c", type=int, required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--profile", default=None, help="write a cProfile dump here")
    ap.add_argument("--stages", default=None, help="comma-separated stages to run in this process (scale-out)")
    a = ap.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    if a.mode == "raw":
        coro = _raw(a.base, a.n, a.c)
    elif a.mode == "floor":
        from floor import run_floor  # benchmarks/floor.py (this folder is on sys.path when run as a script)

        coro = run_floor(a.base, a.n, a.c, Path(a.work), prompt=PROMPT, model_id=MODEL_ID,
                         max_output_tokens=MAX_OUTPUT_TOKENS)
    else:
        coro = _pipeline(a.base, a.n, a.c, Path(a.work), not a.no_export, a.stages.split(",") if a.stages else None)
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        out = asyncio.run(coro)
        prof.disable()
        prof.dump_stats(a.profile)
    else:
        out = asyncio.run(coro)
    out["mode"] = a.mode
    out["concurrency"] = a.c
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    out["cpu_s"] = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------


def _child_cmd(mode: str, base: str, n: int, concurrency: int, work: Path | None, export: bool,
               profile: str | None, stages: str | None = None) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", mode, "--base", base, "-n", str(n), "-c", str(concurrency)]
    if work is not None:
        cmd += ["--work", str(work)]
    if not export:
        cmd.append("--no-export")
    if profile:
        cmd += ["--profile", profile]
    if stages:
        cmd += ["--stages", stages]
    return cmd


def _result(mode: str, proc: subprocess.CompletedProcess | subprocess.Popen, stdout: str, stderr: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["calls_per_s"] = res["calls"] / res["elapsed_s"] if res["elapsed_s"] > 0 else 0.0
            return res
    raise RuntimeError(f"{mode} run failed (exit {proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")


def run_child(mode: str, base: str, n: int, concurrency: int, *, work: Path | None = None, export: bool = True,
              profile: str | None = None, callers: int = 1) -> dict[str, Any]:
    """Run one configuration in child process(es); return its figures.

    ``callers`` > 1 (pipeline only): the main child runs every stage and ``callers - 1`` more children run
    only the model caller on the same queue and state files (``--stages model_caller`` scale-out), each
    with ``concurrency / callers`` requests in flight, so the total stays ``concurrency``. Calls/s is
    measured by the main child (it finishes last: its collector waits for every caller); client CPU is
    the sum over all children; peak RSS is the largest child's.
    """
    if callers <= 1 or mode != "pipeline":
        cmd = _child_cmd(mode, base, n, concurrency, work, export, profile)
        proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return _result(mode, proc, proc.stdout, proc.stderr)
    per = max(1, concurrency // callers)
    assert work is not None
    write_config(work, base, n, per)
    extra = [subprocess.Popen(_child_cmd(mode, base, n, per, work, False, None, "model_caller"), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(callers - 1)]
    main_proc = subprocess.run(_child_cmd(mode, base, n, per, work, export, profile), cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = _result(mode, main_proc, main_proc.stdout, main_proc.stderr)
    for p in extra:
        out, err = p.communicate(timeout=600)
        other = _result(mode, p, out, err)
        res["cpu_s"] += other["cpu_s"]
        res["peak_rss_mib"] = max(res["peak_rss_mib"], other["peak_rss_mib"])
    res["callers"] = callers
    return res


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _server_cpu_us(server_pid: int, before: float | None, n: int) -> float | None:
    after = process_cpu_s(server_pid)
    return None if before is None or after is None else 1e6 * (after - before) / max(1, n)


def _figures(label: str, n: int, res: dict[str, Any], details: str) -> str:
    """One printed line of a configuration's figures: calls/s, wall time, ``details``, peak RSS, CPU per call."""
    return (f"{label:<8} n={n:>9,}  {res['calls_per_s']:9.0f} calls/s  ({res['elapsed_s']:.1f} s, {details}, "
            f"peak RSS {res['peak_rss_mib']:.0f} MiB, client CPU {1e6 * res['cpu_s'] / max(1, n):.0f} us/call, "
            f"server CPU {res.get('server_cpu_us') or 0:.0f} us/call)")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--calls", type=int, default=100_000, help="simulated calls (default 100,000)")
    ap.add_argument("--million", action="store_true",
                    help="run 100,000 and 1,000,000 calls and compare the pipeline's peak RSS")
    ap.add_argument("-c", "--concurrency", type=int, default=64, help="requests in flight (both runs)")
    ap.add_argument("--no-export", action="store_true", help="skip the Parquet/CSV export of the pipeline")
    ap.add_argument("--skip-raw", action="store_true", help="pipeline only (no raw ceiling)")
    ap.add_argument("--raw-each", action="store_true",
                    help="with --million, also measure the raw ceiling at 1,000,000 (default: at 100,000 only)")
    ap.add_argument("--keep", action="store_true", help="keep the queue/state folders (printed)")
    ap.add_argument("--profile", default=None, help="cProfile dump of the (last) pipeline child to this path")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--callers", type=int, default=1,
                    help="model-caller processes sharing the queues (scale-out over cores; default 1)")
    ap.add_argument("--floor", action="store_true",
                    help="also run the durable floor (benchmarks/floor.py: the least durable work per call) in the same run")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="simulated model time per call in ms (default 0: measures pure overhead, the hard case)")
    a = ap.parse_args()
    sizes = [100_000, 1_000_000] if a.million else [a.calls]

    server, base = start_server(a.latency_ms)
    print(f"server latency {a.latency_ms:g} ms per call, concurrency {a.concurrency}, model-caller processes {a.callers}, "
          f"cpus {os.cpu_count()}", flush=True)
    results: list[dict[str, Any]] = []
    try:
        for n in sizes:
            raw = None
            if not a.skip_raw and (n == sizes[0] or a.raw_each):
                srv0 = process_cpu_s(server.pid)
                raw = run_child("raw", base, n, a.concurrency)
                raw["server_cpu_us"] = _server_cpu_us(server.pid, srv0, n)
                print(_figures("raw", n, raw, f"errors {raw['errors']}"), flush=True)
            floor = None
            if a.floor:
                fwork = Path(tempfile.mkdtemp(prefix=f"geoagent-floor-{n}-", dir=os.environ.get("GEOAGENT_BENCH_DIR")))
                srv0 = process_cpu_s(server.pid)
                try:
                    floor = run_child("floor", base, n, a.concurrency, work=fwork)
                finally:
                    shutil.rmtree(fwork, ignore_errors=True)
                floor["server_cpu_us"] = _server_cpu_us(server.pid, srv0, n)
                print(_figures("floor", n, floor, f"errors {floor['errors']}, calls {floor['calls']:,}"), flush=True)
            work = Path(tempfile.mkdtemp(prefix=f"geoagent-bench-{n}-", dir=os.environ.get("GEOAGENT_BENCH_DIR")))
            srv0 = process_cpu_s(server.pid)
            try:
                pipe = run_child("pipeline", base, n, a.concurrency, work=work, export=not a.no_export, profile=a.profile,
                                 callers=a.callers)
            finally:
                if a.keep:
                    print(f"kept {work}")
                else:
                    shutil.rmtree(work, ignore_errors=True)
            pipe["server_cpu_us"] = _server_cpu_us(server.pid, srv0, n)
            print(_figures("pipeline", n, pipe, f"status {pipe['status']}, calls {pipe['calls']:,}"), flush=True)
            row = {"n": n, "concurrency": a.concurrency, "callers": a.callers, "latency_ms": a.latency_ms, "export": not a.no_export,
                   "pipeline": pipe, "raw": raw, "floor": floor}
            if raw and floor:
                row["floor_ratio"] = floor["calls_per_s"] / raw["calls_per_s"]
                print(f"floor    n={n:>9,}  floor / raw {row['floor_ratio']:.3f} (the durable minimum of benchmarks/floor.py; "
                      f"compare with the pipeline's ratio below)", flush=True)
            if raw:
                row["ratio"] = pipe["calls_per_s"] / raw["calls_per_s"]
                print(f"ratio    n={n:>9,}  {row['ratio']:.3f}  (target >= 0.7: {'met' if row['ratio'] >= 0.7 else 'NOT met'})",
                      flush=True)
                if raw.get("server_cpu_us") and pipe.get("server_cpu_us"):
                    # when every core is busy, calls/s ~ cores / (CPU per call of client + server), so this is
                    # the ratio the CPU cost alone allows on a machine too small to run both at full speed
                    raw_cpu = 1e6 * raw["cpu_s"] / n + raw["server_cpu_us"]
                    pipe_cpu = 1e6 * pipe["cpu_s"] / n + pipe["server_cpu_us"]
                    row["cpu_bound_ratio"] = raw_cpu / pipe_cpu
                    print(f"cpu      n={n:>9,}  client+server CPU per call: raw {raw_cpu:.0f} us, pipeline {pipe_cpu:.0f} us; "
                          f"their ratio {row['cpu_bound_ratio']:.3f} bounds the calls/s ratio when the cores are the limit",
                          flush=True)
            results.append(row)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()

    print()
    print(f"{'calls':>10} {'raw calls/s':>12} {'pipe calls/s':>13} {'ratio':>6} {'pipe peak RSS MiB':>18}")
    for r in results:
        raw_rate = f"{r['raw']['calls_per_s']:.0f}" if r["raw"] else "-"
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else "-"
        print(f"{r['n']:>10,} {raw_rate:>12} {r['pipeline']['calls_per_s']:>13.0f} {ratio:>6} {r['pipeline']['peak_rss_mib']:>18.0f}")
    summary: dict[str, Any] = {"runs": results, "cpus": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if len(results) == 2:
        growth = results[1]["pipeline"]["peak_rss_mib"] / results[0]["pipeline"]["peak_rss_mib"]
        summary["rss_growth"] = growth
        print(f"peak RSS {results[1]['n']:,} / {results[0]['n']:,}: {growth:.2f}x (target <= 1.2x: "
              f"{'met' if growth <= 1.2 else 'NOT met'})")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2))
    ok = all(r.get("ratio", 1.0) >= 0.7 for r in results) and summary.get("rss_growth", 1.0) <= 1.2
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
