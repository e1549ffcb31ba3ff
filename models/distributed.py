"""Multi-GPU training with torchrun (DDP): process-group setup and in-batch negatives across devices.

Every rank computes the contrastive loss over the questions and passages of *all* ranks.
`gather_with_local_grad` all-gathers embeddings and puts the rank's own, differentiable shard
back in place, so backward reaches the local encoder only. Summed over ranks these partial
gradients make the full gradient of the global loss; DDP averages instead of summing, which
the trainer undoes by scaling the contrastive loss by the world size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str | None = None) -> DistributedContext:
    """Join the torchrun process group when WORLD_SIZE > 1; pick this process's device.

    NCCL on one GPU per process; gloo when a node runs more processes than it has GPUs."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    shared_gpus = use_cuda and local_world > torch.cuda.device_count()
    if use_cuda:
        # More processes on this node than GPUs (e.g. torchrun --nproc_per_node=2 on one GPU):
        # they share the GPUs round-robin.
        index = local_rank % torch.cuda.device_count() if world_size > 1 else torch.cuda.current_device()
        chosen = torch.device("cuda", index)
        torch.cuda.set_device(chosen)
    else:
        chosen = torch.device(device or "cpu")
    if world_size > 1 and not dist.is_initialized():
        # NCCL refuses two ranks on one GPU; gloo runs the same collectives on CUDA tensors.
        dist.init_process_group(backend="nccl" if use_cuda and not shared_gpus else "gloo")
    if world_size > 1:
        rank, world_size = dist.get_rank(), dist.get_world_size()
    return DistributedContext(rank, world_size, local_rank, chosen)


def gather_with_local_grad(tensor: torch.Tensor, context: DistributedContext) -> tuple[torch.Tensor, int]:
    """Concatenate `tensor` (first dims may differ) from all ranks; returns it and this rank's offset."""
    if not context.enabled:
        return tensor, 0
    size = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(context.world_size)]
    dist.all_gather(sizes, size)
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    padded = tensor.detach()
    if tensor.shape[0] < longest:
        filler = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([padded, filler])
    gathered = [torch.empty_like(padded) for _ in range(context.world_size)]
    dist.all_gather(gathered, padded.contiguous())
    parts = [g[:n] for g, n in zip(gathered, counts, strict=True)]
    parts[context.rank] = tensor
    return torch.cat(parts), sum(counts[: context.rank])


def barrier(context: DistributedContext) -> None:
    if context.enabled:
        dist.barrier()


def main_decides(flag: bool, context: DistributedContext) -> bool:
    """Rank 0's `flag` on every rank: a decision taken from the wall clock (time to checkpoint)
    differs between processes, and a collective step that only some ranks enter would hang."""
    if not context.enabled:
        return flag
    tensor = torch.tensor([1 if flag else 0], device=context.device, dtype=torch.int32)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


def any_rank(flag: bool, context: DistributedContext) -> bool:
    """Whether `flag` holds on some rank, told to every rank: a step one rank must skip (its
    loss is not finite) is skipped by all, or the ranks' weights would part ways."""
    if not context.enabled:
        return flag
    tensor = torch.tensor([1 if flag else 0], device=context.device, dtype=torch.int32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
