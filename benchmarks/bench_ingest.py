"""Wikipedia ingest throughput, side by side with the reference tools, in one run.

Every contender reads the same ``.xml.bz2`` itself (decompression included) and cleans every
main-namespace, non-redirect article:

- bz2 alone: decompression only, the floor for anything that reads the file on one core;
- gensim: ``extract_pages`` + ``filter_wiki`` (regex-based), one process;
- wikiextractor: its own page collector + ``Extractor.clean_text``, one process;
- mwparserfromhell: our reader + plain ``parse(text).strip_code()``, one process;
- ours: ``iter_chunks`` (clean + categories + passages + Arrow tables), cleaning in the
  calling process (1 process) and in a pool of 2 worker processes (``workers=2``), pool
  start-up included.

MB/s is *uncompressed XML bytes* per second of wall time; articles/s counts the dump's
main-namespace non-redirect pages. Rounds are interleaved (so load changes on the shared
machine hit every tool alike) and the best round is reported, with the median beside it.
Markup remnants (``{{ }} [[ ]] <ref thumb| Category: &nbsp;``) are counted in each output.

    python benchmarks/bench_ingest.py [--dump PATH] [--copies N] [--rounds R]
"""

from __future__ import annotations

import argparse
import bz2
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from synthetic_dump import write_repeated  # noqa: E402

from odqa.pipelines.wikipedia.dump_reader import iter_pages  # noqa: E402
from odqa.pipelines.wikipedia.ingest import IngestOptions, iter_chunks  # noqa: E402

SAMPLE = REPO.parent / "shared" / "data" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
REMNANTS = ("{{", "}}", "[[", "]]", "<ref", "thumb|", "Category:", "&nbsp;")


def remnant_hits(texts: Iterable[str]) -> int:
    return sum(text.count(r) for text in texts for r in REMNANTS)


def run_bz2(path: Path) -> tuple[int, int]:
    decompressor = bz2.BZ2Decompressor()
    total = 0
    with path.open("rb") as f:
        while raw := f.read(1 << 20):
            while raw:
                total += len(decompressor.decompress(raw))
                if decompressor.eof:
                    raw, decompressor = decompressor.unused_data, bz2.BZ2Decompressor()
                else:
                    raw = b""
    return total, 0


def run_gensim(path: Path) -> tuple[int, int]:
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    hits = 0
    with bz2.open(path, "rb") as f:
        for _title, text, _page_id in extract_pages(f, filter_namespaces=("0",)):
            if text and not text.lstrip()[:9].upper().startswith("#REDIRECT"):
                hits += remnant_hits([filter_wiki(text)])
    return 0, hits


def run_wikiextractor(path: Path) -> tuple[int, int]:
    from wikiextractor import WikiExtractor
    from wikiextractor.extract import Extractor
    from wikiextractor.WikiExtractor import collect_pages, decode_open

    # process_dump() sets this from <siteinfo>; left at "" collect_pages() skips every page.
    WikiExtractor.templateNamespace = "Template"
    hits = 0
    with decode_open(str(path)) as f:
        for page_id, revid, title, lines in collect_pages(f):
            paragraphs = Extractor(page_id, revid, "", title, lines).clean_text("".join(lines))
            hits += remnant_hits([" ".join(paragraphs)])
    return 0, hits


def run_mwparserfromhell(path: Path) -> tuple[int, int]:
    import mwparserfromhell

    hits = 0
    for page in iter_pages(path):
        if page.namespace == 0 and page.redirect_target is None and page.text:
            hits += remnant_hits([mwparserfromhell.parse(page.text).strip_code()])
    return 0, hits


def ours(workers: int) -> Callable[[Path], tuple[int, int]]:
    def run(path: Path) -> tuple[int, int]:
        hits = 0
        for chunk in iter_chunks(path, IngestOptions(workers=workers)):
            hits += remnant_hits(chunk.passages.column("text").to_pylist())
        return 0, hits

    return run


CONTENDERS: dict[str, Callable[[Path], tuple[int, int]]] = {
    "bz2 decompression alone (floor)": run_bz2,
    "gensim extract_pages + filter_wiki": run_gensim,
    "wikiextractor clean_text": run_wikiextractor,
    "mwparserfromhell strip_code": run_mwparserfromhell,
    "ours, 1 process": ours(1),
    "ours, 2 worker processes": ours(2),
}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the pool's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def dump_stats(path: Path) -> tuple[int, int]:
    """(uncompressed XML bytes, main-namespace non-redirect articles)."""
    size = run_bz2(path)[0]
    articles = sum(1 for p in iter_pages(path) if p.namespace == 0 and p.redirect_target is None)
    return size, articles


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dump", type=Path, default=SAMPLE)
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        help="benchmark N copies of the dump's pages (one bz2 in /tmp), pool start-up amortized",
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # wikiextractor logs every unknown template
    if not args.dump.exists():
        sys.exit(f"dump not found: {args.dump}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_ingest_", dir="/tmp"))
    try:
        path = args.dump if args.copies == 1 else repeated_dump(args.dump, args.copies, tmp)
        run_all(path, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def repeated_dump(dump: Path, copies: int, folder: Path) -> Path:
    """``copies`` copies of the dump's pages (fresh ids) as one bz2 file in ``folder``."""
    xml = folder / "repeated.xml"
    write_repeated(dump, xml, 0, min_copies=copies)
    path = folder / f"{dump.name.split('.')[0]}-x{copies}.xml.bz2"
    path.write_bytes(bz2.compress(xml.read_bytes()))
    xml.unlink()
    return path


def run_all(path: Path, rounds: int) -> None:
    size, articles = dump_stats(path)
    print(
        f"dump: {path.name}: {size / 1e6:.2f} MB XML, {path.stat().st_size / 1e6:.2f} MB bz2, {articles} articles"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )

    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    hits: dict[str, int] = {}
    for _ in range(rounds):
        for name, run in CONTENDERS.items():
            start, start_cpu = time.perf_counter(), _cpu_seconds()
            hits[name] = run(path)[1]
            times[name].append(time.perf_counter() - start)
            cpu[name].append(_cpu_seconds() - start_cpu)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")

    best = {name: min(t) for name, t in times.items()}
    rate = {name: size / 1e6 / t for name, t in best.items()}
    print(
        "\n| contender | best s | median s | CPU s (all processes) | MB/s XML | articles/s | remnants"
        " | ours (2 workers) is |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ours2 = rate["ours, 2 worker processes"]
    for name in CONTENDERS:
        arts = "—" if name.startswith("bz2") else f"{articles / best[name]:.0f}"
        rem = "—" if name.startswith("bz2") else str(hits[name])
        print(
            f"| {name} | {best[name]:.2f} | {statistics.median(times[name]):.2f} | {min(cpu[name]):.2f} "
            f"| {rate[name]:.2f} | {arts} "
            f"| {rem} | {ours2 / rate[name]:.2f}x |"
        )


if __name__ == "__main__":
    main()
