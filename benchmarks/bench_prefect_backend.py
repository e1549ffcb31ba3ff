"""Prefect's backend under odqa: `./run demo` on SQLite vs PostgreSQL, and the CLI overhead of a
flow verb with the workspace's long-lived server vs calling the flow's function directly.

    .venv/bin/python benchmarks/bench_prefect_backend.py [--repeats 3] [--out benchmarks/results/prefect_backend.json]

Demo: ``odqa -w WS demo`` (what `./run demo` runs once the venv exists, so set-up is excluded) on
a fresh workspace per run, with ``ODQA_PREFECT_BACKEND=sqlite`` or the default (the local
PostgreSQL); each run's workspace gets its own long-lived server, started by the demo itself
(its start is in the process's wall time, not in the pipeline's). Runs alternate backends, the
first backend of each pair rotating. Recorded per run: the process's wall time, the pipeline's
own time (the demo's ``42 stages in N s``), every stage's seconds, and how often the workspace's
log files (odqa.log, the server's log) say "database is locked" or "Error flushing", read
before the server is stopped. Then the server is stopped and its database dropped.

CLI overhead: on a workspace holding the bundled sample's passages and a question set with an
imported run, two verbs that run a flow and find their inputs unchanged (so the work itself is
small and the same both ways): ``odqa import passages`` and ``odqa evaluate``; direct: a fresh
``python -c`` that imports the flow module and calls ``flow.fn(...)``. The workspace's server
runs (started once before timing). Overhead = median CLI wall time - median direct wall time.

Forty stages (``--forty``): the flow of ``tests/ops/test_prefect_backend.py``, 40 concurrent
subflows of 3 tasks each whose tag has a concurrency limit, on a throw-away server of each
backend (alternating), with its wall time and the server log's "database is locked" / "Error
flushing" counts read before the server stops.

Targets (issue 22): no stage over 3x its median across runs of its backend; the PostgreSQL
pipeline at least 1.2x faster than SQLite's median; CLI overhead at most 1.5 s per verb.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STAGE_LINE = re.compile(r"^\[\s*\d+/\d+\] (\S+)\s+(\d+\.\d)s$")
TOTAL_LINE = re.compile(r"^(\d+) stages in (\d+)s")
BACKENDS = ("sqlite", "postgresql")
PROBLEMS = ("database is locked", "Error flushing")


def env_for(backend: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ODQA_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_PROFILES_PATH=str(home / "profiles.toml"), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT), ODQA_PREFECT_PORT="0")  # fmt: skip
    if backend == "sqlite":
        env["ODQA_PREFECT_BACKEND"] = "sqlite"
    for name in ("ODQA_POSTGRES_DIR", "ODQA_POSTGRES_BIN", "ODQA_POSTGRES_USER"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def odqa(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from odqa.flows.cli import main; sys.exit(main())", *args]


def problems_in(ws: Path) -> dict[str, int]:
    text = "".join(p.read_text(encoding="utf-8", errors="replace")
                   for p in (ws / "logs" / "odqa.log", ws / "prefect-logs" / "server.log") if p.is_file())  # fmt: skip
    return {problem: text.count(problem) for problem in PROBLEMS}


def demo_run(backend: str, tmp: Path, number: int) -> dict:
    from odqa.flows.backend.local_server import reset_server

    ws = tmp / f"demo-{backend}-{number}"
    env = env_for(backend, tmp / f"home-{backend}-{number}")
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(odqa("-w", str(ws), "demo"), env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=3600)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"demo on {backend} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = (done.stdout + done.stderr).splitlines()
    stages = {m.group(1): float(m.group(2)) for m in map(STAGE_LINE.match, lines) if m}
    totals = [TOTAL_LINE.match(line) for line in lines if TOTAL_LINE.match(line)]
    found = problems_in(ws)
    table = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("=== Top-K")):][:16])
    reset_server(ws)
    return {"backend": backend, "run": number, "wall_s": round(wall, 1), "pipeline_s": int(totals[0].group(2)),
            "stages": stages, "problems": found, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "results_table": table}  # fmt: skip


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[-4:]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall


def cli_overhead(tmp: Path, repeats: int) -> dict:
    """CLI vs direct wall times of two flow verbs on a workspace whose server runs."""
    from odqa.flows.backend.local_server import reset_server
    from odqa.storage import Workspace

    ws = tmp / "cli-ws"
    env = env_for("postgresql", tmp / "home-cli")
    tsv = tmp / "passages.tsv"
    tsv.write_text("id\ttext\ttitle\n" + "".join(f"{i}\tPassage {i} about topic {i % 7}.\tTopic {i}\n"
                                                 for i in range(1, 201)), encoding="utf-8")  # fmt: skip
    qa = tmp / "toy.qa.csv"
    qa.write_text("".join(f"What is topic {i}?\t[\"topic {i % 7}\"]\n" for i in range(20)), encoding="utf-8")
    for args in (["import", "passages", "--format", "dpr-tsv", str(tsv)],
                 ["import", "questions", "--format", "dpr-qas", "--dataset", "toy", "--split", "dev", str(qa)]):
        subprocess.run(odqa("-w", str(ws), *args), env=env, cwd=ROOT, check=True, capture_output=True)
    ids = Workspace.resolve(ws).read_table("questions", columns=["question_id"]).column(0).to_pylist()
    run = tmp / "toy.trec"
    run.write_text("".join(f"{q} Q0 {p} {r} {1 / r} toy\n" for q in ids for r, p in enumerate(("1", "2", "3"), 1)),
                   encoding="utf-8")  # fmt: skip
    subprocess.run(odqa("-w", str(ws), "import", "run", "--run", "toy-run", str(run)), env=env, cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run(odqa("-w", str(ws), "evaluate", "--run", "toy-run"), env=env, cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    direct = "import sys; from {module} import {flow}; {flow}.fn({args})"
    verbs = {
        "odqa import passages (unchanged file)": (
            odqa("-w", str(ws), "import", "passages", "--format", "dpr-tsv", str(tsv)),
            [sys.executable, "-c", direct.format(module="odqa.flows.stages.passages", flow="import_passages_flow",
                                                 args=f"fmt='dpr-tsv', path={str(tsv)!r}, workspace={str(ws)!r}")]),
        "odqa evaluate (unchanged run)": (
            odqa("-w", str(ws), "evaluate", "--run", "toy-run"),
            [sys.executable, "-c", direct.format(module="odqa.flows.stages.evaluate", flow="evaluate_flow",
                                                 args=f"run='toy-run', workspace={str(ws)!r}")]),
    }  # fmt: skip
    samples: dict[tuple[str, str], list[float]] = {(v, side): [] for v in verbs for side in ("cli", "direct")}
    load_before = os.getloadavg()[0]
    try:
        for repeat in range(repeats):
            order = list(samples)
            order = order[repeat % len(order):] + order[:repeat % len(order)]
            for verb, side in order:
                command = verbs[verb][0 if side == "cli" else 1]
                samples[(verb, side)].append(timed(command, env))
                print(f"  {verb} [{side}] {samples[(verb, side)][-1]:.2f}s", file=sys.stderr, flush=True)
    finally:
        reset_server(ws)
    rows = {}
    for verb in verbs:
        cli = statistics.median(samples[(verb, "cli")])
        plain = statistics.median(samples[(verb, "direct")])
        rows[verb] = {"cli_s": round(cli, 2), "direct_s": round(plain, 2), "overhead_s": round(cli - plain, 2),
                      "cli_samples": [round(x, 2) for x in samples[(verb, "cli")]],
                      "direct_samples": [round(x, 2) for x in samples[(verb, "direct")]]}  # fmt: skip
    return {"verbs": rows, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


FORTY = """
import asyncio, json, os, sys, time
from pathlib import Path
from odqa.flows.backend.local_server import temporary_server
home = Path(sys.argv[1])
home.mkdir(parents=True, exist_ok=True)
with temporary_server(home, home / "server.log", label="bench") as server:
    os.environ["PREFECT_API_URL"] = server.api_url
    from tests.ops import backend_load as load
    asyncio.run(load.set_limit(load.STAGES * load.TASKS_PER_STAGE))
    started = time.perf_counter()
    result = asyncio.run(load.forty_stages())
    seconds = time.perf_counter() - started
    log = (home / "server.log").read_text(errors="replace")
    print(json.dumps({"seconds": round(seconds, 1), "kind": server.database.kind,
                      "problems": {p: log.count(p) for p in ("database is locked", "Error flushing")}}))
"""


def forty_stages(tmp: Path, repeats: int) -> list[dict]:
    rows = []
    for number in range(1, repeats + 1):
        for backend in (BACKENDS if number % 2 else tuple(reversed(BACKENDS))):
            env = env_for(backend, tmp / f"home-forty-{backend}-{number}")
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, "-c", FORTY, str(tmp / f"forty-{backend}-{number}")], env=env,
                                  cwd=ROOT, capture_output=True, text=True, timeout=1800)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"forty stages on {backend} failed:\n{done.stderr[-3000:]}")
            row = {"backend": backend, "run": number, "load_before": round(load, 2),
                   **json.loads(done.stdout.strip().splitlines()[-1])}  # fmt: skip
            rows.append(row)
            print(f"forty {backend} #{number}: {row}", file=sys.stderr, flush=True)
    return rows


def summary(runs: list[dict]) -> dict:
    out: dict = {}
    for backend in BACKENDS:
        mine = [r for r in runs if r["backend"] == backend]
        stages = sorted({s for r in mine for s in r["stages"]})
        medians = {s: statistics.median(r["stages"][s] for r in mine if s in r["stages"]) for s in stages}
        worst = max(((r["stages"][s] / medians[s], s, r["run"]) for r in mine for s in r["stages"] if medians[s] > 0),
                    default=(0.0, "", 0))  # fmt: skip
        out[backend] = {"pipeline_s": [r["pipeline_s"] for r in mine], "wall_s": [r["wall_s"] for r in mine],
                        "median_pipeline_s": statistics.median(r["pipeline_s"] for r in mine),
                        "median_wall_s": statistics.median(r["wall_s"] for r in mine),
                        "stage_medians": medians, "worst_stage_ratio": [round(worst[0], 2), worst[1], worst[2]],
                        "problems": [r["problems"] for r in mine]}  # fmt: skip
    out["speedup_pipeline"] = round(out["sqlite"]["median_pipeline_s"] / out["postgresql"]["median_pipeline_s"], 2)
    return out


def markdown(runs: list[dict], totals: dict, cli: dict | None) -> str:
    lines = ["| stage | " + " | ".join(f"{r['backend']} #{r['run']}" for r in runs) + " |",
             "| --- | " + " | ".join("---:" for _ in runs) + " |"]  # fmt: skip
    for stage in runs[0]["stages"]:
        lines.append(f"| {stage} | " + " | ".join(f"{r['stages'].get(stage, float('nan')):.1f}" for r in runs) + " |")
    lines.append("| **pipeline (s)** | " + " | ".join(f"**{r['pipeline_s']}**" for r in runs) + " |")
    lines.append("| process wall (s) | " + " | ".join(f"{r['wall_s']:.0f}" for r in runs) + " |")
    lines.append("| 'database is locked' / 'Error flushing' | " + " | ".join(
        f"{r['problems']['database is locked']} / {r['problems']['Error flushing']}" for r in runs) + " |")
    lines.append("| load average at start | " + " | ".join(f"{r['load_before']:.1f}" for r in runs) + " |")
    lines.append("")
    for backend in BACKENDS:
        t = totals[backend]
        lines.append(f"- {backend}: median pipeline {t['median_pipeline_s']} s, worst stage/median "
                     f"{t['worst_stage_ratio'][0]}x ({t['worst_stage_ratio'][1]}, run {t['worst_stage_ratio'][2]})")
    lines.append(f"- SQLite / PostgreSQL median pipeline: {totals['speedup_pipeline']}x")
    if cli:
        lines += ["", "| verb | CLI (s) | direct (s) | CLI overhead (s) |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {verb} | {v['cli_s']:.2f} | {v['direct_s']:.2f} | {v['overhead_s']:.2f} |"
                  for verb, v in cli["verbs"].items()]  # fmt: skip
        lines.append(f"\nCLI load average {cli['load_before']:.1f} before, {cli['load_after']:.1f} after")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "prefect_backend.json")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-cli", action="store_true")
    parser.add_argument("--forty", action="store_true", help="also time the 40-subflow flow on both backends")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-prefect-"))
    runs: list[dict] = []
    if not args.skip_demo:
        for number in range(1, args.repeats + 1):
            order = BACKENDS if number % 2 else tuple(reversed(BACKENDS))
            for backend in order:
                runs.append(demo_run(backend, tmp, number))
                r = runs[-1]
                print(f"demo {backend} #{number}: pipeline {r['pipeline_s']} s, wall {r['wall_s']} s, "
                      f"problems {r['problems']}, load {r['load_before']}->{r['load_after']}", file=sys.stderr, flush=True)
        runs.sort(key=lambda r: (BACKENDS.index(r["backend"]), r["run"]))
    totals = summary(runs) if runs else {}
    cli = None if args.skip_cli else cli_overhead(tmp, args.repeats)
    forty = forty_stages(tmp, args.repeats) if args.forty else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "summary": totals, "cli": cli, "forty": forty}, indent=2),
                        encoding="utf-8")  # fmt: skip
    print(markdown(runs, totals, cli) if runs else json.dumps({"cli": cli, "forty": forty}, indent=2))


if __name__ == "__main__":
    main()
