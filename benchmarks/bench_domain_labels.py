"""Benchmark: domain labelling on a Wikipedia-shaped category graph, and the SQL dump reader.

Run:  .venv/bin/python benchmarks/bench_domain_labels.py [--scale 1.0] [--work DIR] [--skip-labels]
      [--skip-sql] [--skip-sql-graph]

1. Labelling. A generated graph of English Wikipedia's shape (scale 1.0: 2.4M categories in
   levels growing x6 under the 39 DESIRE-ME domains, ~10M category -> parent edges including
   lateral and upward edges that make cycles, topical locality (a category's parents and an
   article's categories mostly share a home domain, so articles get a few labels, not all 39),
   1% hidden "Articles with ..." maintenance categories, 5M articles with ~5 categories each)
   is written to Parquet; `label_domains` then
   runs in a fresh subprocess that streams the Parquet file (as the flow does from the
   workspace), and the parent samples its RSS with psutil. Reference: the literal per-article
   breadth-first walk (Python sets over the same CSR arrays) on a random sample of articles,
   extrapolated to all articles; the sampled labels must be identical.
2. SQL reader. A generated `categorylinks.sql` (legacy schema, ~1 MB INSERT lines like
   Wikimedia's) read by `SqlDumpReader` (plain and gzip) vs the widely copied csv-module approach
   (mysqldump-to-csv: Python's csv reader with quotechar="'" and escapechar="\\" over each INSERT
   line, rows cut at parentheses), which does not even translate escapes correctly.
3. SQL graph input. `SqlCategoryGraph` on a generated page.sql + categorylinks.sql (parse,
   stage to Parquet, DuckDB join with a 2 GB memory limit, stream the rows back), in a
   subprocess: time and peak RSS.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from odqa.pipelines.categories.domain_config import DESIRE_ME_DOMAINS, DomainConfig  # noqa: E402

LEVEL_GROWTH = 6.2


# -- graph generation ---------------------------------------------------------------------------
def generate_graph(scale: float, out: Path, seed: int = 0) -> dict[str, int]:
    """Write links.parquet (title, namespace, category) and ids.npz (integer edges for the reference)."""
    rng = np.random.default_rng(seed)
    n_domains = len(DESIRE_ME_DOMAINS)
    n_categories = int(2_400_000 * scale)
    n_articles = int(5_000_000 * scale)
    # Level sizes: 39, 39*g, 39*g^2, ... until n_categories.
    sizes = [n_domains]
    while sum(sizes) < n_categories:
        sizes.append(min(int(sizes[-1] * LEVEL_GROWTH), n_categories - sum(sizes)))
    level = np.repeat(np.arange(len(sizes)), sizes)

    # Topical locality, as in Wikipedia: every category has a home domain, and 90% of its
    # parents (1 + Poisson(2.2), from the level above or, 20% of them, two levels up) share it.
    home = rng.integers(0, n_domains, n_categories)
    home[:n_domains] = np.arange(n_domains)
    by_level_home = [
        np.flatnonzero(level == lv)[np.argsort(home[level == lv], kind="stable")] for lv in range(len(sizes))
    ]
    home_starts = [np.searchsorted(home[ids], np.arange(n_domains + 1)) for ids in by_level_home]

    def pick(lv: np.ndarray, h: np.ndarray) -> np.ndarray:
        """A random category of level lv with home h (any home of that level if there is none)."""
        out = np.empty(len(lv), np.int64)
        for level_value in np.unique(lv):
            sel = np.flatnonzero(lv == level_value)
            ids, st = by_level_home[level_value], home_starts[level_value]
            lo, hi = st[h[sel]], st[h[sel] + 1]
            empty = hi == lo
            lo, hi = np.where(empty, 0, lo), np.where(empty, len(ids), hi)
            out[sel] = ids[lo + (rng.random(len(sel)) * (hi - lo)).astype(np.int64)]
        return out

    child = np.arange(n_domains, n_categories)
    n_par = 1 + rng.poisson(2.2, len(child))
    c = np.repeat(child, n_par)
    up = np.where((level[c] >= 2) & (rng.random(len(c)) < 0.2), 2, 1)
    same = rng.random(len(c)) < 0.9
    p = pick(level[c] - up, np.where(same, home[c], rng.integers(0, n_domains, len(c))))
    # About one more edge per category to a random category of any level (80% same home):
    # lateral and upward edges, which make cycles.
    extra = rng.integers(n_domains, n_categories, n_categories)
    same = rng.random(len(extra)) < 0.8
    extra_level = rng.integers(1, len(sizes), len(extra))
    extra_parent = pick(extra_level, np.where(same, home[extra], rng.integers(0, n_domains, len(extra))))
    cat_child = np.concatenate([c, extra])
    cat_parent = np.concatenate([p, extra_parent])

    hidden = rng.random(n_categories) < 0.01
    hidden[:n_domains] = False
    deep = np.flatnonzero(level >= len(sizes) - 2)
    k = 1 + rng.poisson(4.0, n_articles)
    art = np.repeat(np.arange(n_articles), k)
    # An article's categories share its topic 80% of the time.
    art_home = rng.integers(0, n_domains, n_articles)[art]
    deep_level = level[deep[rng.integers(0, len(deep), len(art))]]
    same = rng.random(len(art)) < 0.8
    art_cat = pick(deep_level, np.where(same, art_home, rng.integers(0, n_domains, len(art))))
    hidden_ids = np.flatnonzero(hidden)
    tracked = rng.random(len(art)) < 0.15
    art_cat[tracked] = hidden_ids[rng.integers(0, len(hidden_ids), int(tracked.sum()))]

    names = np.array(
        [*DESIRE_ME_DOMAINS, *(f"Topic {i}" for i in range(n_domains, n_categories))], dtype=object
    )
    names[hidden] = np.array([f"Articles with issue {i}" for i in np.flatnonzero(hidden)], dtype=object)
    np.savez(
        out / "ids.npz", cat_child=cat_child, cat_parent=cat_parent, art=art, art_cat=art_cat, hidden=hidden
    )

    schema = pa.schema([("title", pa.string()), ("namespace", pa.int32()), ("category", pa.string())])
    with pq.ParquetWriter(out / "links.parquet", schema) as writer:
        step = 2_000_000
        for lo in range(0, len(cat_child), step):
            ch, pa_ = cat_child[lo : lo + step], cat_parent[lo : lo + step]
            writer.write_table(
                pa.table(
                    {
                        "title": pa.array(["Category:" + n for n in names[ch]], pa.string()),
                        "namespace": pa.array(np.full(len(ch), 14, np.int32)),
                        "category": pa.array(names[pa_].tolist(), pa.string()),
                    },
                    schema=schema,
                )
            )
        for lo in range(0, len(art), step):
            a, ac = art[lo : lo + step], art_cat[lo : lo + step]
            writer.write_table(
                pa.table(
                    {
                        "title": pa.array([f"Article {i}" for i in a.tolist()], pa.string()),
                        "namespace": pa.array(np.zeros(len(a), np.int32)),
                        "category": pa.array(names[ac].tolist(), pa.string()),
                    },
                    schema=schema,
                )
            )
    return {
        "categories": n_categories,
        "levels": len(sizes),
        "category_edges": len(cat_child),
        "articles": n_articles,
        "article_edges": len(art),
        "hidden_categories": int(hidden.sum()),
    }


# -- the measured run (subprocess) --------------------------------------------------------------
def label_subprocess(work: Path) -> None:
    from odqa.pipelines.categories.labeller import label_domains

    parquet = pq.ParquetFile(work / "links.parquet")
    t0, c0 = time.perf_counter(), time.process_time()
    result = label_domains(lambda: parquet.iter_batches(batch_size=1_000_000), DomainConfig(), progress=False)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    pq.write_table(result.domains, work / "domains.parquet")
    report = result.report.as_dict()
    report.pop("per_domain")
    report["domain_rows"] = result.domains.num_rows
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "report": report,
            }
        )
    )


def run_labelling(work: Path) -> dict:
    return run_measured(["--label-subprocess", str(work)])


def run_measured(args: list[str]) -> dict:
    """Run this script with `args` in a subprocess; its last stdout line (JSON) + psutil peak RSS."""
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise SystemExit(f"measured subprocess {args} failed ({proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["psutil_peak_rss_mb"] = peak / 2**20
    return result


# -- reference: per-article BFS ------------------------------------------------------------------
def reference_per_article(work: Path, n_sample: int, seed: int = 1) -> dict:
    ids = np.load(work / "ids.npz")
    hidden = ids["hidden"]
    n_cat = len(hidden)
    order = np.argsort(ids["cat_child"], kind="stable")
    indptr = np.zeros(n_cat + 1, np.int64)
    np.cumsum(np.bincount(ids["cat_child"], minlength=n_cat), out=indptr[1:])
    parents = ids["cat_parent"][order]
    art, art_cat = ids["art"], ids["art_cat"]
    a_ptr = np.zeros(art[-1] + 2, np.int64)
    np.cumsum(np.bincount(art), out=a_ptr[1:])
    rng = np.random.default_rng(seed)
    sample = rng.choice(art[-1] + 1, n_sample, replace=False)
    domains = set(range(len(DESIRE_ME_DOMAINS)))
    out: dict[int, tuple[int, frozenset[int]]] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    for a in sample.tolist():
        level = {c for c in art_cat[a_ptr[a] : a_ptr[a + 1]].tolist() if not hidden[c]}
        seen = set(level)
        depth = 1
        while level and depth <= 10:
            found = level & domains
            if found:
                out[a] = (depth, frozenset(found))
                break
            nxt = set()
            for c in level:
                for p in parents[indptr[c] : indptr[c + 1]].tolist():
                    if p not in seen and not hidden[p]:
                        seen.add(p)
                        nxt.add(p)
            level = nxt
            depth += 1
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"sample": n_sample, "seconds": seconds, "per_article_us": 1e6 * cpu / n_sample, "labels": out}


def compare_sample(work: Path, ref: dict) -> int:
    """Number of sampled articles whose fast labels differ from the per-article walk."""
    table = pq.read_table(work / "domains.parquet")
    index = {d: i for i, d in enumerate(DESIRE_ME_DOMAINS)}
    wanted = {f"Article {a}" for a in ref["labels"]}
    fast: dict[str, tuple[int, set[int]]] = {}
    for row in table.filter(pa.compute.is_in(table["title"], pa.array(sorted(wanted)))).to_pylist():
        fast.setdefault(row["title"], (row["depth"], set()))[1].add(index[row["domain"]])
    mismatches = 0
    for a, (depth, found) in ref["labels"].items():
        got = fast.pop(f"Article {a}", None)
        mismatches += got is None or got[0] != depth or got[1] != set(found)
    return mismatches + len(fast)  # + labelled by the fast path only


# -- SQL reader ---------------------------------------------------------------------------------
def generate_page_dump(path: Path, pages: int, seed: int = 0) -> None:
    """page.sql with ids 0..pages-1: 85% articles (10% of them redirects), 10% categories, 5% other."""
    from tests.categories.dumps import PAGE_HEADER, sql_string

    rng = np.random.default_rng(seed)
    per_line = 9_000
    with open(path, "wb") as f:
        f.write(PAGE_HEADER)
        for lo in range(0, pages, per_line):
            n = min(per_line, pages - lo)
            kind = rng.random(n)
            ns = np.where(kind < 0.85, 0, np.where(kind < 0.95, 14, 2))
            redirect = (ns == 0) & (rng.random(n) < 0.1)
            parts = [
                b"(%d,%d,%s,%d,0,0.5,'20240101000000',NULL,1,100,'wikitext',NULL)"
                % (lo + i, ns_i, sql_string(f"Page_{lo + i}_\u00e9t\u00e9"), r)
                for i, (ns_i, r) in enumerate(zip(ns.tolist(), redirect.tolist(), strict=True))
            ]
            f.write(b"INSERT INTO `page` VALUES " + b",".join(parts) + b";\n")


def generate_sql_dump(path: Path, rows: int, seed: int = 0, pages: int | None = None) -> int:
    """categorylinks.sql (legacy schema); cl_from is the row number, or a random page id < pages."""
    from tests.categories.dumps import CATEGORYLINKS_LEGACY_HEADER, sql_string

    rng = np.random.default_rng(seed)
    words = [
        "Physics",
        "History_of_Europe",
        "1990s_films",
        "People_from_M\u00fcnchen",
        "Rock_(music)",
        "O'Brien_family",
        "Songs,_1968",
    ]
    per_line = 9_000  # ~1 MB statements, like Wikimedia's dumps
    with open(path, "wb") as f:
        f.write(CATEGORYLINKS_LEGACY_HEADER)
        for lo in range(0, rows, per_line):
            n = min(per_line, rows - lo)
            cats = rng.integers(0, 2_400_000, n)
            kinds = rng.integers(0, 3, n)
            froms = rng.integers(0, pages, n) if pages else np.arange(lo, lo + n)
            parts = [
                b"(%d,%s,%s,'2014-10-26 04:50:23','','uppercase','%s')"
                % (
                    f,
                    sql_string(f"{words[c % len(words)]}_{c}"),
                    sql_string(f"SORT KEY {c}\n"),
                    (b"page", b"subcat", b"file")[k],
                )
                for f, c, k in zip(froms.tolist(), cats.tolist(), kinds.tolist(), strict=True)
            ]
            f.write(b"INSERT INTO `categorylinks` VALUES " + b",".join(parts) + b";\n")
    return path.stat().st_size


def read_ours(path: Path) -> tuple[int, float]:
    """Rows read and CPU seconds (CPU, not wall: the machine is shared)."""
    from odqa.pipelines.categories.sql_dump import SqlDumpReader

    c0 = time.process_time()
    n = 0
    for batch in SqlDumpReader(path, columns=["cl_from", "cl_to", "cl_type"]):
        n += batch.num_rows
    return n, time.process_time() - c0


def read_csv_module(path: Path) -> tuple[int, float]:
    """mysqldump-to-csv's approach (csv reader per INSERT line, rows cut at parentheses)."""
    csv.field_size_limit(sys.maxsize)
    c0 = time.process_time()
    n = 0
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if not line.startswith("INSERT INTO"):
                continue
            values = line.partition(" VALUES ")[2]
            reader = csv.reader(
                [values], delimiter=",", doublequote=False, escapechar="\\", quotechar="'", strict=True
            )
            row: list[str] = []
            for fields in reader:
                for column in fields:
                    if column and column[0] == "(":
                        row = [column[1:]]
                    elif column.endswith(")") or column.endswith(");"):
                        row.append(column[: column.rfind(")")])
                        n += 1
                        row = []
                    else:
                        row.append(column)
    return n, time.process_time() - c0


def sql_graph_subprocess(work: Path) -> None:
    from odqa.pipelines.categories.graph_input import SqlCategoryGraph

    t0, c0 = time.perf_counter(), time.process_time()
    links = articles = 0
    with SqlCategoryGraph(work / "page.sql", work / "links.sql", work_dir=work, progress=False) as graph:
        staged = time.perf_counter() - t0
        for batch in graph.category_links():
            links += batch.num_rows
        for batch in graph.articles():
            articles += batch.num_rows
        stats = graph.stats.as_dict()
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - t0,
                "staging_seconds": staged,
                "cpu_seconds": time.process_time() - c0,  # this process, DuckDB's threads included
                "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "category_links": links,
                "articles": articles,
                "stats": stats,
            }
        )
    )


# -- main -----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 2.4M categories, 5M articles")
    parser.add_argument("--sql-rows", type=int, default=3_000_000)
    parser.add_argument("--reference-sample", type=int, default=3000)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--skip-sql", action="store_true")
    parser.add_argument("--skip-labels", action="store_true")
    parser.add_argument("--graph-pages", type=int, default=2_000_000, help="page.sql rows for the SQL join")
    parser.add_argument(
        "--graph-links", type=int, default=6_000_000, help="categorylinks rows for the SQL join"
    )
    parser.add_argument("--skip-sql-graph", action="store_true")
    parser.add_argument("--label-subprocess", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sql-graph-subprocess", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.label_subprocess:
        label_subprocess(args.label_subprocess)
        return
    if args.sql_graph_subprocess:
        sql_graph_subprocess(args.sql_graph_subprocess)
        return

    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()}")
        if not args.skip_labels:
            t0 = time.perf_counter()
            shape = generate_graph(args.scale, work)
            print(f"graph generated in {time.perf_counter() - t0:.0f}s: {shape}")
            run = run_labelling(work)
            print(
                f"label_domains: {run['seconds']:.1f}s wall ({run['cpu_seconds']:.1f}s CPU), peak RSS {run['psutil_peak_rss_mb']:.0f} MB "
                f"(ru_maxrss {run['ru_maxrss_mb']:.0f} MB)"
            )
            print(json.dumps(run["report"]))
            ref = reference_per_article(work, args.reference_sample)
            projected = ref["per_article_us"] * shape["articles"] / 1e6
            print(
                f"reference per-article BFS: {ref['per_article_us']:.0f} us CPU/article on {ref['sample']} articles "
                f"-> {projected:.0f}s CPU projected for {shape['articles']} articles "
                f"(x{projected / run['cpu_seconds']:.0f} the labeller's CPU time)"
            )
            print(f"sampled articles whose labels differ: {compare_sample(work, ref)}")
            print(f"load average after labelling: {os.getloadavg()}")
        if not args.skip_sql:
            dump = work / "categorylinks.sql"
            size = generate_sql_dump(dump, args.sql_rows)
            packed = work / "categorylinks.sql.gz"
            with open(dump, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                while chunk := src.read(1 << 24):
                    dst.write(chunk)
            n, ours = read_ours(dump)
            ng, ours_gz = read_ours(packed)
            nc, theirs = read_csv_module(dump)
            assert n == ng == nc == args.sql_rows, (n, ng, nc)
            mb = size / 2**20
            print(
                f"SQL dump: {n} rows, {mb:.0f} MB uncompressed, {packed.stat().st_size / 2**20:.0f} MB gzip"
            )
            print(
                f"  SqlDumpReader .sql:    {n / ours / 1e6:.2f} M rows per CPU second ({mb / ours:.0f} MB/s)"
            )
            print(f"  SqlDumpReader .sql.gz: {n / ours_gz / 1e6:.2f} M rows per CPU second")
            print(
                f"  csv-module reference:  {n / theirs / 1e6:.2f} M rows per CPU second (ours x{theirs / ours:.1f})"
            )
            print(f"load average after SQL: {os.getloadavg()}")
        if not args.skip_sql_graph:
            generate_page_dump(work / "page.sql", args.graph_pages)
            generate_sql_dump(work / "links.sql", args.graph_links, seed=1, pages=args.graph_pages)
            run = run_measured(["--sql-graph-subprocess", str(work)])
            rows = args.graph_pages + args.graph_links
            print(
                f"SqlCategoryGraph (page {args.graph_pages} + categorylinks {args.graph_links} rows, DuckDB join): "
                f"{run['seconds']:.0f}s wall (staging {run['staging_seconds']:.0f}s), {run['cpu_seconds']:.0f}s CPU "
                f"= {rows / run['cpu_seconds'] / 1e6:.2f} M dump rows per CPU second, "
                f"peak RSS {run['psutil_peak_rss_mb']:.0f} MB"
            )
            print(json.dumps({k: run[k] for k in ("category_links", "articles", "stats")}))
            print(f"load average after the SQL graph: {os.getloadavg()}")


if __name__ == "__main__":
    main()
