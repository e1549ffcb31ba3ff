"""The shard plan of a mapped encoding run: which passages each embedding shard covers.

The in-process encoder cuts the corpus stream into shards while it reads it. A mapped run (one
task per shard on a thread pool, a process pool or a Dask cluster) needs that cut up front, so
that every task can read its own slice: shard ``i`` covers passage ordinals
``[i * shard_size, min((i + 1) * shard_size, total))`` of one table snapshot, which is exactly
what cutting the stream of that snapshot gives, so both paths write the same shards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (a type only: sharded_encoding imports torch, which the flows that plan
    # shards for Dask or thread runners, e.g. ingest and BM25 retrieval, never need)
    from .sharded_encoding import ShardInfo


@dataclass(frozen=True)
class ShardRange:
    """One shard of the plan: its index and the passage ordinals ``[start, stop)`` it covers."""

    index: int
    start: int
    stop: int

    @property
    def count(self) -> int:
        return self.stop - self.start


def all_shards(total: int, shard_size: int) -> list[ShardRange]:
    """Every shard of a corpus of ``total`` passages, in order (the last one may be short)."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    if total < 0:
        raise ValueError(f"a corpus cannot have {total} passages")
    return [ShardRange(i, start, min(start + shard_size, total)) for i, start in enumerate(range(0, total, shard_size))]


def pending_shards(total: int, shard_size: int, finished: Iterable[ShardInfo]) -> list[ShardRange]:
    """The shards still to encode, in order.

    A finished shard (from the manifest) must sit where the plan puts it and hold as many
    passages: anything else means the manifest describes another cut of the corpus, and reusing
    its files would misalign vectors and ids.
    """
    plan = all_shards(total, shard_size)
    done = set()
    for info in finished:
        if not 0 <= info.index < len(plan) or info.count != plan[info.index].count:
            expected = f"{plan[info.index].count}" if 0 <= info.index < len(plan) else "no shard"
            raise ValueError(f"finished shard {info.index} holds {info.count} passages, but the plan for "
                             f"{total} passages in shards of {shard_size} has {expected} there")
        done.add(info.index)
    return [shard for shard in plan if shard.index not in done]


def threads_per_task(cores: int, concurrent_tasks: int) -> int:
    """Intra-op threads for each of ``concurrent_tasks`` tasks sharing ``cores`` (at least one)."""
    return max(1, cores // max(1, concurrent_tasks))
