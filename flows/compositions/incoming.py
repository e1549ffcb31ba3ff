"""What a scheduled re-index watches: a dump, a passages file, or a folder where new files land.

The weekly `reindex` deployment has no dump or passages of its own to ingest; it looks at its
`watch` source on every run (by default `<workspace>/incoming/`) and ingests what it finds
there. In a folder, files are told apart by name:

* ``*.xml`` / ``*.xml.bz2``: a MediaWiki dump. A dump is a whole snapshot of the wiki, so only
  the newest one (by modification time, then name) is ingested; the older ones are listed as
  ignored. The ingest diffs it page by page against the previous one.
* ``*.tsv``: passages in DPR TSV (id, text, title); ``*.jsonl`` or a sub-folder holding
  ``corpus.jsonl``: a BEIR corpus. Every passages file is imported; one imported before with
  identical content is a no-op, and a changed one replaces its earlier rows.

Names starting with ``.`` or ``~`` (a copy in progress, an editor's backup) and anything else are
ignored and listed as such, so a user sees why a file was not picked up. Move a file into the
folder when it is complete (write it beside the folder, then ``mv``) so a run never reads half
of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DUMP_SUFFIXES = (".xml", ".xml.bz2")
PASSAGE_FORMATS = {".tsv": "dpr-tsv", ".jsonl": "beir"}
INCOMING = "incoming"


@dataclass
class Incoming:
    """The files found at a watched source, by what the re-index does with them."""

    source: Path
    dump: Path | None = None
    passages: list[tuple[Path, str]] = field(default_factory=list)  # (path, format)
    ignored: list[str] = field(default_factory=list)  # "name (why)"

    def describe(self) -> str:
        """One line for the run's log: where it looked and what it found there."""
        found = ([f"dump {self.dump.name}"] if self.dump else []) + [
            f"passages {path.name} ({fmt})" for path, fmt in self.passages]  # fmt: skip
        ignored = f"; ignored: {', '.join(self.ignored)}" if self.ignored else ""
        return f"looked at {self.source}: {', '.join(found) or 'no dump or passages file'}{ignored}"


def default_source(workspace_root: Path) -> Path:
    """The folder a re-index watches when no source is given: `<workspace>/incoming`."""
    return workspace_root / INCOMING


def _kind(path: Path, passages_format: str | None) -> tuple[str, str | None] | str:
    """("dump", None) or ("passages", format), else why the path is ignored."""
    name = path.name.lower()
    if name.startswith((".", "~")):
        return "hidden or temporary"
    if path.is_dir():
        return ("passages", "beir") if (path / "corpus.jsonl").is_file() else "a folder without corpus.jsonl"
    if name.endswith(DUMP_SUFFIXES):
        return ("dump", None)
    fmt = PASSAGE_FORMATS.get(path.suffix.lower()) or passages_format
    return ("passages", fmt) if fmt else "not a dump (.xml, .xml.bz2) or passages file (.tsv, .jsonl)"


def look_at(source: Path, passages_format: str | None = None) -> Incoming:
    """What `source` (a file or a folder) holds for a re-index. A file whose name says nothing
    is read as `passages_format`; a missing source raises, naming it."""
    if not source.exists():
        raise FileNotFoundError(f"the re-index source {source} does not exist: give an existing dump, passages "
                                f"file or folder (the default, {INCOMING}/ in the workspace, is created when empty)")
    incoming = Incoming(source)
    entries = [source] if source.is_file() else sorted(source.iterdir())
    dumps = []
    for path in entries:
        kind = _kind(path, passages_format if path == source else None)
        if isinstance(kind, str):
            incoming.ignored.append(f"{path.name} ({kind})")
        elif kind[0] == "dump":
            dumps.append(path)
        else:
            incoming.passages.append((path, kind[1]))  # type: ignore[arg-type]
    if dumps:
        dumps.sort(key=lambda p: (p.stat().st_mtime, p.name))
        incoming.dump = dumps[-1]
        incoming.ignored.extend(f"{p.name} (an older dump than {incoming.dump.name})" for p in dumps[:-1])
    return incoming
