"""A training step of odqa beside sentence-transformers' MultipleNegativesRankingLoss, as a share
of the device's peak (issue 38).

Both train the same checkpoint as one shared encoder (odqa's SDE; sentence-transformers' bi-encoder)
on the same batch: B questions of ``--question-len`` tokens, B positives and B x H hard negatives
of ``--seq-len`` tokens (fixed-length random ids: the worst case of truncation), in-batch and hard
negatives in a softmax over the passages, backward, AdamW (fused on CUDA), bf16 autocast with
``--amp bf16``. odqa's step is the trainer's own (``bench_train_step.StepRunner``: the functions
``Trainer`` calls); the anchor's is ``MultipleNegativesRankingLoss`` called on the same token
tensors (what ``SentenceTransformerTrainer`` computes per step, without its data loader). Steps
alternate between the two, so load drift hits both alike; medians after ``--warmup``.

Model FLOPs of a step: 6 x (parameters outside the embeddings) x tokens, plus attention's
12 x layers x hidden x sequence length^2 per sequence (forward and backward); the same count for
both, so the shares of peak compare directly. ``--peak-tflops`` is the device's dense peak at the
compute precision (default: 989 for an H100/H200 in bf16, none on CPU: then only TFLOP/s).

    python benchmarks/bench_train_anchor.py                        # MiniLM (bundled), CPU, batch 8
    python benchmarks/bench_train_anchor.py --device cuda --base BERT_BASE_DIR --amp bf16 --batch 128 \\
        --seq-len 256 --json benchmarks/results/gpu/train_anchor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_train_step import StepRunner, default_base  # noqa: E402

DENSE_BF16_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


class AnchorStep:
    """sentence-transformers' MNRL step on the odqa runner's very token tensors."""

    def __init__(self, args: argparse.Namespace, runner: StepRunner) -> None:
        import torch
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.losses import MultipleNegativesRankingLoss

        torch.manual_seed(0)
        self.torch = torch
        self.device = runner.context.device
        self.model = SentenceTransformer(args.base, device=str(self.device))
        self.model.train()
        self.loss = MultipleNegativesRankingLoss(self.model)
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-5, fused=fused)
        self.amp = runner.amp
        batch, hard = runner.batch, args.hard_negatives
        passages = batch.passage_inputs
        questions = batch.question_inputs
        positives = {k: v[: args.batch] for k, v in passages.items()}
        # MNRL takes (anchor, positive, negative_1, ..., negative_H) columns, one negative per column
        negatives = [{k: v[args.batch + h * args.batch: args.batch + (h + 1) * args.batch] for k, v in passages.items()}
                     for h in range(hard)]  # fmt: skip
        self.features = [questions, positives, *negatives]

    def step(self) -> float:
        torch = self.torch
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None)
        with autocast:
            value = self.loss([dict(f) for f in self.features], None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 2.0)
        self.optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start


def step_flops(runner: StepRunner, args: argparse.Namespace) -> float:
    """Model FLOPs of one step (forward and backward), the same for both implementations."""
    model = runner.model
    encoder = next(m for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "num_hidden_layers"))
    layers, hidden = encoder.config.num_hidden_layers, encoder.config.hidden_size
    embedding = sum(p.numel() for name, p in encoder.named_parameters() if "embeddings" in name)
    dense = sum(p.numel() for p in encoder.parameters()) - embedding
    rows = [(args.batch, args.question_len), (args.batch * (1 + args.hard_negatives), args.seq_len)]
    tokens = sum(count * length for count, length in rows)
    attention = sum(count * 12 * layers * hidden * length * length for count, length in rows)
    return 6.0 * dense * tokens + attention


def default_peak(device) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in DENSE_BF16_PEAK_TFLOPS.items() if key in name), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=None, help="HF checkpoint (default: bundled all-MiniLM-L6-v2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hard-negatives", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--question-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.base = args.base or default_base()
    import torch

    from odqa.models.distributed import init_distributed

    if args.threads:
        torch.set_num_threads(args.threads)
    context = init_distributed(args.device)
    odqa = StepRunner("sde", args, context)
    anchor = AnchorStep(args, odqa)
    times: dict[str, list[float]] = {"odqa_sde": [], "sentence_transformers_mnrl": []}
    for index in range(args.warmup + args.steps):
        pairs = [("odqa_sde", odqa.step), ("sentence_transformers_mnrl", anchor.step)]
        for name, step in pairs if index % 2 == 0 else reversed(pairs):
            elapsed = step()
            if index >= args.warmup:
                times[name].append(elapsed)
    flops = step_flops(odqa, args)
    peak = args.peak_tflops or default_peak(context.device)
    report: dict = {"device": torch.cuda.get_device_name(context.device) if context.device.type == "cuda" else "cpu",
                    "base": args.base, "amp": args.amp, "batch": args.batch, "hard_negatives": args.hard_negatives,
                    "seq_len": args.seq_len, "question_len": args.question_len, "step_tflop": round(flops / 1e12, 4),
                    "peak_tflops": peak, "threads": torch.get_num_threads()}  # fmt: skip
    for name, seconds in times.items():
        median = statistics.median(seconds)
        achieved = flops / median / 1e12
        report[name] = {"median_step_s": round(median, 4), "steps_s": [round(s, 4) for s in seconds],
                        "tflops": round(achieved, 3),
                        "share_of_peak": round(achieved / peak, 4) if peak else None}  # fmt: skip
    report["odqa_speed_vs_anchor"] = round(report["sentence_transformers_mnrl"]["median_step_s"]
                                           / report["odqa_sde"]["median_step_s"], 3)  # fmt: skip
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
