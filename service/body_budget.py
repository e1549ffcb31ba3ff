"""How many bytes of request bodies the service holds at once, over all its connections.

Each body is bounded (1 MiB, `service.app.MAX_BODY_BYTES`) and must arrive within its deadline,
but nothing bounded their sum: 1,500 connections from one local client, each sending 900 KB of a
body it never finished, took the service from 0.6 to 2.0 GB in under 3 s (RSS that stayed after
they were gone); the file descriptor limit (20,000 here) would have let one client take about
18 GB. `BodyBudget` lends bytes of one shared budget to bodies larger than a small one, each
for as long as its request runs; a body that would go over it is refused with 503 before it is
read. Small bodies (every ordinary question, and batches of short ones) never wait on the
budget: what one costs is of the order of what uvicorn buffers for any connection anyway, so a
client holding the budget with large bodies cannot keep ordinary requests out.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODIES_BYTES = 64 * 1024 * 1024  # 64 bodies of the largest size at once
SMALL_BODY_BYTES = 64 * 1024  # uvicorn's read buffer per connection (its HIGH_WATER_LIMIT)


@dataclass
class BodyBudget:
    """Bytes lent to large request bodies (the service's event loop is its only user: no lock)."""

    limit: int = MAX_BODIES_BYTES
    small: int = SMALL_BODY_BYTES
    lent: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1 or self.small < 0:
            raise ValueError(f"a body budget needs limit >= 1 and small >= 0, got {self.limit} and {self.small}")

    def take(self, length: int) -> int | None:
        """The bytes lent to a body of `length` (0 for a small one), or None when the budget cannot
        lend them now; give them back with `give` when the request ends."""
        if length <= self.small:
            return 0
        if self.lent + length > self.limit:
            return None
        self.lent += length
        return length

    def give(self, lent: int) -> None:
        self.lent -= lent

    def refusal(self, length: int) -> str:
        """Why a body of `length` bytes is refused now, and what to do."""
        return (f"the service is already reading {self.lent:,} bytes of request bodies of over {self.small:,} bytes "
                f"(at most {self.limit:,} at once); retry this {length:,}-byte body shortly, or send smaller "
                "requests")  # fmt: skip
