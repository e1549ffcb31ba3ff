"""Plan a FAISS build before running it: the RAM, disk and time each index type needs here.

Why: a flat index of 21M x 768 float vectors needs ~65 GB, DPR's HNSW ~160 GB and hours; users
find out when the build is killed. The planner answers first, from two sources:

* formulas for memory and disk (bytes per vector of each index type, the training sample, one
  block being read, and the resident size of a build process before any vector);
* per-vector costs measured on this machine by ``calibrate`` (a few seconds on synthetic
  vectors of the target dimension: flat adds, HNSW inserts at three graph sizes fitted as
  ``a + b ln n`` seconds per vector, the k-means and PQ-encoding flop rates of IVF-PQ, the write
  throughput, the resident size of a bare build process). ``load_or_calibrate`` caches them in
  a JSON file, keyed by dimension, HNSW settings, thread count and FAISS version.

With a memory budget (``memory_gb``) the plan keeps every part of the index within it: when the
whole index does not fit, it is split into parts of at most ``max_part_vectors`` vectors (built
one at a time, searched memory-mapped with a top-k merge); when even a minimal part, or the
IVF-PQ training sample, cannot fit, the plan is refused with ``PlanRefused`` naming the smallest
budget that works.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa

from ...storage.atomic import atomic_write_json
from ...storage.choices import INDEX_TYPES, IndexType
from .faiss_index import (
    BLOCK_ROWS,
    IndexParams,
    _auto_nlist,
    _auto_pq_m,
    build_faiss_index,
)

GIB = 1024**3
MIN_PART_VECTORS = 10_000  # below this, parts cost more in per-part overhead than they save
KMEANS_ITERATIONS = 25  # faiss's default niter for IVF and PQ training
KMEANS_MAX_POINTS_PER_CENTROID = 256  # faiss subsamples k-means input above this
PQ_CENTROIDS = 256  # 2 ** pq_nbits for the default 8 bits
ID_BYTES = 8  # IVF stores one int64 label per vector
KMEANS_BLOCK_BYTES = 64 * 1024**2  # faiss assigns in 4096 x 1024 distance blocks (and a few copies)
CALIBRATION_VERSION = 6


class PlanRefused(ValueError):
    """The memory budget cannot hold even a minimal build of this index type."""


@dataclass(frozen=True)
class CostModel:
    """Per-vector costs of FAISS builds measured on this machine (see ``calibrate``)."""

    dim: int
    hnsw_m: int
    ef_construction: int
    threads: int
    base_rss_bytes: int  # peak RSS of a process that imported numpy, pyarrow and faiss
    flat_seconds_per_vector: float  # a whole flat build (read shards, fill, write index and ids)
    hnsw_seconds_a: float  # HNSW insert: a + b * ln(n) seconds per vector, n the graph size
    hnsw_seconds_b: float
    hnsw_bytes_per_vector: float  # HNSW (dim + 1 floats + links) in memory and on disk
    kmeans_flops: float  # effective flop/s of the IVF centroids' k-means (a matrix product)
    pq_train_seconds_per_point: float  # PQ codebook training, per training point and sub-quantizer
    assign_flops: float  # effective flop/s of assigning vectors to IVF centroids
    pq_encode_seconds_per_vector: float
    write_bytes_per_second: float
    faiss_version: str = faiss.__version__
    measured_at: str = ""
    version: int = CALIBRATION_VERSION

    def key(self) -> tuple:
        return (self.version, self.dim, self.hnsw_m, self.ef_construction, self.threads, self.faiss_version)


@dataclass
class TypePlan:
    """The plan of one index type: layout, estimates, and the parameters to build it with."""

    index_type: IndexType
    num_vectors: int
    parts: int
    max_part_vectors: int | None
    build_ram_bytes: int
    disk_bytes: int
    build_seconds: float
    search_ram_bytes: int  # loaded in memory; above the budget the parts are searched memory-mapped
    search_mmap: bool
    params: IndexParams
    detail: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["params"] = self.params.to_dict()
        return data


def _fmt_bytes(value: float) -> str:
    for unit, size in (("TB", 1024**4), ("GB", GIB), ("MB", 1024**2)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value / 1024:.0f} KB"


def _fmt_seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def _effective_train(params: IndexParams, num_vectors: int, nlist: int) -> int:
    """Vectors k-means really iterates over: faiss subsamples to 256 per centroid."""
    return min(num_vectors, params.train_size, KMEANS_MAX_POINTS_PER_CENTROID * nlist)


def grown_peak(n: int, block: int) -> int:
    """Peak elements held while a vector grows to ``n`` by ``block``-sized appends.

    faiss's storage and link arrays are std::vectors: when an append exceeds the capacity the
    capacity doubles and the old contents are copied, so for a moment both copies exist. The
    peak is the larger of the final size and twice the size at the last copy.
    """
    size = capacity = peak = 0
    while size < n:
        need = min(n, size + block)
        if need > capacity:
            peak = max(peak, 2 * size)
            capacity = max(need, 2 * capacity)
        size = need
        peak = max(peak, size)
    return peak


def _hnsw_seconds(costs: CostModel, part: int) -> float:
    return max(costs.hnsw_seconds_a + costs.hnsw_seconds_b * math.log(max(part, 2)), 0.0) * part


def _estimate(costs: CostModel, index_type: IndexType, n: int, params: IndexParams, part: int
              ) -> tuple[int, int, float, dict[str, Any]]:
    """(build RAM, disk, build seconds, detail) of ``n`` vectors in parts of ``part``."""
    d = costs.dim
    parts = max(1, math.ceil(n / part)) if n else 1
    block = min(BLOCK_ROWS, max(part, 1))
    if index_type == "flat":
        ram = costs.base_rss_bytes + part * d * 4 + 2 * block * d * 4
        disk = n * d * 4
        seconds = n * costs.flat_seconds_per_vector  # measured on a whole build, writing included
        return ram, disk, seconds, {}
    if index_type == "hnsw":
        per = costs.hnsw_bytes_per_vector * (params.hnsw_m / costs.hnsw_m if costs.hnsw_m else 1.0)
        ram = costs.base_rss_bytes + int(grown_peak(part, block) * per) + 2 * block * (d + 1) * 4
        disk = int(n * per)
        full, rest = divmod(n, part)
        seconds = full * _hnsw_seconds(costs, part) + _hnsw_seconds(costs, rest) + disk / costs.write_bytes_per_second
        return ram, disk, seconds, {"bytes_per_vector": round(per, 1)}
    nlist = params.nlist or _auto_nlist(n)
    pq_m = params.pq_m or _auto_pq_m(d)
    sample = min(n, params.train_size)
    trained = _effective_train(params, n, nlist)
    pq_points = min(trained, KMEANS_MAX_POINTS_PER_CENTROID * PQ_CENTROIDS)
    train_seconds = (KMEANS_ITERATIONS * 2.0 * d * trained * nlist / costs.kmeans_flops
                     + pq_points * pq_m * costs.pq_train_seconds_per_point)
    add_seconds = n * (2.0 * d * nlist / costs.assign_flops + costs.pq_encode_seconds_per_vector)
    per_vector = pq_m + ID_BYTES
    static = nlist * d * 4 + PQ_CENTROIDS * d * 4
    # The sample and k-means' distance buffers are freed before the first add.
    train_ram = sample * d * 4 + trained * 4 * 2 + KMEANS_BLOCK_BYTES
    add_ram = int(part * per_vector * 1.1) + 4 * block * d * 4  # lists grow by doubling; residuals
    ram = costs.base_rss_bytes + static + max(train_ram, add_ram)
    disk = n * per_vector + parts * static
    seconds = train_seconds + add_seconds + disk / costs.write_bytes_per_second
    return ram, disk, seconds, {"nlist": nlist, "pq_m": pq_m, "train_sample": sample,
                                "train_seconds": round(train_seconds, 1)}


def plan_index(
    costs: CostModel,
    index_type: IndexType,
    num_vectors: int,
    *,
    memory_gb: float | None = None,
    params: IndexParams | None = None,
) -> TypePlan:
    """The plan for one index type; with ``memory_gb``, parts sized so a build fits it.

    A plan that cannot fit is returned with ``refused`` set (``require`` raises it).
    """
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type must be one of {INDEX_TYPES}, got {index_type!r}")
    if num_vectors < 0:
        raise ValueError(f"num_vectors must be >= 0, got {num_vectors}")
    params = params or IndexParams()
    if params.shards_per_part is not None:
        raise ValueError("plan with max_part_vectors, not shards_per_part")
    n = num_vectors
    part = params.max_part_vectors or max(n, 1)
    refused = None
    if memory_gb is not None and params.max_part_vectors is None:
        budget = int(memory_gb * GIB)
        if index_type == "ivfpq":
            nlist = params.nlist or _auto_nlist(n)
            floor = max(nlist, PQ_CENTROIDS)
            ram, *_ = _estimate(costs, index_type, n, params, part)
            while ram > budget and params.train_size > floor:
                params = replace(params, train_size=max(floor, params.train_size // 2))
                ram, *_ = _estimate(costs, index_type, n, params, part)
        ram, *_ = _estimate(costs, index_type, n, params, part)
        if ram > budget:
            low, high = 0, part  # the largest part that fits (RAM grows with the part size)
            while low < high:
                middle = (low + high + 1) // 2
                if _estimate(costs, index_type, n, params, middle)[0] <= budget:
                    low = middle
                else:
                    high = middle - 1
            if low < min(MIN_PART_VECTORS, n):
                need = _estimate(costs, index_type, n, params, min(MIN_PART_VECTORS, n))[0]
                refused = (f"{index_type}: a {memory_gb:g} GB budget cannot hold a build (even parts of "
                           f"{min(MIN_PART_VECTORS, n):,} vectors need {_fmt_bytes(need)}); raise --memory-gb")
            else:
                parts = math.ceil(n / low)
                part = math.ceil(n / parts)  # even parts
                params = replace(params, max_part_vectors=part)
    ram, disk, seconds, detail = _estimate(costs, index_type, n, params, part)
    parts = max(1, math.ceil(n / part)) if n else 1
    search_ram = costs.base_rss_bytes + disk
    mmap = memory_gb is not None and search_ram > memory_gb * GIB
    return TypePlan(index_type, n, parts, params.max_part_vectors, int(ram), int(disk), seconds, int(search_ram),
                    mmap, params, detail, refused)


def require(plan: TypePlan) -> TypePlan:
    """The plan, or ``PlanRefused`` when the budget cannot hold it."""
    if plan.refused:
        raise PlanRefused(plan.refused)
    return plan


def describe(plans: list[TypePlan], memory_gb: float | None, costs: CostModel) -> str:
    """A table of the plans, as ``odqa index plan`` prints it and builds log it."""
    head = (f"index plan: {plans[0].num_vectors:,} vectors x {costs.dim} dims, memory budget "
            f"{f'{memory_gb:g} GB' if memory_gb is not None else 'none'}, {costs.threads} threads "
            f"(costs measured {costs.measured_at})")
    rows = [("type", "layout", "build RAM", "disk", "build time", "search")]
    for plan in plans:
        if plan.refused:
            rows.append((plan.index_type, "refused", "-", "-", "-", plan.refused))
            continue
        layout = "1 part" if plan.parts == 1 else f"{plan.parts} parts x {plan.max_part_vectors:,}"
        search = f"mmap ({_fmt_bytes(plan.disk_bytes)} on disk)" if plan.search_mmap else \
            f"{_fmt_bytes(plan.search_ram_bytes)} in RAM"
        rows.append((plan.index_type, layout, _fmt_bytes(plan.build_ram_bytes), _fmt_bytes(plan.disk_bytes),
                     _fmt_seconds(plan.build_seconds), search))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [head] + ["  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
                      for row in rows]
    return "\n".join(lines)


# --- calibration ------------------------------------------------------------------------------


def synthetic_vectors(rng: np.random.Generator, n: int, dim: int, topics: int = 4096) -> np.ndarray:
    """Embedding-like unit vectors: topical clusters plus noise (pure Gaussian vectors are the
    worst case of graph indexes and would overstate HNSW costs several times)."""
    centers = np.random.default_rng(12345).standard_normal((topics, dim), dtype=np.float32)
    x = centers[rng.integers(0, topics, n)] + 0.8 * rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _bare_process_rss() -> int:
    """Peak RSS of a fresh interpreter that imported what a build imports (bytes)."""
    code = ("import numpy, pyarrow.parquet, faiss; from odqa.pipelines.dense.index_planner import peak_rss_bytes; "
            "print(peak_rss_bytes())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120,
                         env=env)
    return int(out.stdout.strip().splitlines()[-1])


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _calibration_embeddings(folder: Path, vectors: np.ndarray) -> Path:
    """``vectors`` as an embeddings directory of two shards, as the encoder writes them."""
    from .sharded_encoding import EncodingManifest, write_manifest, write_shard

    folder.mkdir(parents=True)
    half = len(vectors) // 2
    manifest = EncodingManifest("calibration", "calibration", half, vectors.shape[1], "float32", "dot")
    for index, start in enumerate((0, half)):
        rows = vectors[start:start + half] if index == 0 else vectors[half:]
        ids = pa.array([f"{start + i}_0" for i in range(len(rows))])
        manifest.shards.append(write_shard(folder, index, ids, rows))
    manifest.complete, manifest.num_passages = True, len(vectors)
    write_manifest(folder, manifest)
    for path in folder.iterdir():  # read back from disk, as a corpus larger than the page cache is
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return folder


def calibrate(dim: int, hnsw_m: int = 64, ef_construction: int = 200, seed: int = 0) -> CostModel:
    """Measure this machine's per-vector build costs on synthetic vectors (a few seconds)."""
    vectors = synthetic_vectors(np.random.default_rng(seed), 24_000, dim)
    with tempfile.TemporaryDirectory(prefix="odqa-calibrate-") as tmp:
        # A real flat build over real shards, read from disk: reads, ids, index file, renames.
        embeddings = _calibration_embeddings(Path(tmp) / "embeddings", vectors)
        flat_seconds = _timed(lambda: build_faiss_index(embeddings, Path(tmp) / "flat", progress=False,
                                                  use_gpu=False)) / len(vectors)
        flat = faiss.read_index(str(Path(tmp) / "flat" / "part-000.faiss"))
        out = Path(tmp) / "flat.faiss"
        write_seconds = _timed(lambda: faiss.write_index(flat, str(out)))
        write_rate = out.stat().st_size / max(write_seconds, 1e-6)
        sizes, per_vector = (1_000, 3_000, 9_000), []
        hnsw_bytes = 0.0
        for n in sizes:
            index = faiss.IndexHNSWFlat(dim + 1, hnsw_m)
            index.hnsw.efConstruction = ef_construction
            augmented = np.hstack([vectors[:n], np.zeros((n, 1), np.float32)])
            per_vector.append(_timed(lambda index=index, augmented=augmented: index.add(augmented)) / n)
            hnsw_bytes = len(faiss.serialize_index(index)) / n
        slope, intercept = np.polyfit(np.log(sizes), per_vector, 1)
        if slope < 0:  # timing noise on a busy machine: fall back to a constant cost per vector
            slope, intercept = 0.0, float(np.mean(per_vector))
        nlist, iterations, points = 512, 10, vectors[:20_000]
        kmeans = faiss.Kmeans(dim, nlist, niter=iterations, max_points_per_centroid=10**6, seed=seed)
        kmeans_seconds = _timed(lambda: kmeans.train(points))
        pq_m = _auto_pq_m(dim)
        probe_m = min(4, pq_m)  # a few sub-quantizers of the real width: cost is linear in their number
        probe = faiss.ProductQuantizer(probe_m * (dim // pq_m), probe_m, 8)
        pq_points = np.ascontiguousarray(vectors[:PQ_CENTROIDS * 40, : probe.d])
        pq_seconds = _timed(lambda: probe.train(pq_points))
        assign_seconds = _timed(lambda: kmeans.index.search(vectors, 1))
        probe_vectors = np.ascontiguousarray(vectors[:, : probe.d])
        encode_seconds = _timed(lambda: probe.compute_codes(probe_vectors)) * pq_m / probe_m
    return CostModel(
        dim=dim, hnsw_m=hnsw_m, ef_construction=ef_construction, threads=faiss.omp_get_max_threads(),
        base_rss_bytes=_bare_process_rss(), flat_seconds_per_vector=flat_seconds,
        hnsw_seconds_a=float(intercept), hnsw_seconds_b=float(slope), hnsw_bytes_per_vector=hnsw_bytes,
        kmeans_flops=iterations * 2.0 * dim * len(points) * nlist / kmeans_seconds,
        pq_train_seconds_per_point=pq_seconds / len(pq_points) / probe_m,
        assign_flops=2.0 * dim * len(vectors) * nlist / assign_seconds,
        pq_encode_seconds_per_vector=encode_seconds / len(vectors),
        write_bytes_per_second=write_rate, measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def default_cache() -> Path:
    """Where measured costs are kept: ``$ODQA_INDEX_COSTS``, else the user's cache folder.

    Per machine rather than per workspace: the costs describe the CPU, not the data.
    """
    explicit = os.environ.get("ODQA_INDEX_COSTS")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "odqa" / "index-costs.json"


def plan_all(costs: CostModel, num_vectors: int, memory_gb: float | None, params: IndexParams | None = None,
             types: tuple[IndexType, ...] = INDEX_TYPES) -> list[TypePlan]:
    """One plan per index type (``shards_per_part`` is ignored: the planner sizes parts itself)."""
    params = replace(params or IndexParams(), shards_per_part=None)
    return [plan_index(costs, kind, num_vectors, memory_gb=memory_gb, params=params) for kind in types]


def load_or_calibrate(cache: Path | str | None, dim: int, hnsw_m: int = 64, ef_construction: int = 200
                      ) -> CostModel:
    """Costs from ``cache`` when it holds a calibration for these settings, else measured and
    stored there (atomically); ``cache=None`` always measures."""
    wanted = (CALIBRATION_VERSION, dim, hnsw_m, ef_construction, faiss.omp_get_max_threads(), faiss.__version__)
    entries: dict[str, Any] = {}
    path = Path(cache) if cache is not None else None
    if path is not None and path.is_file():
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            entries = {}  # a damaged cache is measured again, not trusted
        for entry in entries.values():
            try:
                costs = CostModel(**entry)
            except TypeError:
                continue
            if costs.key() == wanted:
                return costs
    costs = calibrate(dim, hnsw_m, ef_construction)
    if path is not None:
        entries["-".join(map(str, wanted))] = asdict(costs)
        atomic_write_json(path, entries)
    return costs


def peak_rss_bytes() -> int:
    """Peak RSS of this process so far, in bytes.

    ``VmHWM`` of /proc/self/status, not ``getrusage``: Linux carries ``ru_maxrss`` over
    ``execve``, so a subprocess would report its parent's peak when that was higher.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def plan_embeddings(embeddings_dir: Path | str, index_type: IndexType, params: IndexParams | None = None,
                    memory_gb: float | None = None, cache: Path | str | None = None) -> tuple[TypePlan, str]:
    """The plan of building ``index_type`` over an embeddings directory, and its printed form.

    What every build runs first: refuses (``PlanRefused``) when the budget is too small, else
    returns the parameters to build with (parts sized to the budget). Explicit
    ``shards_per_part`` is kept as given (the plan is then shown for one part per group).
    """
    from .sharded_encoding import read_manifest

    manifest = read_manifest(embeddings_dir)
    if manifest is None:
        raise FileNotFoundError(f"{embeddings_dir}: no embeddings manifest; encode the passages first")
    params = params or IndexParams()
    costs = load_or_calibrate(cache if cache is not None else default_cache(), manifest.dim, params.hnsw_m,
                              params.ef_construction)
    n = sum(s.count for s in manifest.shards)
    if params.shards_per_part is not None:
        plan = plan_index(costs, index_type, n, params=replace(params, shards_per_part=None))
        plan.params = params
    else:
        plan = require(plan_index(costs, index_type, n, memory_gb=memory_gb, params=params))
    return plan, describe([plan], memory_gb, costs)
