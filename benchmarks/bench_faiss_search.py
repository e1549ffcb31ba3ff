"""Dense search through our index code vs raw FAISS on the same index files, same run.

    .venv/bin/python benchmarks/bench_faiss_search.py [--vectors 100000] [--dim 384] [--queries 2000]
        [--k 100] [--batch 128] [--repeats 3] [--nprobe 16 512]

Vectors: clustered random embeddings (topics + noise, unit norm +-10%), written as embedding
shards and indexed by ``build_faiss_index`` (flat, hnsw, ivfpq). For each index:

* ours = ``open_faiss_index(...).search_run(queries, k, question_ids)``, what dense retrieval runs on
  every question chunk: input checks, per-part search, the inner-product transform for HNSW, and
  the run table (question_id, passage_id, rank, score) built from Arrow ``take`` of the row
  numbers; also timed without ids (``search_rows``: scores + rows, what raw FAISS returns) and
  with Python-string ids (``search``: object arrays, for interactive callers);
* raw = ``faiss.read_index`` of the very same part file and ``index.search`` on the same query
  batches (for HNSW with the zero column appended, the least any caller must do).

All four alternate on every query batch (see ``timed_passes``), ``--repeats`` passes after a
warm-up pass; best and median pass are reported; the acceptance bar is ours (run table) / raw
<= 1.10. Recall@10 of hnsw and ivfpq against flat is reported as well.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from odqa.pipelines.dense.faiss_index import IndexParams, build_faiss_index, open_faiss_index  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import EncodingManifest, write_manifest, write_shard  # noqa: E402


def clustered(rng: np.random.Generator, n: int, centers: np.ndarray, noise: float) -> np.ndarray:
    x = centers[rng.integers(0, len(centers), n)] + noise * rng.standard_normal((n, centers.shape[1]))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.uniform(0.9, 1.1, (n, 1))).astype(np.float32)


def write_embeddings(folder: Path, vectors: np.ndarray, shard_size: int) -> None:
    manifest = EncodingManifest("bench-model", "bench-corpus", shard_size, vectors.shape[1], "float32", "dot")
    for i, start in enumerate(range(0, len(vectors), shard_size)):
        block = vectors[start : start + shard_size]
        ids = pa.array([f"p{j}" for j in range(start, start + len(block))])
        manifest.shards.append(write_shard(folder, i, ids, block))
    manifest.complete, manifest.num_passages = True, len(vectors)
    write_manifest(folder, manifest)


def timed_passes(ours, raw: faiss.Index, batches: list[np.ndarray], k: int, hnsw: bool, repeats: int
                 ) -> dict[str, list[float]]:
    """Seconds per pass over all batches for each way of searching, interleaved batch by batch.

    The machine is shared: alternating the four calls on every batch (in a rotating order)
    exposes them to the same load, which whole-pass interleaving does not.
    """
    names = [pa.array([f"q{i}" for i in range(len(batch))]) for batch in batches]
    calls = {
        "run": lambda batch, question_ids: ours.search_run(batch, k, question_ids),
        "rows": lambda batch, _: ours.search_rows(batch, k),
        "objects": lambda batch, _: ours.search(batch, k),
        "raw": lambda batch, _: raw.search(
            np.hstack([batch, np.zeros((len(batch), 1), dtype=np.float32)]) if hnsw else batch, k),
    }
    modes = list(calls)
    passes: dict[str, list[float]] = {mode: [] for mode in modes}
    for repeat in range(repeats + 1):  # the first pass warms up and is not counted
        spent = dict.fromkeys(modes, 0.0)
        for number, (batch, question_ids) in enumerate(zip(batches, names, strict=True)):
            shift = (number + repeat) % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                start = time.perf_counter()
                calls[mode](batch, question_ids)
                spent[mode] += time.perf_counter() - start
        if repeat:
            for mode in modes:
                passes[mode].append(spent[mode])
    return passes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 512],
                        help="IVF-PQ search depths; 512 of the 1,265 cells of a 100k index scan ~40k codes per "
                             "query, about what the default nprobe 32 scans in a 21M-passage index (nlist ~18k)")
    args = parser.parse_args()
    faiss.omp_set_num_threads(args.threads)
    load_before = os.getloadavg()
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((200, args.dim))
    corpus = clustered(rng, args.vectors, centers, 0.7)
    queries = clustered(rng, args.queries, centers, 0.9)
    batches = [queries[i : i + args.batch] for i in range(0, len(queries), args.batch)]
    rows = []
    recall = {}
    with tempfile.TemporaryDirectory() as tmp:
        emb = Path(tmp) / "emb"
        emb.mkdir()
        write_embeddings(emb, corpus, 25_000)
        flat_top = None
        configs = [("flat", "flat", IndexParams()), ("hnsw", "hnsw", IndexParams(hnsw_m=32))]
        configs += [("ivfpq", f"ivfpq nprobe {n}", IndexParams(nprobe=n)) for n in args.nprobe]
        for index_type, label, params in configs:
            folder = Path(tmp) / index_type
            build_seconds = None
            if not folder.exists():  # the ivfpq rows share one index, searched at different depths
                start = time.perf_counter()
                build_faiss_index(emb, folder, index_type=index_type, params=params, progress=False)
                build_seconds = time.perf_counter() - start
            ours = open_faiss_index(folder, "bench-model", "bench-corpus", nprobe=params.nprobe if index_type == "ivfpq" else None)
            raw = faiss.read_index(str(folder / ours.meta.parts[0].file))
            if index_type == "hnsw":
                raw.hnsw.efSearch = params.ef_search
            elif index_type == "ivfpq":
                raw.nprobe = params.nprobe
            passes = timed_passes(ours, raw, batches, args.k, index_type == "hnsw", args.repeats)
            _, top = ours.search_rows(queries, 10)
            if index_type == "flat":
                flat_top = top
            else:
                recall[label] = float(
                    np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, flat_top, strict=True)])
                )
            rows.append((label, build_seconds, passes["run"], passes["rows"], passes["objects"], passes["raw"]))
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, faiss threads {args.threads}, load average {load_before[0]:.1f} before / "
        f"{load[0]:.1f} after; {args.vectors} x {args.dim} vectors, {args.queries} queries in batches of "
        f"{args.batch}, k={args.k}; best of {args.repeats} (median ratio in brackets)"
    )
    print("| index | build (s) | ours q/s (run table) | raw faiss q/s | ours run / raw time | ours rows / raw time "
          "| ours object ids / raw time | recall@10 vs flat |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, build_seconds, ours_t, rows_t, objects_t, raw_t in rows:
        rec = f"{recall[label]:.3f}" if label in recall else "1 (exact)"
        built = "(same index)" if build_seconds is None else f"{build_seconds:.1f}"

        def ratio(times: list[float], raw_times: list[float] = raw_t) -> str:
            return f"{min(times) / min(raw_times):.3f} ({statistics.median(times) / statistics.median(raw_times):.3f})"

        print(f"| {label} | {built} | {args.queries / min(ours_t):.0f} | {args.queries / min(raw_t):.0f} "
              f"| {ratio(ours_t)} | {ratio(rows_t)} | {ratio(objects_t)} | {rec} |")


if __name__ == "__main__":
    main()
