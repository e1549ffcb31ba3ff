"""Stage reports: what a stage returns, what the workspace's stage ledger keeps, what users see.

Each stage defines its report as a dataclass deriving from :class:`Report`. A stage that finds
its inputs unchanged returns the report it recorded last time, rebuilt from the ledger with
`noop=True`; a ledger entry written before a field existed cannot be rebuilt, and the stage
simply runs again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Report")


@dataclasses.dataclass
class Report:
    """Base of every stage report; `noop` says the stage found its inputs unchanged."""

    noop: bool = dataclasses.field(default=False, kw_only=True)
    #: Dict fields whose items are shown as figures of their own, named `<prefix><key>` (field -> prefix).
    spread: ClassVar[dict[str, str]] = {}
    #: Fields kept out of the figures (long texts shown on their own, e.g. a coverage table).
    hidden: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_figures(self) -> dict[str, Any]:
        """The report as the figures users read: every field, with the `spread` dicts flattened."""
        shown: dict[str, Any] = {}
        for name, value in self.as_dict().items():
            if name in self.hidden:
                continue
            if name in self.spread and isinstance(value, dict):
                shown.update({f"{self.spread[name]}{key}": item for key, item in value.items()})
            else:
                shown[name] = value
        return shown

    def ledger(self) -> dict[str, Any]:
        """What the stage ledger keeps (everything but `noop`)."""
        return {k: v for k, v in self.as_dict().items() if k != "noop"}

    @classmethod
    def from_ledger(cls: type[R], data: dict[str, Any]) -> R | None:
        """The recorded report as a no-op report, or None when it lacks a field this one needs."""
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "noop"}
        required = {name for name, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}  # fmt: skip
        if not required <= set(data):
            return None
        return cls(**{k: v for k, v in data.items() if k in fields}, noop=True)
