"""Peak memory of the Wikipedia ingest does not grow with the dump size.

Builds uncompressed exports in a temporary folder under /tmp from the real sample's pages
(1 copy, and as many copies as make ``--gigabytes`` of XML, fresh page ids each time), then
runs ``iter_chunks`` over each in a fresh subprocess (``workers=2``, results consumed and
dropped like a writer would) while a sampler thread records, every 0.2 s, the PSS of the whole
process tree (reader + fork server + workers; PSS so that pages shared after fork count once),
the RSS of the reader and the largest RSS of a worker. Peaks are reported over the first 10 %,
50 % and all of the pages: memory is bounded if they stay flat as the ingest proceeds and the
large dump's peaks match the 1-copy dump's.

    python benchmarks/bench_ingest_memory.py [--gigabytes 1.0] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from synthetic_dump import write_repeated  # noqa: E402

SAMPLE = REPO.parent / "shared" / "data" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"

CHILD = r"""
import json, sys, threading, time
import psutil
from pathlib import Path
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks

def snapshot(me):
    # (PSS of the whole tree, RSS of the reader, largest RSS of a worker or the fork server)
    pss, workers = me.memory_full_info().pss, 0
    for child in me.children(recursive=True):
        try:
            info = child.memory_full_info()
        except psutil.Error:
            continue
        pss += info.pss
        workers = max(workers, info.rss)
    return pss, me.memory_info().rss, workers

if __name__ == "__main__":
    me = psutil.Process()
    pages = passages = 0
    samples = [(0, *snapshot(me))]  # (pages done, tree PSS, reader RSS, worker RSS)
    done = threading.Event()
    def sample():
        while not done.wait(0.2):
            samples.append((pages, *snapshot(me)))
    # This thread makes the pool use the fork server, as under a Prefect worker.
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    for chunk in iter_chunks(Path(sys.argv[1]), IngestOptions(workers=2)):
        pages += chunk.pages
        passages += chunk.passages.num_rows
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    # Peaks over the first 10 % / 50 % / all of the pages: flat if memory does not grow.
    peaks = {
        str(share): [max(s[i] for s in samples if s[0] <= share * pages) for i in (1, 2, 3)]
        for share in (0.1, 0.5, 1.0)
    }
    print(json.dumps({"pages": pages, "passages": passages, "seconds": seconds, "peaks": peaks}))
"""


def measure(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dump", type=Path, default=SAMPLE)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--keep", action="store_true", help="keep the generated XML files")
    args = parser.parse_args()
    if not args.dump.exists():
        sys.exit(f"dump not found: {args.dump}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_ingest_memory_", dir="/tmp"))
    print(f"machine: {os.cpu_count()} CPUs, load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    try:
        for label, target in [("1-copy", 1), ("large", int(args.gigabytes * 1e9))]:
            path = tmp / f"{label}.xml"
            start = time.perf_counter()
            copies, size = write_repeated(args.dump, path, target)
            print(
                f"built {path.name}: {copies} copies, {size / 1e6:.0f} MB in {time.perf_counter() - start:.0f} s"
            )
            result = measure(path)
            result.update(copies=copies, xml_bytes=size)
            rows.append(result)
            if not args.keep:
                path.unlink()
            print(json.dumps(result))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "\n| dump | XML MB | pages | passages | s | MB/s | peak tree PSS MB (first 10% / 50% / all pages)"
        " | peak reader RSS MB | peak worker RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pss, reader, worker = (
            [r["peaks"][share][i] / 2**20 for share in ("0.1", "0.5", "1.0")] for i in range(3)
        )
        print(
            f"| {r['copies']} x sample | {r['xml_bytes'] / 1e6:.0f} | {r['pages']} | {r['passages']} "
            f"| {r['seconds']:.0f} | {r['xml_bytes'] / 1e6 / r['seconds']:.2f} "
            f"| {' / '.join(f'{x:.0f}' for x in pss)} | {' / '.join(f'{x:.0f}' for x in reader)} "
            f"| {' / '.join(f'{x:.0f}' for x in worker)} |"
        )
    small, large = rows
    print(
        f"\nsize ratio {large['xml_bytes'] / small['xml_bytes']:.0f}x, peak tree PSS ratio "
        f"{large['peaks']['1.0'][0] / small['peaks']['1.0'][0]:.2f}x"
    )


if __name__ == "__main__":
    main()
