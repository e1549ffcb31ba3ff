"""Does tokenizing the next shard hide behind encoding this one? (GPU corpus encoding)

    python benchmarks/bench_encode_overlap.py --bert-base-dir DIR [--passages 6000] [--shard-size 1000]

`encode_corpus` tokenizes shard N+1 in a background thread (`_tokenized_ahead`) while shard N
is encoded. On a GPU the bf16 forward of a BERT-base is several times faster than tokenizing,
so the steady rate is the tokenizer's, unless the two slow each other down. For each tokenizer
threading setting (TOKENIZERS_PARALLELISM true / unset / false) this prints: the pipelined
tokenization alone, then the pipeline with bf16 `encode_tokenized` consuming it, split into the
time spent waiting for tokens and the time spent encoding (against the encode time alone, the
difference is what the tokenizer's threads and the GIL take from the encoder), and one
`tokenize_shard` call over all passages. Same passages and BERT-base-shaped model (seeded random
weights) as bench_encode.py / bench_encode_stages.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_encode import real_passages  # noqa: E402

from odqa.models.retriever import load_retriever  # noqa: E402
from odqa.pipelines.dense.sharded_encoding import _tokenized_ahead, encode_tokenized, tokenize_shard  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bert-base-dir", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=6000)
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    passages = real_passages(args.passages)
    titles, texts = [p[0] for p in passages], [p[1] for p in passages]
    model = load_retriever(args.bert_base_dir, pooling="mean").to(args.device).eval()
    size = args.shard_size
    shards = [
        (i, None, titles[s : s + size], texts[s : s + size]) for i, s in enumerate(range(0, len(texts), size))
    ]

    def encode(tokens) -> None:
        encode_tokenized(model, tokens, batch_size=args.batch_size, device=args.device, precision="bf16")
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    encode(tokenize_shard(model, shards[0][2], shards[0][3]))  # warm-up
    print(
        f"device {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}; {len(texts)} passages "
        f"in {len(shards)} shards of {size}; bf16 autocast, batch {args.batch_size}"
    )
    for setting in ("true", None, "false"):
        if setting is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = setting
        start = time.perf_counter()
        for _ in _tokenized_ahead(model, iter(shards)):
            pass
        tokenize_only = time.perf_counter() - start
        start, waiting, encoding = time.perf_counter(), 0.0, 0.0
        pipeline = _tokenized_ahead(model, iter(shards))
        while True:
            asked = time.perf_counter()
            item = next(pipeline, None)
            waiting += time.perf_counter() - asked
            if item is None:
                break
            began = time.perf_counter()
            encode(item[1])
            encoding += time.perf_counter() - began
        total = time.perf_counter() - start
        began = time.perf_counter()
        tokenize_shard(model, titles, texts)
        one_call = time.perf_counter() - began
        print(
            f"TOKENIZERS_PARALLELISM={setting}: tokenize-only pipelined {tokenize_only:.2f}s; pipeline total "
            f"{total:.2f}s = {len(texts) / total:.0f} passages/s (waiting for tokens {waiting:.2f}s, encoding "
            f"{encoding:.2f}s); one tokenize_shard call over all {one_call:.2f}s"
        )


if __name__ == "__main__":
    main()
