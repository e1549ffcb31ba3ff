"""Token ids stored once (issue 38): the feed ceiling, reuse across models and re-indexes, and
odqa against sentence-transformers, all in one run on the same real passages.

    .venv/bin/python benchmarks/bench_token_store.py [--passages 20000] [--st-passages 384]
        [--repeats 2] [--threads 2] [--json benchmarks/results/token_store.json]

Passages: real Wikipedia prose (100-word passages our ingest steps cut from
``../shared/data/wikipedia``, cycled to ``--passages`` rows with distinct ids), imported into a
scratch workspace's ``passages`` table and read back with ``Workspace.scan`` as the encode stage
reads them.

1. *Feed ceiling*: ``encode_corpus`` with a zero-cost encoder (its forward returns zeros) whose
   token ids all come from the ``passage_tokens`` table: passage hashing, lookup, gathering,
   length-sorted batches (built one ahead in a helper thread), shard writes (in a helper thread,
   overlapping the next shard) and manifest writes. What a device would be fed at most, on this
   machine, in a GPU's batch shape (128 passages, no token cap) and in this CPU's (at most
   ``CPU_BATCH_TOKENS`` padded tokens a batch), alternating.
2. *A second model with the same tokenizer*: two small BERTs (2 layers, 64 wide, random
   weights, MiniLM's tokenizer files) encode the passages in turn; neither tokenizes (the feed
   ceiling's run stored MiniLM's ids, the same tokenizer).
3. *A re-index with 1% of passages changed*: a new passages version with every 100th text
   edited; the encoding tokenizes only those.
4. *Side by side with sentence-transformers* (all-MiniLM-L6-v2, fp32, same ``--st-passages``
   passages, interleaved repeats, best and median): odqa's ``encode_corpus`` fed from stored ids
   and from text (tokenizing included), the same from stored ids with PyTorch's own ``nn.Linear``
   (MKL; what odqa ran before ``pipelines/dense/cpu_linear.py``, and what it runs on Intel CPUs),
   ``SentenceTransformer.encode`` at its default batch (32).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
from bench_encode import minilm_dir, real_passages  # noqa: E402

from odqa.models.retriever import load_retriever  # noqa: E402
from odqa.pipelines.dense import cpu_linear  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import encode_corpus  # noqa: E402
from odqa.storage import Workspace  # noqa: E402
from odqa.storage.passage_tokens import PassageTokenStore  # noqa: E402


class ZeroCostEncoder(torch.nn.Module):
    """A token-level retriever whose forward costs nothing: MiniLM's tokenizer, zero vectors."""

    similarity = "cosine"

    def __init__(self, tokenizing) -> None:
        super().__init__()
        self._tokenizing = (tokenizing,)  # not a submodule: its weights are not this model's
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.embedding_dim = 384

    def tokenize_passages(self, titles, texts):
        return self._tokenizing[0].tokenize_passages(titles, texts)

    def passage_tokenizer(self):
        return self._tokenizing[0].passage_tokenizer()

    def embed_passages(self, inputs):
        return torch.zeros(len(inputs["input_ids"]), self.embedding_dim)

    def config_fingerprint(self) -> str:
        return "zero-cost"


def bert_shaped(folder: Path, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A BERT of the given shape (random weights, seeded) saved with MiniLM's tokenizer files."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=max(1, hidden // 64) if hidden >= 64 else 1,
                         intermediate_size=4 * hidden), add_pooling_layer=False).save_pretrained(folder)  # fmt: skip
    tokenizer.save_pretrained(folder)
    return folder


def write_passages(ws: Workspace, rows: list[tuple[str, str]], source: str) -> None:
    table = pa.table({"passage_id": [f"p{i:07d}" for i in range(len(rows))], "article_id": pa.array(
        [i // 4 for i in range(len(rows))], pa.int64()), "title": [t for t, _ in rows],
        "text": [x for _, x in rows], "position": pa.array([i % 4 for i in range(len(rows))], pa.int32())})  # fmt: skip
    with ws.transaction(f"bench-passages-{source}") as tx:
        tx.replace_table("passages")
        tx.write("passages", table, source=source)


def encode(ws: Workspace, retriever, out: Path, version: str, batch_size: int = 128, **kwargs):
    store = PassageTokenStore(ws, retriever.passage_tokenizer().tokenization())
    started = time.perf_counter()
    result = encode_corpus(retriever, ws.scan("passages", columns=["passage_id", "title", "text"], batch_size=4096),
                           out, corpus_fingerprint=version, batch_size=batch_size, devices=[None], progress=False,
                           token_store=store, **kwargs)  # fmt: skip
    return result, time.perf_counter() - started


FEED_SHAPES = {  # batch_size, batch_tokens: how the encoder is handed its batches
    "gpu_batches_128": (128, 0),  # a GPU's: 128 passages a batch, no token cap (the default on CUDA)
    "cpu_batches": (128, None),  # this CPU's default: at most CPU_BATCH_TOKENS padded tokens a batch
}


def feed_ceiling(ws: Workspace, minilm, scratch: Path, passages: int, repeats: int) -> dict:
    """Passages/s ``encode_corpus`` feeds a zero-cost encoder from stored ids, per batch shape;
    the shapes alternate in every repeat, so they share the machine's load."""
    zero = ZeroCostEncoder(minilm)
    first, first_s = encode(ws, zero, scratch / "zero-fill", "v1")
    runs: dict[str, list[float]] = {name: [] for name in FEED_SHAPES}
    for repeat in range(repeats):
        for name, (batch_size, batch_tokens) in FEED_SHAPES.items():
            result, seconds = encode(ws, zero, scratch / f"zero-{name}-{repeat}", "v1", batch_size=batch_size,
                                     batch_tokens=batch_tokens)  # fmt: skip
            assert result.tokenized == 0 and result.tokens_reused == passages
            runs[name].append(seconds)
    out = {"passages": passages, "shards": -(-passages // 50_000), "first_run_tokenized": first.tokenized,
           "first_run_s": round(first_s, 3), "first_run_passages_per_s": round(passages / first_s)}  # fmt: skip
    for name, seconds in runs.items():
        out[name] = {"stored_runs_s": [round(s, 3) for s in seconds],
                     "stored_best_passages_per_s": round(passages / min(seconds)),
                     "stored_median_passages_per_s": round(passages / statistics.median(seconds))}  # fmt: skip
    return out


def reuse_and_reindex(ws: Workspace, rows: list[tuple[str, str]], scratch: Path, threads: int) -> dict:
    torch.set_num_threads(1)  # a 2-layer, 64-wide model: more threads only wait for each other on a busy machine
    one, two = (load_retriever(bert_shaped(scratch / f"bert-{seed}", seed=seed)) for seed in (1, 2))
    assert one.passage_tokenizer().tokenization() == two.passage_tokenizer().tokenization()
    out: dict = {}
    for name, model in (("model_a", one), ("model_b_same_tokenizer", two)):
        result, seconds = encode(ws, model, scratch / name, "v1")
        out[name] = {"tokenized": result.tokenized, "tokens_reused": result.tokens_reused,
                     "seconds": round(seconds, 2)}  # fmt: skip
    changed = [(t, x + " (edited)") if i % 100 == 0 else (t, x) for i, (t, x) in enumerate(rows)]
    write_passages(ws, changed, "v2")
    result, seconds = encode(ws, one, scratch / "model_a-v2", "v2")
    out["reindex_1pct_changed"] = {"changed": sum(1 for i in range(len(rows)) if i % 100 == 0),
                                   "tokenized": result.tokenized, "tokens_reused": result.tokens_reused,
                                   "seconds": round(seconds, 2)}  # fmt: skip
    write_passages(ws, rows, "v1")
    torch.set_num_threads(threads)
    return out


def side_by_side(ws: Workspace, minilm, rows: list[tuple[str, str]], scratch: Path, repeats: int) -> dict:
    from sentence_transformers import SentenceTransformer

    st_model = SentenceTransformer(str(minilm_dir()), device="cpu")
    strings = [f"{t} [SEP] {x}" for t, x in rows]
    sub = Workspace.resolve(scratch / "side-by-side")
    write_passages(sub, rows, "st")
    encode(sub, minilm, scratch / "fill", "st")  # the stored ids "from stored ids" reads
    st_model.encode(strings[:32], batch_size=32)  # warm-up
    times: dict[str, list[float]] = {"odqa_from_stored_ids": [], "odqa_from_text": [],
                                     "odqa_from_stored_ids_torch_linears": [], "st_batch_32": []}  # fmt: skip
    rule = cpu_linear.onednn_runs_linears
    for repeat in range(repeats):
        order = list(times)[repeat % len(times):] + list(times)[:repeat % len(times)]
        for variant in order:
            if variant == "st_batch_32":
                started = time.perf_counter()
                st_model.encode(strings, batch_size=32)
                times[variant].append(time.perf_counter() - started)
            elif variant.startswith("odqa_from_stored_ids"):
                if variant.endswith("torch_linears"):
                    cpu_linear.onednn_runs_linears = lambda: False
                try:
                    result, seconds = encode(sub, minilm, scratch / f"{variant}-{repeat}", "st")
                finally:
                    cpu_linear.onednn_runs_linears = rule
                assert result.tokenized == 0
                times[variant].append(seconds)
            else:
                started = time.perf_counter()
                encode_corpus(minilm, sub.scan("passages", columns=["passage_id", "title", "text"], batch_size=4096),
                              scratch / f"text-{repeat}", corpus_fingerprint="st", batch_size=128, devices=[None],
                              progress=False)  # fmt: skip
                times[variant].append(time.perf_counter() - started)
    st_best, st_median = min(times["st_batch_32"]), statistics.median(times["st_batch_32"])
    return {"onednn_linears": rule()} | {variant: {"best_s": round(min(t), 2), "median_s": round(statistics.median(t), 2),
                      "passages_per_s": round(len(rows) / min(t), 1), "speed_vs_st": round(st_best / min(t), 2),
                      "median_speed_vs_st": round(st_median / statistics.median(t), 2)}
            for variant, t in times.items()} | {"passages": len(rows)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--st-passages", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-side-by-side", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    report: dict = {"load_average_before": os.getloadavg(), "cpus": os.cpu_count()}
    base = real_passages(2000)
    rows = [base[i % len(base)] for i in range(args.passages)]
    minilm = load_retriever(minilm_dir())
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        ws = Workspace.resolve(scratch / "ws")
        write_passages(ws, rows, "v1")
        report["feed_ceiling_zero_cost_encoder"] = feed_ceiling(ws, minilm, scratch, len(rows), args.repeats)
        print(json.dumps(report["feed_ceiling_zero_cost_encoder"]), flush=True)
        report["reuse"] = reuse_and_reindex(ws, rows, scratch, args.threads)
        print(json.dumps(report["reuse"]), flush=True)
        report["stored_bytes_per_token"] = ws.sql(
            "SELECT round(sum(octet_length(input_ids) + octet_length(type_ids)) / sum(length), 2) AS b "
            "FROM passage_tokens").column("b")[0].as_py()
        if not args.skip_side_by_side:
            report["side_by_side_minilm_fp32"] = side_by_side(ws, minilm, base[:args.st_passages], scratch,
                                                              args.repeats)
            print(json.dumps(report["side_by_side_minilm_fp32"]), flush=True)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
