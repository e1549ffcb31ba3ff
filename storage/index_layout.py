"""Where the workspace's indexes and their side files live, under `<workspace>/indexes/`.

    bm25/<passages version>/                       Lucene index of those passages
    dense/<model key>/model.json                   which model the key stands for (name, path)
    dense/<model key>/<passages version>/embeddings/  passage vectors (manifest + shards + keys)
    dense/<model key>/<passages version>/<type>/   FAISS index: flat, hnsw or ivfpq
    dense/<model key>/hybrid.json                  the model's tuned hybrid alpha
    negatives/<name>.parquet                       mined hard negatives (P1 / P2 of the rounds)
    releases/<release>.json, current.json          what is published (see storage.releases)

An index build is keyed by the passages table version it indexes: building for new passages
makes a new folder beside the old one, which keeps serving (and lends its vectors to the new
encoding) until no published release needs it. Builds are written through
`storage.atomic.building_directory`, so a folder under a version name is always complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .atomic import atomic_write_json, slug, write_parquet_atomic
from .choices import INDEX_TYPES, IndexType
from .workspace import Workspace

BM25_DIR = "bm25"
DENSE_DIR = "dense"
EMBEDDINGS_DIR = "embeddings"
MODEL_FILE = "model.json"
HYBRID_FILE = "hybrid.json"
NEGATIVES_DIR = "negatives"
BM25_METADATA = "odqa-index.json"  # what pipelines.retrieval.bm25 writes into a finished index
FAISS_METADATA = "index.json"  # what pipelines.dense.faiss_index writes into a finished index


@dataclass(frozen=True)
class DenseBuild:
    """One model's dense builds for one passages version: embeddings and FAISS indexes."""

    key: str
    passages_version: str
    folder: Path

    @property
    def embeddings(self) -> Path:
        return self.folder / EMBEDDINGS_DIR

    def index(self, index_type: IndexType) -> Path:
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index type must be one of {', '.join(INDEX_TYPES)}, got {index_type!r}")
        return self.folder / index_type

    def built_types(self) -> list[IndexType]:
        """The index types built completely in this folder."""
        return [t for t in INDEX_TYPES if (self.folder / t / FAISS_METADATA).is_file()]


@dataclass(frozen=True)
class IndexLayout:
    """The paths of one workspace's indexes (see the module doc)."""

    root: Path

    @classmethod
    def of(cls, ws: Workspace) -> IndexLayout:
        return cls(ws.indexes_dir)

    # --- BM25 ------------------------------------------------------------------------------
    def bm25(self, passages_version: str) -> Path:
        return self.root / BM25_DIR / passages_version

    def bm25_built(self, passages_version: str) -> bool:
        return (self.bm25(passages_version) / BM25_METADATA).is_file()

    # --- dense -----------------------------------------------------------------------------
    def dense_model_dir(self, key: str) -> Path:
        return self.root / DENSE_DIR / key

    def dense(self, key: str, passages_version: str) -> DenseBuild:
        return DenseBuild(key, passages_version, self.dense_model_dir(key) / passages_version)

    def record_model(self, key: str, name: str, path: str) -> None:
        """Remember which model a dense key stands for (releases name it, the service loads it)."""
        file = self.dense_model_dir(key) / MODEL_FILE
        wanted = {"model": name, "path": path}
        if not file.is_file() or json.loads(file.read_text(encoding="utf-8")) != wanted:
            atomic_write_json(file, wanted)

    def recorded_model(self, key: str) -> dict[str, str] | None:
        file = self.dense_model_dir(key) / MODEL_FILE
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None

    def dense_builds(self, passages_version: str) -> list[DenseBuild]:
        """Every model's builds for this passages version that hold at least one finished index."""
        base = self.root / DENSE_DIR
        if not base.is_dir():
            return []
        builds = [self.dense(d.name, passages_version) for d in sorted(base.iterdir()) if d.is_dir()]
        return [b for b in builds if b.built_types()]

    def other_builds(self, key: str, passages_version: str) -> list[DenseBuild]:
        """The model's builds for other passages versions, newest first."""
        folder = self.dense_model_dir(key)
        if not folder.is_dir():
            return []
        found = [d for d in folder.iterdir() if d.is_dir() and d.name != passages_version and not d.name.startswith(".")]
        return [self.dense(key, d.name) for d in sorted(found, key=lambda d: d.stat().st_mtime, reverse=True)]

    def other_embeddings(self, key: str, passages_version: str) -> list[Path]:
        """The model's embeddings of other passages versions, newest first: vectors a new
        encoding may reuse for passages that did not change."""
        return [b.embeddings for b in self.other_builds(key, passages_version) if b.embeddings.is_dir()]

    # --- hybrid alpha ------------------------------------------------------------------------
    def hybrid_file(self, key: str) -> Path:
        return self.dense_model_dir(key) / HYBRID_FILE

    def tuned_alpha(self, key: str) -> float | None:
        """The model's alpha chosen by `odqa tune-hybrid`, or None when it was never tuned."""
        path = self.hybrid_file(key)
        return float(json.loads(path.read_text(encoding="utf-8"))["alpha"]) if path.is_file() else None

    def write_hybrid_settings(self, key: str, settings: dict[str, Any]) -> None:
        if "alpha" not in settings:
            raise ValueError("hybrid settings need an alpha")
        atomic_write_json(self.hybrid_file(key), settings)

    # --- hard negatives --------------------------------------------------------------------
    def negatives_file(self, name: str) -> Path:
        return self.root / NEGATIVES_DIR / f"{slug(name, 'negatives')}.parquet"

    def read_negatives(self, name: str) -> pa.Table | None:
        path = self.negatives_file(name)
        return pq.read_table(path) if path.is_file() else None

    def write_negatives(self, name: str, table: pa.Table) -> Path:
        return write_parquet_atomic(table, self.negatives_file(name))
