"""Dense search through our index code vs raw FAISS on the same index files, same run.

    .venv/bin/python benchmarks/bench_faiss_search.py [--vectors 100000] [--dim 384] [--queries 2000]
        [--k 100] [--batch 128] [--repeats 3]

Vectors: clustered random embeddings (topics + noise, unit norm +-10%), written as embedding
shards and indexed by ``build_index`` (flat, hnsw, ivfpq). For each index:

* ours = ``open_index(...).search(queries, k)``: input checks, per-part search, the inner-product
  transform for HNSW, and the mapping of rows to passage ids (Python strings); also timed
  without the id mapping (``search_rows``), which is what raw FAISS returns;
* raw = ``faiss.read_index`` of the very same part file and ``index.search`` on the same query
  batches (for HNSW with the zero column appended, the least any caller must do).

Both run ``--repeats`` times interleaved; the best time is used; the acceptance bar is
ours / raw <= 1.10. Recall@10 of hnsw and ivfpq against flat is reported as well.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from pipelines.dense.faiss_index import IndexParams, build_index, open_index  # noqa: E402
from pipelines.dense.sharded_encoding import EncodingManifest, write_manifest, write_shard  # noqa: E402


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


def our_search(index, batches: list[np.ndarray], k: int, ids: bool = True) -> float:
    """``search`` (scores + passage ids) or, with ids=False, ``search_rows`` (scores + rows)."""
    start = time.perf_counter()
    for batch in batches:
        if ids:
            index.search(batch, k)
        else:
            index.search_rows(batch, k)
    return time.perf_counter() - start


def raw_search(index: faiss.Index, batches: list[np.ndarray], k: int, hnsw: bool) -> float:
    start = time.perf_counter()
    for batch in batches:
        if hnsw:
            batch = np.hstack([batch, np.zeros((len(batch), 1), dtype=np.float32)])
        index.search(batch, k)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    faiss.omp_set_num_threads(args.threads)
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
        for index_type, params in (
            ("flat", IndexParams()),
            ("hnsw", IndexParams(hnsw_m=32)),
            ("ivfpq", IndexParams(nprobe=16)),
        ):
            folder = Path(tmp) / index_type
            start = time.perf_counter()
            build_index(emb, folder, index_type=index_type, params=params, progress=False)
            build_seconds = time.perf_counter() - start
            ours = open_index(folder, "bench-model", "bench-corpus")
            raw = faiss.read_index(str(folder / ours.meta.parts[0].file))
            if index_type == "hnsw":
                raw.hnsw.efSearch = params.ef_search
            elif index_type == "ivfpq":
                raw.nprobe = params.nprobe
            hnsw = index_type == "hnsw"
            our_search(ours, batches, args.k)
            raw_search(raw, batches, args.k, hnsw)
            t_ours, t_rows, t_raw = [], [], []
            for _ in range(args.repeats):
                t_ours.append(our_search(ours, batches, args.k))
                t_rows.append(our_search(ours, batches, args.k, ids=False))
                t_raw.append(raw_search(raw, batches, args.k, hnsw))
            _, top = ours.search_rows(queries, 10)
            if index_type == "flat":
                flat_top = top
            else:
                recall[index_type] = float(
                    np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, flat_top, strict=True)])
                )
            rows.append((index_type, build_seconds, min(t_ours), min(t_rows), min(t_raw)))
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, faiss threads {args.threads}, load average {load[0]:.1f}/{load[1]:.1f}; "
        f"{args.vectors} x {args.dim} vectors, {args.queries} queries in batches of {args.batch}, k={args.k}"
    )
    print("| index | build (s) | ours q/s (ids) | ours q/s (rows) | raw faiss q/s | ours ids / raw time "
          "| ours rows / raw time | recall@10 vs flat |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for index_type, build_seconds, ours_s, rows_s, raw_s in rows:
        rec = f"{recall[index_type]:.3f}" if index_type in recall else "1 (exact)"
        print(f"| {index_type} | {build_seconds:.1f} | {args.queries / ours_s:.0f} | {args.queries / rows_s:.0f} "
              f"| {args.queries / raw_s:.0f} | {ours_s / raw_s:.3f} | {rows_s / raw_s:.3f} | {rec} |")


if __name__ == "__main__":
    main()
