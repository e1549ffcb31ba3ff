"""Memory-bounded FAISS builds at scale, and the planner's estimates against what was measured.

Writes synthetic embeddings (seeded topical clusters plus noise, unit norm, fp32) as encoder shards of 50k under
``--workdir`` (/tmp by default; 2M x 768 is 5.7 GB, deleted at the end unless ``--keep``), then:

* measures this machine's per-vector costs (``index_planner.calibrate``) in this process;
* plans each build under ``--memory-gb`` (the same plan ``odqa index build`` logs);
* runs each build in a fresh subprocess that reports its own peak RSS (``VmHWM``), wall
  time and index size on disk: IVF-PQ over ``--ivfpq-vectors`` (default 2M), flat over the
  first ``--flat-vectors`` (default 500k) and HNSW over the first ``--hnsw-vectors`` (default
  500k; the same shard files, hard-linked), stopped after ``--hnsw-timeout`` seconds;
* prints measured / planned side by side (ratios) and the planner's projection for 21M vectors,
  and writes everything to ``--out`` (JSON).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_index_memory.py [--memory-gb 4] [--types flat,ivfpq,hnsw]

``OMP_WAIT_POLICY=PASSIVE`` (set here when unset) matters on a shared machine: spinning OpenMP
threads of FAISS make PQ training and HNSW 2-4x slower when other processes hold the cores.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from odqa.pipelines.dense.faiss_index import IndexParams  # noqa: E402
from odqa.pipelines.dense.index_planner import calibrate, describe, plan_index, synthetic_vectors  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import EncodingManifest, write_manifest, write_shard  # noqa: E402
from odqa.storage.choices import INDEX_TYPES  # noqa: E402

SHARD = 50_000
GIB = 1024**3

CHILD = r"""
import json, sys, time
from pathlib import Path
from odqa.pipelines.dense.faiss_index import IndexParams, build_faiss_index
from odqa.pipelines.dense.index_planner import peak_rss_bytes
emb, out, kind, params = sys.argv[1], Path(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
started = time.perf_counter()
meta = build_faiss_index(emb, out, index_type=kind, params=IndexParams(**params), progress=False, use_gpu=False)
seconds = time.perf_counter() - started
disk = sum(p.stat().st_size for p in out.glob("part-*.faiss"))
print(json.dumps({"peak_rss": peak_rss_bytes(), "seconds": seconds,
                  "disk": disk, "parts": len(meta.parts)}))
"""


def write_embeddings(folder: Path, n: int, dim: int, seed: int) -> None:
    """``n`` synthetic vectors as encoder shards, generated shard by shard (bounded memory)."""
    if (folder / "manifest.json").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    manifest = EncodingManifest("synthetic", f"synthetic-{n}-{dim}-{seed}", SHARD, dim, "float32", "dot")
    for index, start in enumerate(range(0, n, SHARD)):
        count = min(SHARD, n - start)
        vectors = synthetic_vectors(rng, count, dim)
        ids = pa.array([f"p{start + i}" for i in range(count)])
        manifest.shards.append(write_shard(folder, index, ids, vectors))
    manifest.num_passages, manifest.complete = n, True
    write_manifest(folder, manifest)


def linked_prefix(source: Path, folder: Path, n: int) -> None:
    """An embeddings directory of the first ``n`` vectors of ``source`` (hard links, no copy)."""
    from odqa.pipelines.dense.sharded_encoding import read_manifest

    manifest = read_manifest(source)
    shards = [s for s in manifest.shards if s.index * SHARD < n]
    if sum(s.count for s in shards) != n:
        raise ValueError(f"{n} is not a whole number of {SHARD}-vector shards")
    folder.mkdir(parents=True, exist_ok=True)
    for shard in shards:
        for name in (shard.vectors_file, shard.ids_file):
            if not (folder / name).exists():
                os.link(source / name, folder / name)
    write_manifest(folder, replace(manifest, shards=shards, num_passages=n, corpus_fingerprint=f"prefix-{n}"))


def run_build(emb: Path, out: Path, kind: str, params: IndexParams, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(emb), str(out), kind, json.dumps(params.to_dict())],
                              capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"timed_out_after": timeout, "seconds": time.perf_counter() - started}
    if done.returncode:
        raise RuntimeError(f"{kind} build failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def replan(path: Path) -> None:
    """Plans and ratios of an earlier run's builds from its stored costs, with this planner."""
    from odqa.pipelines.dense.index_planner import CostModel

    results = json.loads(path.read_text(encoding="utf-8"))
    costs = CostModel(**results["costs"])
    for row in results["builds"]:
        params = IndexParams(**{**row["plan"]["params"], "max_part_vectors": None})
        plan = plan_index(costs, row["type"], row["vectors"], memory_gb=results["memory_gb"], params=params)
        measured = row["measured"]
        if "peak_rss" in measured:
            ratios = {"ram": measured["peak_rss"] / plan.build_ram_bytes, "disk": measured["disk"] / plan.disk_bytes,
                      "time": measured["seconds"] / plan.build_seconds}
            print(f"{row['type']:5} {row['vectors']:>9,} parts {plan.parts}: RAM planned {plan.build_ram_bytes / GIB:.2f} "
                  f"GB, measured {measured['peak_rss'] / GIB:.2f} GB; disk {plan.disk_bytes / GIB:.3f} / "
                  f"{measured['disk'] / GIB:.3f} GB; time {plan.build_seconds:.1f} / {measured['seconds']:.1f} s; "
                  f"ratios " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-gb", type=float, default=4.0)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--ivfpq-vectors", type=int, default=2_000_000)
    parser.add_argument("--flat-vectors", default="500000",
                        help="comma-separated sizes of flat builds (above the budget: sharded parts)")
    parser.add_argument("--hnsw-vectors", type=int, default=500_000)
    parser.add_argument("--nlist", type=int, default=1024, help="IVF cells of the IVF-PQ build")
    parser.add_argument("--train-size", type=int, default=40_960, help="IVF-PQ training sample")
    parser.add_argument("--types", default="flat,ivfpq,hnsw")
    parser.add_argument("--hnsw-timeout", type=float, default=1800.0, help="seconds before the HNSW build is stopped")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/odqa-bench-index"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "index_memory.json")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--replan", type=Path, default=None,
                        help="recompute the plans and ratios of an earlier --out file (same measured costs)")
    args = parser.parse_args()
    if args.replan is not None:
        replan(args.replan)
        return

    big = args.workdir / "emb-big"
    started = time.perf_counter()
    write_embeddings(big, args.ivfpq_vectors, args.dim, seed=0)
    flat_sizes = [int(v) for v in args.flat_vectors.split(",")]
    for size in flat_sizes:
        linked_prefix(big, args.workdir / f"emb-{size}", size)
    linked_prefix(big, args.workdir / "emb-hnsw", args.hnsw_vectors)
    print(f"synthetic embeddings written in {time.perf_counter() - started:.0f}s", flush=True)
    costs = calibrate(args.dim)
    print(f"calibration: {costs}", flush=True)
    results = {"memory_gb": args.memory_gb, "dim": args.dim, "costs": asdict(costs),
               "load_before": os.getloadavg(), "builds": [], "projection_21M": {}}
    jobs = {"flat": [(args.workdir / f"emb-{size}", size, IndexParams()) for size in flat_sizes],
            "ivfpq": [(big, args.ivfpq_vectors, IndexParams(nlist=args.nlist, train_size=args.train_size))],
            "hnsw": [(args.workdir / "emb-hnsw", args.hnsw_vectors, IndexParams())]}
    try:
        for kind, (emb, n, base) in [(t, job) for t in args.types.split(",") for job in jobs[t]]:
            plan = plan_index(costs, kind, n, memory_gb=args.memory_gb, params=base)  # type: ignore[arg-type]
            print(describe([plan], args.memory_gb, costs), flush=True)
            measured = run_build(emb, args.workdir / f"index-{kind}", kind, plan.params,
                                 args.hnsw_timeout if kind == "hnsw" else 7200)
            shutil.rmtree(args.workdir / f"index-{kind}", ignore_errors=True)
            row = {"type": kind, "vectors": n, "parts": plan.parts, "plan": plan.to_dict(), "measured": measured}
            if "peak_rss" in measured:
                row["ratios"] = {"ram": measured["peak_rss"] / plan.build_ram_bytes,
                                 "disk": measured["disk"] / plan.disk_bytes,
                                 "time": measured["seconds"] / plan.build_seconds}
            results["builds"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "plan"}), flush=True)
        for memory in (args.memory_gb, None):
            plans = [plan_index(costs, kind, 21_000_000, memory_gb=memory) for kind in INDEX_TYPES]
            text = describe(plans, memory, costs)
            print(text, flush=True)
            results["projection_21M"][str(memory)] = text
    finally:
        results["load_after"] = os.getloadavg()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
