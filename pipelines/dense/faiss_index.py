"""FAISS indexes over an embeddings directory, with staleness checks and sharded search.

Three index types, all answering maximum inner product search (MIPS) with inner-product scores:

* ``flat``: ``IndexFlatIP``, exact; the default, and the reference the others are measured by.
* ``hnsw``: ``IndexHNSWFlat`` (L2 only) with DPR's ``DenseHNSWFlatIndexer`` transform: every
  passage vector gets an extra coordinate ``sqrt(phi - ||x||^2)`` with ``phi`` the largest
  squared norm of the corpus, queries get 0, so ``||q' - x'||^2 = ||q||^2 + phi - 2 q.x`` and the
  L2 order is the inner-product order. Scores are mapped back to ``q.x``.
* ``ivfpq``: ``IndexIVFPQ`` with inner-product metric, trained on a random sample; product
  quantization keeps 21M passages in a few GB, for corpora whose float vectors do not fit.

An index is built in blocks read from the encoder's shards (plain file reads, one block held at
a time), so a build holds the index being built, one block and, for IVF-PQ, the training sample:
never the corpus. An index may itself be split into parts (one FAISS index per group of encoding
shards, ``shards_per_part``, or per ``max_part_vectors`` vectors, which is how the planner in
``index_planner`` keeps each part within a memory budget); a search asks every part and merges
the per-part top-k, which is exact because every part returns inner products. Parts larger than
RAM are searched memory-mapped (``open_faiss_index(mmap=True)``: flat codes and IVF lists stay on disk
and in the page cache, not in the process).
FAISS GPUs are used when faiss-gpu is installed and sees a GPU: k-means training of IVF
centroids and flat search (HNSW has no GPU implementation).

``index.json`` records the model and corpus fingerprints of the embeddings it was built from;
``open_faiss_index`` refuses an index whose fingerprints differ from the caller's with
``StaleIndexError``, so a retrained model or a re-ingested corpus never gets answers from an
index of another model or corpus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...storage.atomic import atomic_file, atomic_write, atomic_write_text, building_directory
from ...storage.choices import INDEX_TYPES, IndexType
from ..progress import progress as progress_bar
from .sharded_encoding import EncodedCorpus

META_NAME = "index.json"
IDS_NAME = "ids.parquet"
FORMAT_VERSION = 1
BLOCK_ROWS = 16_384  # vectors read and added per step of a build (48 MB at 768 dimensions)


class StaleIndexError(RuntimeError):
    """The index was built from embeddings of another model or corpus snapshot."""


@dataclass(frozen=True)
class IndexParams:
    """Build and search parameters. Defaults follow DPR (HNSW efSearch 128, efConstruction 200;
    DPR used M=512, which costs ~4 KB of links per vector; 64 keeps recall@10 high at 1/8 of it)."""

    hnsw_m: int = 64
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None  # IVF cells; None: about 4*sqrt(n), at least 39 training points each
    pq_m: int | None = None  # PQ sub-quantizers; None: dim/8 (or the largest divisor of dim below it)
    pq_nbits: int = 8
    nprobe: int = 32
    train_size: int = 262_144  # IVF-PQ training sample (vectors)
    shards_per_part: int | None = None  # None: one FAISS index for the whole corpus
    max_part_vectors: int | None = None  # parts of at most this many vectors (set by the planner)
    seed: int = 1234

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The parameters each index type reads (the others are stored but change nothing for it); the
# part layout (shards_per_part, max_part_vectors) applies to every type.
TYPE_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "hnsw": ("hnsw_m", "ef_construction", "ef_search"),
    "ivfpq": ("nlist", "pq_m", "pq_nbits", "nprobe", "train_size", "seed"),
}
PART_PARAMS = ("shards_per_part", "max_part_vectors")


def applicable_params(index_type: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters (as stored with an index) that an index of `index_type` uses and that are
    set: what a report shows, where a flat index has no HNSW or IVF-PQ settings."""
    names = (*TYPE_PARAMS[index_type], *PART_PARAMS)
    return {name: params[name] for name in names if params.get(name) is not None}


@dataclass
class IndexPart:
    file: str
    offset: int  # first global row (position in the encoded corpus) of this part
    count: int


@dataclass
class IndexMetadata:
    model_fingerprint: str
    corpus_fingerprint: str
    index_type: IndexType
    params: dict[str, Any]
    dim: int
    similarity: str
    num_vectors: int
    phi: float = 0.0  # HNSW only: max squared norm used by the inner-product transform
    parts: list[IndexPart] = field(default_factory=list)
    faiss_version: str = faiss.__version__
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> IndexMetadata:
        data = json.loads(text)
        data["parts"] = [IndexPart(**part) for part in data["parts"]]
        return cls(**data)


def read_index_metadata(index_dir: Path | str) -> IndexMetadata | None:
    path = Path(index_dir) / META_NAME
    if not path.exists():
        return None
    try:
        return IndexMetadata.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a valid index metadata file ({exc})") from exc


def gpu_count() -> int:
    """GPUs FAISS can use: 0 with faiss-cpu, or without a visible GPU."""
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _auto_nlist(n: int) -> int:
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _auto_pq_m(dim: int) -> int:
    target = max(1, dim // 8)
    return next(m for m in range(target, 0, -1) if dim % m == 0)


def _new_index(index_type: IndexType, dim: int, params: IndexParams, num_vectors: int) -> faiss.Index:
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim + 1, params.hnsw_m)
        index.hnsw.efConstruction = params.ef_construction
        return index
    nlist = params.nlist or _auto_nlist(num_vectors)
    pq_m = params.pq_m or _auto_pq_m(dim)
    if dim % pq_m:
        raise ValueError(f"pq_m={pq_m} must divide the embedding dimension {dim}")
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, params.pq_nbits, faiss.METRIC_INNER_PRODUCT)
    index.own_fields = True
    quantizer.this.disown()
    return index


def _augment(vectors: np.ndarray, phi: float) -> np.ndarray:
    """DPR's MIPS-to-L2 transform of passage vectors: append sqrt(phi - ||x||^2)."""
    norms = np.einsum("ij,ij->i", vectors, vectors)
    extra = np.sqrt(np.maximum(phi - norms, 0.0)).astype(np.float32)
    return np.hstack([vectors, extra[:, None]])


def part_bounds(shard_counts: Sequence[int], shards_per_part: int | None, max_part_vectors: int | None
                ) -> list[tuple[int, int]]:
    """Global row ranges ``[start, stop)`` of the index parts, in corpus order."""
    if shards_per_part is not None and max_part_vectors is not None:
        raise ValueError("give shards_per_part or max_part_vectors, not both")
    total = int(sum(shard_counts))
    if max_part_vectors is not None:
        if max_part_vectors < 1:
            raise ValueError(f"max_part_vectors must be positive, got {max_part_vectors}")
        return [(lo, min(lo + max_part_vectors, total)) for lo in range(0, total, max_part_vectors)] or [(0, 0)]
    group = shards_per_part or max(1, len(shard_counts))
    ends = np.cumsum([0, *shard_counts])
    return [(int(ends[i]), int(ends[min(i + group, len(shard_counts))])) for i in range(0, len(shard_counts), group)] \
        or [(0, 0)]


def _train_ivfpq(index: faiss.IndexIVFPQ, corpus: EncodedCorpus, params: IndexParams, use_gpu: bool) -> None:
    n = len(corpus)
    needed = max(index.nlist, 2 ** params.pq_nbits)
    if n < needed:
        raise ValueError(f"IVF-PQ needs at least {needed} vectors to train (nlist={index.nlist}, "
                         f"pq_nbits={params.pq_nbits}); the corpus has {n}: use a flat index")
    rng = np.random.default_rng(params.seed)
    rows = np.sort(rng.choice(n, size=min(n, params.train_size), replace=False))
    sample = corpus.vectors(rows)
    if use_gpu:
        # The faiss recipe for GPU k-means: only the coarse clustering runs on the GPUs.
        index.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatL2(index.d))
    index.train(sample)


def _write_faiss(index: faiss.Index, path: Path) -> None:
    atomic_write(path, lambda handle: faiss.write_index(index, faiss.PyCallbackIOWriter(handle.write)))


def _max_sq_norm(corpus: EncodedCorpus, block_rows: int) -> float:
    phi = 0.0
    for _, block in corpus.iter_blocks(block_rows):
        if len(block):
            phi = max(phi, float(np.einsum("ij,ij->i", block, block).max()))
    return phi


def _flat_part(corpus: EncodedCorpus, lo: int, hi: int, block_rows: int, bar) -> faiss.IndexFlatIP:
    """A flat index of rows ``[lo, hi)`` with its storage sized once and filled block by block.

    ``IndexFlat.add`` grows its storage vector by doubling, which copies it and briefly holds
    twice the index; sizing it up front keeps the peak at one index plus one block.
    """
    dim = corpus.manifest.dim
    index = faiss.IndexFlatIP(dim)
    index.codes.resize((hi - lo) * dim * 4)
    view = faiss.rev_swig_ptr(index.codes.data(), (hi - lo) * dim * 4).view(np.float32).reshape(hi - lo, dim)
    for first, block in corpus.iter_blocks(block_rows, lo, hi):
        view[first - lo:first - lo + len(block)] = block
        bar.update(len(block))
    index.ntotal = hi - lo
    return index


def _write_ids(corpus: EncodedCorpus, path: Path) -> None:
    """All passage ids in row order, written shard by shard (never all held at once)."""
    with atomic_file(path) as handle, pq.ParquetWriter(handle, pa.schema([("passage_id", pa.string())])) as writer:
        for info in corpus.manifest.shards:
            ids = pq.read_table(corpus.dir / info.ids_file).column("passage_id").cast(pa.string())
            writer.write_table(pa.table({"passage_id": ids}))


def build_faiss_index(
    embeddings_dir: Path | str,
    index_dir: Path | str,
    *,
    index_type: IndexType = "flat",
    params: IndexParams | None = None,
    use_gpu: bool | None = None,
    progress: bool | None = None,
    block_rows: int = BLOCK_ROWS,
) -> IndexMetadata:
    """Build a FAISS index of ``index_type`` from a complete embeddings directory.

    A no-op when ``index_dir`` already holds an index of the same type and parameters for the
    same model and corpus. The new index is assembled in a sibling temporary directory and moved
    into place at the end, so a killed build leaves the previous index (or nothing) in place.
    Memory: one part being built (see ``index_planner`` for its size), one block of
    ``block_rows`` vectors and, for IVF-PQ, the training sample (``params.train_size``).
    """
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index type must be one of {INDEX_TYPES}, got {index_type!r}")
    params = params or IndexParams()
    corpus = EncodedCorpus(embeddings_dir)
    manifest = corpus.manifest
    index_dir = Path(index_dir)
    existing = read_index_metadata(index_dir)
    if (existing is not None and existing.model_fingerprint == manifest.model_fingerprint
            and existing.corpus_fingerprint == manifest.corpus_fingerprint
            and existing.index_type == index_type and existing.params == params.to_dict()
            and existing.num_vectors == len(corpus)):
        return existing
    use_gpu = gpu_count() > 0 if use_gpu is None else use_gpu
    meta = IndexMetadata(
        model_fingerprint=manifest.model_fingerprint, corpus_fingerprint=manifest.corpus_fingerprint,
        index_type=index_type, params=params.to_dict(), dim=manifest.dim, similarity=manifest.similarity,
        num_vectors=len(corpus),
    )
    with building_directory(index_dir) as building:
        template = _new_index(index_type, manifest.dim, params, len(corpus))
        if index_type == "ivfpq":
            _train_ivfpq(template, corpus, params, use_gpu)
        if index_type == "hnsw":
            meta.phi = _max_sq_norm(corpus, block_rows)
        bounds = part_bounds([s.count for s in manifest.shards], params.shards_per_part, params.max_part_vectors)
        with progress_bar(len(corpus), f"index {index_type}", "vec", enabled=progress is not False) as bar:
            for part_index, (lo, hi) in enumerate(bounds):
                if index_type == "flat":
                    current = _flat_part(corpus, lo, hi, block_rows, bar)
                else:
                    current = faiss.clone_index(template)
                    for _, block in corpus.iter_blocks(block_rows, lo, hi):
                        current.add(_augment(block, meta.phi) if index_type == "hnsw" else block)
                        bar.update(len(block))
                name = f"part-{part_index:03d}.faiss"
                _write_faiss(current, building / name)
                del current
                meta.parts.append(IndexPart(name, lo, hi - lo))
        _write_ids(corpus, building / IDS_NAME)
        atomic_write_text(building / META_NAME, meta.to_json())
    return meta


class DenseIndex:
    """A loaded index: search query vectors, get inner-product scores and passage ids.

    Passage ids stay one Arrow array in index-row order; results map rows to ids with Arrow's
    ``take`` (a vectorised gather of string offsets and bytes), so a search never touches a Python
    string per id. ``search_run`` hands back the run table (question_id, passage_id, rank, score)
    that retrieval, mining and hybrid fusion consume as Arrow columns.
    """

    def __init__(self, index_dir: Path, meta: IndexMetadata, parts: list[faiss.Index], ids: pa.Array) -> None:
        self.dir = index_dir
        self.meta = meta
        self.parts = parts
        self.ids = ids if ids.type == pa.string() else ids.cast(pa.string())

    @property
    def num_vectors(self) -> int:
        return self.meta.num_vectors

    def _check_queries(self, queries: np.ndarray) -> np.ndarray:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.meta.dim:
            raise ValueError(f"queries must have shape (n, {self.meta.dim}), got {queries.shape}")
        return queries

    def search_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (n, k): inner products, best first, and global corpus rows.

        Missing results (k larger than what an approximate index found) are row -1, score -inf.
        """
        queries = self._check_queries(queries)
        hnsw = self.meta.index_type == "hnsw"
        if hnsw:
            query_norms = np.einsum("ij,ij->i", queries, queries)
            queries = np.hstack([queries, np.zeros((len(queries), 1), dtype=np.float32)])
        all_scores, all_rows = [], []
        for part, info in zip(self.parts, self.meta.parts, strict=True):
            scores, labels = part.search(queries, k)
            if hnsw:  # ||q'-x'||^2 = ||q||^2 + phi - 2 q.x
                scores = (query_norms[:, None] + self.meta.phi - scores) * 0.5
            missing = labels < 0
            if missing.any():
                scores = np.where(missing, -np.inf, scores).astype(np.float32)
                labels = np.where(missing, -1, labels + info.offset)
            elif info.offset:
                labels = labels + info.offset
            all_scores.append(scores)
            all_rows.append(labels)
        if len(all_scores) == 1:
            return all_scores[0], all_rows[0]
        scores, rows = np.hstack(all_scores), np.hstack(all_rows)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, top, 1), np.take_along_axis(rows, top, 1)

    def take_ids(self, rows: np.ndarray) -> pa.Array:
        """Passage ids of global rows (flattened, row-major) as an Arrow string array; null for -1."""
        flat = np.asarray(rows, dtype=np.int64).reshape(-1)
        missing = flat < 0
        return self.ids.take(pa.array(flat, mask=missing) if missing.any() else pa.array(flat))

    def search_run(self, queries: np.ndarray, k: int, question_ids: pa.Array | pa.ChunkedArray | Sequence[str]
                   ) -> pa.Table:
        """Top-k of each query as a run table: question_id, passage_id, rank (1-based), score.

        ``question_ids`` names the queries in order. Rows an approximate index could not fill
        (fewer than k found) are left out, so ranks run 1..found for each question. FAISS is
        asked for at most as many rows as the index holds (the rows past them would be left out
        anyway): it allocates n x k scores and labels, 1.2 GB per question for k = 10**8.
        """
        k = max(1, min(int(k), self.num_vectors))
        if len(question_ids) != len(queries):
            raise ValueError(f"got {len(question_ids)} question ids for {len(queries)} query vectors")
        if not isinstance(question_ids, pa.Array | pa.ChunkedArray):
            question_ids = pa.array(question_ids, pa.string())
        scores, rows = self.search_rows(queries, k)
        width = rows.shape[1]
        flat_rows, flat_scores = rows.reshape(-1), scores.reshape(-1)
        ranks = np.tile(np.arange(1, width + 1, dtype=np.int32), len(rows))
        query_rows = np.repeat(np.arange(len(rows), dtype=np.int64), width)
        found = flat_rows >= 0
        if not found.all():
            flat_rows, flat_scores, ranks, query_rows = (flat_rows[found], flat_scores[found], ranks[found],
                                                         query_rows[found])
        return pa.table({
            "question_id": question_ids.take(pa.array(query_rows)),
            "passage_id": self.ids.take(pa.array(flat_rows)),
            "rank": pa.array(ranks, pa.int32()),
            "score": pa.array(flat_scores, pa.float32()),
        })

    def ids_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Passage ids of global rows as an object array of the same shape (None for row -1).

        For callers that want Python strings per result (training loops, printing); run tables
        come from ``search_run`` without building them.
        """
        return self.take_ids(rows).to_numpy(zero_copy_only=False).reshape(np.shape(rows))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, passage_ids), each (n, k), best first; ids as Python strings (see ``search_run``)."""
        scores, rows = self.search_rows(queries, k)
        return scores, self.ids_of_rows(rows)


def _stale_message(index_dir: Path, meta: IndexMetadata, model_fp: str | None, corpus_fp: str | None) -> str | None:
    problems = []
    if model_fp is not None and meta.model_fingerprint != model_fp:
        problems.append(f"model {meta.model_fingerprint[:12]} (expected {model_fp[:12]})")
    if corpus_fp is not None and meta.corpus_fingerprint != corpus_fp:
        problems.append(f"corpus snapshot {meta.corpus_fingerprint[:12]} (expected {corpus_fp[:12]})")
    if not problems:
        return None
    return (f"stale index {index_dir}: it was built for {' and '.join(problems)}; re-encode the corpus "
            "and rebuild the index (odqa encode, odqa index build) for the current model and corpus")


def open_faiss_index(
    index_dir: Path | str,
    expected_model_fp: str | None = None,
    expected_corpus_fp: str | None = None,
    *,
    use_gpu: bool | None = None,
    mmap: bool | None = False,
    ef_search: int | None = None,
    nprobe: int | None = None,
) -> DenseIndex:
    """Load an index for searching; ``StaleIndexError`` when the fingerprints differ.

    ``mmap`` maps the index files instead of reading them (IVF lists and flat / HNSW vectors stay
    on disk and in the page cache, outside the process's memory: the way to search parts larger
    than RAM); ``mmap=None`` maps exactly the indexes a memory budget split into parts
    (``max_part_vectors``). ``ef_search`` / ``nprobe`` override the stored search parameters.
    """
    index_dir = Path(index_dir)
    meta = read_index_metadata(index_dir)
    if meta is None:
        raise FileNotFoundError(f"{index_dir}: no {META_NAME}; build the index first (odqa index build)")
    message = _stale_message(index_dir, meta, expected_model_fp, expected_corpus_fp)
    if message:
        raise StaleIndexError(message)
    use_gpu = gpu_count() > 0 if use_gpu is None else use_gpu
    if mmap is None:
        mmap = meta.params.get("max_part_vectors") is not None
    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0
    parts = []
    for info in meta.parts:
        index = faiss.read_index(str(index_dir / info.file), flags)
        if meta.index_type == "hnsw":
            index.hnsw.efSearch = ef_search or meta.params["ef_search"]
        elif meta.index_type == "ivfpq":
            faiss.extract_index_ivf(index).nprobe = nprobe or meta.params["nprobe"]
        if use_gpu and meta.index_type == "flat":
            index = faiss.index_cpu_to_all_gpus(index)
        parts.append(index)
    ids = pq.read_table(index_dir / IDS_NAME).column("passage_id").combine_chunks()
    if len(ids) != meta.num_vectors:
        raise ValueError(f"{index_dir / IDS_NAME}: {len(ids)} ids for {meta.num_vectors} vectors")
    return DenseIndex(index_dir, meta, parts, ids)
