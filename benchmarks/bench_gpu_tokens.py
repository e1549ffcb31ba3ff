"""Issue 38 on a GPU machine: BERT-base encoding fed from stored token ids, against
sentence-transformers with bf16 weights, the feed ceiling, and faiss-gpu against faiss-cpu.

    python3 benchmarks/bench_gpu_tokens.py [--passages 200000] [--st-passages 20000] [--batch-size 256]
        [--json benchmarks/results/gpu/issue38_tokens.json]

Ready for the next GPU session; not yet run on one (no GPU figures are claimed from it). A smoke
run on CPU (``--device cpu --passages 300 --st-passages 64 --layers 2 --hidden 64``) checks that
it works. Passages: real Wikipedia prose (``bench_encode.real_passages``) cycled to
``--passages`` rows with distinct ids, in a scratch workspace. Model: BERT-base-shaped (12
layers, 768 wide; seeded random weights, MiniLM's uncased vocabulary: throughput does not depend
on the weights), loaded with ``load_retriever``.

1. ``encode_corpus`` bf16 (linear weights cast), first run: tokenizing in worker processes
   while the GPU encodes, ids stored; then a second model directory from the stored ids
   (tokenized 0): passages/s and the projection to 21M passages.
2. The zero-cost encoder (``bench_token_store.ZeroCostEncoder``) from stored ids on the GPU: the
   ceiling the pipeline can feed (pinned batches, ``non_blocking`` copies, one batch ahead).
3. ``SentenceTransformer.encode`` with bf16 weights at each of ``--st-batches``, on the first
   ``--st-passages`` passages, beside ours on the same passages, same run: its best batch counts.
4. faiss: flat and IVF-PQ search QPS on the encoded vectors, on the GPU (when
   ``faiss.StandardGpuResources`` exists) and on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_encode import real_passages  # noqa: E402
from bench_token_store import ZeroCostEncoder, bert_shaped, write_passages  # noqa: E402

from odqa.models.retriever import load_retriever  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import EncodedCorpus, encode_corpus  # noqa: E402
from odqa.storage import Workspace  # noqa: E402
from odqa.storage.passage_tokens import PassageTokenStore  # noqa: E402

WIKIPEDIA_PASSAGES = 21_000_000


def timed_encode(ws: Workspace, retriever, out: Path, device: str, batch_size: int) -> dict:
    store = PassageTokenStore(ws, retriever.passage_tokenizer().tokenization())
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = encode_corpus(retriever, ws.scan("passages", columns=["passage_id", "title", "text"], batch_size=4096),
                           out, corpus_fingerprint="v1", batch_size=batch_size, devices=[device], precision="bf16"
                           if device.startswith("cuda") else "fp32", progress=False, token_store=store)  # fmt: skip
    seconds = time.perf_counter() - started
    rate = result.manifest.num_passages / seconds
    return {"seconds": round(seconds, 2), "passages_per_s": round(rate), "tokenized": result.tokenized,
            "tokens_reused": result.tokens_reused, "precision": result.manifest.precision,
            "hours_for_21M": round(WIKIPEDIA_PASSAGES / rate / 3600, 2)}  # fmt: skip


def sentence_transformers_side(model_dir: Path, rows, device: str, batch_sizes: list[int]) -> dict:
    """``SentenceTransformer.encode`` at each batch size (bf16 weights on GPU); its best is the anchor."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device=device)
    if device.startswith("cuda"):
        model = model.to(torch.bfloat16)
    strings = [f"{t} [SEP] {x}" for t, x in rows]
    by_batch = {}
    for batch_size in batch_sizes:
        model.encode(strings[:batch_size], batch_size=batch_size)
        started = time.perf_counter()
        model.encode(strings, batch_size=batch_size)
        by_batch[batch_size] = round(len(rows) / (time.perf_counter() - started))
    best = max(by_batch, key=by_batch.__getitem__)
    return {"passages_per_s": by_batch[best], "best_batch": best, "by_batch": by_batch,
            "weights": "bf16" if device.startswith("cuda") else "fp32"}  # fmt: skip


def faiss_qps(vectors: np.ndarray, queries: np.ndarray) -> dict:
    import faiss

    out: dict = {"gpus": faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0}
    dim = vectors.shape[1]
    lists = max(1, min(4096, len(vectors) // 39))
    builders = {"flat": lambda: faiss.IndexFlatIP(dim),
                "ivfpq": lambda: faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, lists, 64 if dim % 64 == 0 else 8, 8,
                                                  faiss.METRIC_INNER_PRODUCT)}  # fmt: skip
    for name, build in builders.items():
        index = build()
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
        sides = {"cpu": index}
        if out["gpus"] and hasattr(faiss, "StandardGpuResources"):
            sides["gpu"] = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        for side, searcher in sides.items():
            if name == "ivfpq":
                faiss.ParameterSpace().set_index_parameter(searcher, "nprobe", 32)
            searcher.search(queries[:10], 100)
            started = time.perf_counter()
            searcher.search(queries, 100)
            out[f"{name}_{side}_qps"] = round(len(queries) / (time.perf_counter() - started))
    out["vectors"], out["queries"] = int(len(vectors)), int(len(queries))
    return out


def faiss_in_child(vectors: np.ndarray, queries: np.ndarray, scratch: Path) -> dict:
    """``faiss_qps`` in a process of its own: faiss-gpu loads CUDA 12's runtime and cuBLAS beside
    torch's CUDA 13 ones, and a clash must not take the encoding figures down with it."""
    np.save(scratch / "vectors.npy", vectors)
    np.save(scratch / "queries.npy", queries)
    child = subprocess.run([sys.executable, __file__, "--faiss-only", str(scratch)], capture_output=True, text=True)
    if child.returncode != 0:
        return {"error": f"exit {child.returncode}", "stderr_tail": child.stderr[-2000:]}
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=200_000)
    parser.add_argument("--st-passages", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--st-batches", type=lambda text: [int(b) for b in text.split(",")], default=[64, 128, 256, 512],
                        help="sentence-transformers' batch sizes to try; its best is compared")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--faiss-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.faiss_only is not None:
        vectors, queries = (np.load(args.faiss_only / f"{name}.npy") for name in ("vectors", "queries"))
        print(json.dumps(faiss_qps(vectors, queries)))
        return
    report: dict = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
                    "passages": args.passages, "batch_size": args.batch_size,
                    "model": f"BERT-shaped, {args.layers} layers x {args.hidden}"}  # fmt: skip

    def record(key: str, value: dict) -> None:
        """Keep a stage's figures at once: a later stage killed at the call's limit loses only its own."""
        report[key] = value
        print(json.dumps({key: value}), flush=True)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    base = real_passages(5000)
    rows = [base[i % len(base)] for i in range(args.passages)]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model_dir = bert_shaped(scratch / "bert", args.layers, args.hidden)
        model = load_retriever(model_dir)
        ws = Workspace.resolve(scratch / "ws")
        write_passages(ws, rows, "v1")
        record("first_run_tokenizing", timed_encode(ws, model, scratch / "first", args.device, args.batch_size))
        record("from_stored_ids", timed_encode(ws, model, scratch / "stored", args.device, args.batch_size))
        record("feed_ceiling_zero_cost", timed_encode(ws, ZeroCostEncoder(model), scratch / "zero", args.device,
                                                      args.batch_size))  # fmt: skip
        side = Workspace.resolve(scratch / "side")
        write_passages(side, rows[:args.st_passages], "st")
        timed_encode(side, model, scratch / "side-fill", args.device, args.batch_size)
        pair = {"passages": min(args.st_passages, len(rows)),
                "odqa_from_stored_ids": timed_encode(side, model, scratch / "side-ours", args.device, args.batch_size),
                "sentence_transformers": sentence_transformers_side(model_dir, rows[:args.st_passages], args.device,
                                                                    args.st_batches)}  # fmt: skip
        pair["speed_vs_st"] = round(pair["odqa_from_stored_ids"]["passages_per_s"]
                                    / pair["sentence_transformers"]["passages_per_s"], 2)  # fmt: skip
        record("side_by_side", pair)
        vectors = EncodedCorpus(scratch / "stored").vectors(np.arange(args.passages)).astype(np.float32)
        queries = vectors[np.random.default_rng(0).choice(len(vectors), args.queries)] + 0.01
        record("faiss", faiss_in_child(vectors, queries.astype(np.float32), scratch))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
