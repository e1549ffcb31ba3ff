"""Where corpus-encoding time goes on a GPU: tokenizing, host-side batching, the model forward.

    python benchmarks/bench_encode_stages.py --bert-base-dir DIR [--passages 6000] [--batch-size 256]

`bench_encode.py` times `encode_corpus` end to end on one shard, where tokenizing and encoding
run one after the other; over a real corpus the next shard is tokenized while this one is
encoded, so the steady rate is set by the slower of the two. This splits them, on the same real
Wikipedia passages and the same BERT-base-shaped model (seeded random weights, DPR's shape):

* tokenize: `tokenize_shard` (the ragged token arrays), with the tokenizer's own threads off
  (`TOKENIZERS_PARALLELISM=false`, as in a worker under a process pool) and on;
* encode: `encode_tokenized` on the tokenized shard (host batching, transfer, forward, copy back)
  in fp32, bf16 autocast (the GPU default) and fp16 autocast, and with the weights cast to bf16;
* the whole pipeline: `encode_corpus` in bf16 over shards of 1000 passages, where each next
  shard is tokenized while this one is encoded (tokenizer threads as a user gets them: on);
* forward only: the same batches already on the GPU, bf16 autocast, timed with one sync at the
  end, with its compute rate against the matrix-product FLOPs (2 x non-embedding parameters per
  token, plus attention), which says how close the forward itself is to the chip.

Each figure is the best of `--repeats`, variants interleaved after a warm-up; the projection for
21M passages (DPR's Wikipedia) uses max(tokenize, encode), as the pipeline overlaps them.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_encode import WIKIPEDIA_PASSAGES, real_passages  # noqa: E402

from odqa.models.retriever import load_retriever  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import (  # noqa: E402
    encode_corpus,
    encode_tokenized,
    token_batches,
    tokenize_shard,
)


def timed(function) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    function()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def tokenize(model, titles, texts, parallel: bool):
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if parallel else "false"
    return tokenize_shard(model, titles, texts)


def forward_flops(model, lengths: np.ndarray) -> float:
    """Matrix-product FLOPs of one forward over passages of these token counts."""
    config = model.config.backbone
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * config["intermediate_size"])
    attention = 4 * layers * hidden * float(np.sum(lengths.astype(np.float64) ** 2))
    return per_token * float(lengths.sum()) + attention


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bert-base-dir", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    passages = real_passages(args.passages)
    titles, texts = [p[0] for p in passages], [p[1] for p in passages]
    model = load_retriever(args.bert_base_dir, pooling="mean").to(args.device).eval()
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    tokens = tokenize(model, titles, texts, parallel=False)
    batches = token_batches(tokens.lengths, args.batch_size)
    on_device = [{k: v.to(args.device) for k, v in tokens.batch(b).items()} for b in batches]

    def forward_only() -> None:
        with (
            torch.inference_mode(),
            torch.autocast(device_type=torch.device(args.device).type, dtype=torch.bfloat16),
        ):
            for inputs in on_device:
                model.embed_passages(inputs)

    def encode(precision: str, which=model):
        return lambda: encode_tokenized(
            which, tokens, batch_size=args.batch_size, device=args.device, precision=precision
        )

    scratch = Path(tempfile.mkdtemp(prefix="encode-stages-"))
    table = pa.table({"passage_id": [f"p{i}" for i in range(len(passages))], "title": titles, "text": texts})

    def pipeline() -> None:
        os.environ.pop("TOKENIZERS_PARALLELISM", None)
        shutil.rmtree(scratch / "out", ignore_errors=True)
        encode_corpus(
            model,
            table.to_batches(max_chunksize=500),
            scratch / "out",
            corpus_fingerprint="stages",
            shard_size=1000,
            batch_size=args.batch_size,
            devices=[args.device],
            precision="bf16",
            progress=False,
        )

    variants = {
        "tokenize, 1 thread (TOKENIZERS_PARALLELISM=false)": lambda: tokenize(model, titles, texts, False),
        "tokenize, tokenizer threads on": lambda: tokenize(model, titles, texts, True),
        "encode_tokenized fp32": encode("fp32"),
        "encode_tokenized bf16 autocast (GPU default)": encode("bf16"),
        "encode_tokenized fp16 autocast": encode("fp16"),
        "encode_tokenized, bf16 weights (no autocast)": encode("fp32", bf16_model),
        f"encode_corpus bf16, {-(-len(passages) // 1000)} shards of 1000 (tokenizing overlaps encoding)": pipeline,
        "forward only, batches on the GPU, bf16 autocast": forward_only,
    }
    for function in variants.values():  # warm-up: kernels, allocator, tokenizer caches
        function()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            times[name].append(timed(variants[name]))
    reference = encode_tokenized(
        model, tokens, batch_size=args.batch_size, device=args.device, precision="fp32"
    )
    fast = encode_tokenized(
        bf16_model, tokens, batch_size=args.batch_size, device=args.device, precision="fp32"
    )
    cosine = np.sum(reference * fast, 1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(fast, axis=1)

    flops = forward_flops(model, tokens.lengths)
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(
        f"device {device_name}; torch {torch.__version__}; {len(passages)} passages, {int(tokens.lengths.sum())} "
        f"tokens (mean {tokens.lengths.mean():.0f}); batch {args.batch_size}; attention "
        f"{model.question_tower.encoder.config._attn_implementation}; forward {flops / 1e12:.1f} TFLOP; "
        f"bf16-weights vs fp32 min cosine {cosine.min():.5f}"
    )
    print("| stage | best (s) | passages/s | TFLOP/s | 21M passages (h) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    best = {name: min(values) for name, values in times.items()}
    for name, seconds in best.items():
        rate = len(passages) / seconds
        tflops = f"{flops / seconds / 1e12:.0f}" if name.startswith(("encode_tokenized", "forward")) else "-"
        print(f"| {name} | {seconds:.2f} | {rate:.0f} | {tflops} | {WIKIPEDIA_PASSAGES / rate / 3600:.2f} |")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
