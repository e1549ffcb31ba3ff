"""FAISS indexes over embedding shards: exactness, approximate recall, staleness, sharded merge."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from odqa.pipelines.dense.faiss_index import IndexParams, StaleIndexError, build_faiss_index, open_faiss_index
from odqa.pipelines.dense.sharded_encoding import EncodingManifest, write_manifest, write_shard

N, DIM, SHARD, NQ = 4000, 64, 1000, 150


def clustered_vectors(rng: np.random.Generator, n: int, centers: np.ndarray, noise: float) -> np.ndarray:
    """Embedding-like vectors: topical clusters, norms varying by +-10% (a dot-product model)."""
    x = centers[rng.integers(0, len(centers), n)] + noise * rng.standard_normal((n, centers.shape[1]))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.uniform(0.9, 1.1, (n, 1))).astype(np.float32)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((40, DIM))
    corpus = clustered_vectors(rng, N, centers, 0.6)
    queries = clustered_vectors(rng, NQ, centers, 0.8)
    emb = tmp_path_factory.mktemp("emb")
    manifest = EncodingManifest("model-a", "corpus-a", SHARD, DIM, "float32", "dot")
    for i in range(N // SHARD):
        ids = pa.array([f"doc{j}" for j in range(i * SHARD, (i + 1) * SHARD)])
        manifest.shards.append(write_shard(emb, i, ids, corpus[i * SHARD:(i + 1) * SHARD]))
    manifest.complete, manifest.num_passages = True, N
    write_manifest(emb, manifest)
    scores = queries @ corpus.T
    top = np.argsort(-scores, axis=1, kind="stable")
    return emb, corpus, queries, scores, top


def recall_at(rows: np.ndarray, true_rows: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(rows, true_rows, strict=True)]))


@pytest.mark.parametrize("shards_per_part", [None, 3])
def test_flat_equals_bruteforce_numpy(tmp_path, data, shards_per_part):
    emb, _, queries, scores, top = data
    meta = build_faiss_index(emb, tmp_path / "flat", params=IndexParams(shards_per_part=shards_per_part), progress=False)
    assert len(meta.parts) == (1 if shards_per_part is None else 2)
    index = open_faiss_index(tmp_path / "flat", "model-a", "corpus-a")
    got_scores, got_ids = index.search(queries, 20)
    np.testing.assert_array_equal(got_ids, np.array([[f"doc{r}" for r in row] for row in top[:, :20]]))
    np.testing.assert_allclose(got_scores, np.take_along_axis(scores, top[:, :20], 1), rtol=1e-5, atol=1e-5)


def test_hnsw_and_ivfpq_recall_against_flat(tmp_path, data):
    emb, _, queries, scores, top = data
    build_faiss_index(emb, tmp_path / "hnsw", index_type="hnsw", params=IndexParams(hnsw_m=32), progress=False)
    hnsw = open_faiss_index(tmp_path / "hnsw")
    hnsw_scores, hnsw_rows = hnsw.search_rows(queries, 10)
    # Scores come back as inner products despite the L2 transform.
    np.testing.assert_allclose(hnsw_scores, np.take_along_axis(scores, hnsw_rows, 1), atol=1e-4)
    ivf_params = IndexParams(nlist=64, pq_m=16, nprobe=16, shards_per_part=2)
    build_faiss_index(emb, tmp_path / "ivfpq", index_type="ivfpq", params=ivf_params, progress=False)
    _, ivf_rows = open_faiss_index(tmp_path / "ivfpq").search_rows(queries, 10)
    hnsw_recall, ivf_recall = recall_at(hnsw_rows, top, 10), recall_at(ivf_rows, top, 10)
    print(f"recall@10 vs flat: hnsw {hnsw_recall:.3f}, ivfpq {ivf_recall:.3f}")
    assert hnsw_recall >= 0.95
    assert ivf_recall >= 0.6


def test_stale_index_is_refused(tmp_path, data):
    emb = data[0]
    build_faiss_index(emb, tmp_path / "flat", progress=False)
    with pytest.raises(StaleIndexError, match=r"stale index .*built for model model-a .*expected model-b"):
        open_faiss_index(tmp_path / "flat", "model-b", "corpus-a")
    with pytest.raises(StaleIndexError, match=r"corpus snapshot corpus-a \(expected corpus-b\)"):
        open_faiss_index(tmp_path / "flat", "model-a", "corpus-b")
    with pytest.raises(FileNotFoundError, match="build the index first"):
        open_faiss_index(tmp_path / "missing")


def test_rebuild_same_inputs_is_a_noop_and_other_type_replaces(tmp_path, data):
    emb = data[0]
    build_faiss_index(emb, tmp_path / "idx", progress=False)
    part = tmp_path / "idx" / "part-000.faiss"
    stamp = part.stat().st_mtime_ns
    build_faiss_index(emb, tmp_path / "idx", progress=False)
    assert part.stat().st_mtime_ns == stamp
    meta = build_faiss_index(emb, tmp_path / "idx", index_type="hnsw", params=IndexParams(hnsw_m=16), progress=False)
    assert open_faiss_index(tmp_path / "idx").meta.index_type == "hnsw" == meta.index_type
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_more_results_than_vectors_and_mmap(tmp_path, data):
    emb, _, queries, _, top = data
    build_faiss_index(emb, tmp_path / "flat", progress=False)
    index = open_faiss_index(tmp_path / "flat", mmap=True)
    scores, ids = index.search(queries[:2], N + 5)
    assert ids[0, -1] is None and scores[0, -1] == -np.inf
    assert ids[0, 0] == f"doc{top[0, 0]}"
    with pytest.raises(ValueError, match=r"queries must have shape \(n, 64\)"):
        index.search(queries[:, :10], 5)


def test_search_run_is_the_arrow_form_of_search(tmp_path, data):
    """The run table holds exactly the (id, score) pairs of ``search``, ranked, without missing rows."""
    emb, _, queries, _, top = data
    build_faiss_index(emb, tmp_path / "flat", params=IndexParams(shards_per_part=3), progress=False)
    index = open_faiss_index(tmp_path / "flat")
    k = N + 2  # more than the corpus: the last two results of every query are missing
    scores, ids = index.search(queries[:3], k)
    run = index.search_run(queries[:3], k, pa.array(["qa", "qb", "qc"]))
    assert run.schema.names == ["question_id", "passage_id", "rank", "score"]
    assert run.schema.field("passage_id").type == pa.string() and run.schema.field("rank").type == pa.int32()
    assert run.num_rows == 3 * N and run["passage_id"].null_count == 0
    assert run["question_id"].to_pylist() == ["qa"] * N + ["qb"] * N + ["qc"] * N
    assert run["rank"].to_pylist() == list(range(1, N + 1)) * 3
    assert run["passage_id"].to_pylist() == [p for row in ids for p in row if p is not None]
    np.testing.assert_array_equal(run["score"].to_numpy(), scores[:, :N].astype(np.float32).reshape(-1))
    assert run["passage_id"].to_pylist()[:5] == [f"doc{r}" for r in top[0, :5]]
    assert index.take_ids(np.array([[2, -1]])).to_pylist() == ["doc2", None]
    assert index.search_run(queries[:2], 4, ["x", "y"])["question_id"].to_pylist() == ["x"] * 4 + ["y"] * 4
    with pytest.raises(ValueError, match="got 1 question ids for 2 query vectors"):
        index.search_run(queries[:2], 4, ["x"])
