"""BM25 indexes of passages with pyserini's Lucene (Anserini); `pipelines.search.bm25_searcher` searches them.

Index building streams ``(passage_id, title, text)`` records into pyserini's JsonCollection
format (``{"id", "contents": title + "\\n" + text}``), spread round-robin over one file per
thread because Anserini parallelises over files, then runs pyserini's indexer
(Anserini's ``IndexCollection``, the class ``python -m pyserini.index.lucene`` calls, with
positions + doc vectors + raw stored) in a subprocess. All
of it happens in a temporary folder next to the target that is renamed into place only after a
successful build, so a killed build never leaves a half-written index. The index carries
``odqa-index.json`` with the passages snapshot it was built from; :func:`open_bm25_index` compares it
with the snapshot the caller expects and raises :class:`StaleIndexError` on a mismatch.

Java classes are reached through ``pyserini.pyclass`` instead of importing
``pyserini.search.lucene``, because that package also imports torch, transformers and
scikit-learn (about 11 s per command) for encoders BM25 never uses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ...storage.atomic import process_alive, replace_directory
from ...storage.ids import PASSAGE_ID_RULE, is_passage_id
from ..progress import progress, track
from .java import ensure_java

METADATA_FILE = "odqa-index.json"
LOG_FILE = "odqa-index.log"
INDEX_FORMAT = 1
DEFAULT_K1 = 0.9
DEFAULT_B = 0.4


class IndexMissingError(FileNotFoundError):
    """No BM25 index (or no odqa metadata) at the expected place."""


class StaleIndexError(RuntimeError):
    """The index was built from a different passages snapshot than the caller expects."""


class IndexBuildError(RuntimeError):
    """pyserini's indexer failed or indexed fewer documents than it was given."""


@dataclass(frozen=True)
class IndexInfo:
    """An index folder and what ``odqa-index.json`` says about it."""

    path: Path
    snapshot: str
    documents: int
    skipped_empty: int
    threads: int
    java: str
    pyserini: str
    built_at: str
    build_seconds: float
    skipped_bad_ids: int = 0  # rows an older odqa let in whose ids break the passage-id rule


def passage_contents(title: str | None, text: str | None) -> str:
    """What Lucene indexes for a passage: title and text on separate lines, as DPR's BM25 did."""
    title, text = title or "", text or ""
    return f"{title}\n{text}" if title else text


def collection_document(passage_id: str, title: str | None, text: str | None) -> dict[str, str]:
    """A passage as one JsonCollection record: the document Anserini indexes (and stores raw)."""
    return {"id": passage_id, "contents": passage_contents(title, text)}


# Jackson's escapes: the short forms JSON has, every other C0 control as \uXXXX in upper-case hex;
# everything else (DEL, U+2028, non-ASCII) is written as it is.
_JACKSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_JACKSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def _jackson_string(value: str) -> str:
    escaped = _JACKSON_ESCAPED.sub(lambda m: _JACKSON_ESCAPES.get(m.group()) or f"\\u{ord(m.group()):04X}", value)
    return f'"{escaped}"'


def stored_raw(passage_id: str, title: str | None, text: str | None) -> str:
    """The passage's raw document as Anserini stores it (``-storeRaw``) and its REST API returns it
    with ``parse=false``: the JsonCollection record as Jackson's ``toPrettyString`` writes it
    (two-space indent, `` : `` between name and value), byte for byte."""
    fields = collection_document(passage_id, title, text).items()
    return "{\n" + ",\n".join(f"  {_jackson_string(k)} : {_jackson_string(v)}" for k, v in fields) + "\n}"


def write_json_collection(
    records: Iterable[tuple[str, str | None, str | None]], folder: Path, *, files: int
) -> tuple[int, int]:
    """Write records as JsonCollection JSON-lines spread round-robin over ``files`` files.

    Returns (records written, records skipped). A record whose id breaks the passage-id rule
    (`storage.ids`: Lucene ids are looked up verbatim and TREC run files split on whitespace) is
    skipped and counted, not an error: imports refuse such ids, and a row an older odqa let in
    must not keep the whole workspace from being indexed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    with ExitStack() as stack:
        outs = [
            stack.enter_context(open(folder / f"part-{i:04d}.jsonl", "w", encoding="utf-8"))
            for i in range(max(1, files))
        ]
        for passage_id, title, text in track(records, "BM25 collection", "passages"):
            if not is_passage_id(passage_id):
                skipped += 1
                continue
            written += 1
            document = collection_document(passage_id, title, text)
            outs[written % len(outs)].write(json.dumps(document, ensure_ascii=False) + "\n")
    return written, skipped


_COUNT_LINES = {name: re.compile(rf"{name}:\s+(\d+)") for name in ("indexed", "empty", "skipped", "errors")}
_TOTAL_LINE = re.compile(r"Total ([\d,]+) documents indexed")
_PROGRESS_LINE = re.compile(r"([\d,]+) documents indexed")
INDEXER_POLL_S = 2.0


def _indexer_counts(log: str) -> dict[str, int]:
    counts = {name: int(m.group(1)) for name, rx in _COUNT_LINES.items() if (m := rx.search(log))}
    total = _TOTAL_LINE.search(log)
    if total:
        counts["total"] = int(total.group(1).replace(",", ""))
    return counts


INDEXER_ARGS = (
    "-collection", "JsonCollection",
    "-generator", "DefaultLuceneDocumentGenerator",
    "-storePositions", "-storeDocvectors", "-storeRaw",
)  # fmt: skip

# What `python -m pyserini.index.lucene` runs, minus that module's imports of pandas, the
# prebuilt-index catalogue and analysers (~6 s of start-up that indexing does not use).
_INDEXER_MAIN = (
    "import sys; from pyserini.pyclass import autoclass; "
    "autoclass('io.anserini.index.IndexCollection').main(sys.argv[1:])"
)


#: Up to this many passages, the indexer's JVM compiles with C1 only and collects with the serial
#: GC: a short run is mostly start-up, which C2's compiler threads and the parallel GC make dearer.
#: Measured with one indexer thread: 146 passages 4.2 -> 2.7 CPU-s, 21,900 passages 15.6 -> 10.3
#: CPU-s (35 -> 22 s); a long run keeps the JVM's defaults, where C2's code pays for itself.
SHORT_RUN_PASSAGES = 100_000
SHORT_RUN_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def pyserini_index_command(collection: Path, index: Path, threads: int, passages: int) -> list[str]:
    """Anserini's IndexCollection through pyserini's JVM bridge, as pyserini's indexer runs it
    (for at most SHORT_RUN_PASSAGES ``passages``, with SHORT_RUN_JVM_OPTIONS)."""
    main = _INDEXER_MAIN
    if passages <= SHORT_RUN_PASSAGES:
        main = f"import jnius_config; jnius_config.add_options(*{list(SHORT_RUN_JVM_OPTIONS)!r}); {main}"
    return [
        sys.executable,
        "-c",
        main,
        "-input",
        str(collection),
        "-index",
        str(index),
        "-threads",
        str(threads),
        *INDEXER_ARGS,
    ]


def _pyserini_version() -> str:
    from importlib.metadata import version

    return version("pyserini")


def _run_indexer(command: list[str], log_path: Path, documents: int) -> int:
    """Run the indexer with its output in ``log_path``; its periodic "N documents indexed" lines
    drive the progress (the JVM's own log is all there is to watch). Returns the exit code."""
    with open(log_path, "w", encoding="utf-8") as log_file, progress(documents, "BM25 index", "passages") as bar:
        indexer = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            while True:
                try:
                    returncode = indexer.wait(timeout=INDEXER_POLL_S)
                except subprocess.TimeoutExpired:
                    returncode = None
                seen = _PROGRESS_LINE.findall(log_path.read_text(encoding="utf-8", errors="replace"))
                if seen:
                    bar.update(int(seen[-1].replace(",", "")) - bar.n)
                if returncode is not None:
                    return returncode
        finally:
            if indexer.poll() is None:  # interrupted: do not leave the JVM running
                indexer.kill()
                indexer.wait()


def build_bm25_index(
    records: Iterable[tuple[str, str | None, str | None]],
    index_dir: Path,
    *,
    snapshot: str,
    threads: int = 1,
) -> IndexInfo:
    """Build a BM25 index of ``records`` at ``index_dir`` (replacing any previous one atomically).

    ``snapshot`` identifies the passages the records come from (e.g. the passages table's
    snapshot id); it is stored in the index metadata for :func:`open_bm25_index`. Passages with no
    indexable content are skipped by Anserini and counted in ``skipped_empty``; any other
    shortfall or indexer failure raises :class:`IndexBuildError` with the indexer's log tail.
    """
    java = ensure_java()
    threads = max(1, int(threads))
    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    reclaim_dead_builds(index_dir)
    work = index_dir.parent / f".{index_dir.name}.building-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        started = time.perf_counter()
        written, skipped_bad_ids = write_json_collection(records, work / "collection", files=threads)
        if written == 0:
            raise IndexBuildError(f"no passages to index ({skipped_bad_ids:,} skipped: their ids break the rule: "
                                  f"{PASSAGE_ID_RULE})" if skipped_bad_ids else "no passages to index")  # fmt: skip
        staged = work / "index"
        log_path = work / LOG_FILE
        returncode = _run_indexer(pyserini_index_command(work / "collection", staged, threads, written), log_path,
                                  written)
        log = log_path.read_text(encoding="utf-8", errors="replace")
        counts = _indexer_counts(log)
        indexed = counts.get("total", counts.get("indexed", -1))
        empty = counts.get("empty", 0)
        if returncode != 0 or counts.get("errors", 0) or indexed + empty != written:
            tail = "\n".join(log.splitlines()[-25:])
            raise IndexBuildError(
                f"pyserini indexer exit code {returncode}: {written} passages written, "
                f"{indexed} indexed, {empty} empty, {counts.get('errors', '?')} errors\n{tail}"
            )
        info = IndexInfo(
            path=index_dir,
            snapshot=snapshot,
            documents=indexed,
            skipped_empty=empty,
            threads=threads,
            java=java.version,
            pyserini=_pyserini_version(),
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            build_seconds=round(time.perf_counter() - started, 3),
            skipped_bad_ids=skipped_bad_ids,
        )
        _write_metadata(staged, info)
        shutil.move(str(log_path), staged / LOG_FILE)
        replace_directory(staged, index_dir)
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)


def reclaim_dead_builds(index_dir: Path) -> list[Path]:
    """Delete the `.<name>.building-<pid>` folders beside `index_dir` (of any index version) whose
    builders no longer run (a killed build); a live builder's folder is left alone. Returns the
    folders removed."""
    removed = []
    for folder in index_dir.parent.glob(".*.building-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _write_metadata(index: Path, info: IndexInfo) -> None:
    values = {k: v for k, v in asdict(info).items() if k != "path"}
    payload = {"format": INDEX_FORMAT, "contents": "title, newline, text", **values}
    (index / METADATA_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def open_bm25_index(path: Path, expected_snapshot: str | None = None) -> IndexInfo:
    """Read an index's metadata, checking it was built from ``expected_snapshot`` (if given)."""
    path = Path(path)
    meta_path = path / METADATA_FILE
    if not meta_path.is_file():
        raise IndexMissingError(f"no BM25 index at {path} (missing {METADATA_FILE}); build it first")
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
        info = IndexInfo(path=path, **{f.name: meta[f.name] if f.default is MISSING else meta.get(f.name, f.default)
                                       for f in fields(IndexInfo) if f.name != "path"})  # fmt: skip
    except (ValueError, KeyError, TypeError) as error:
        raise IndexMissingError(
            f"{meta_path}: unreadable index metadata ({error}); rebuild the index"
        ) from None
    if meta.get("format") != INDEX_FORMAT:
        raise StaleIndexError(f"{path}: index format {meta.get('format')} != {INDEX_FORMAT}; rebuild it")
    if expected_snapshot is not None and info.snapshot != expected_snapshot:
        raise StaleIndexError(
            f"BM25 index at {path} was built from passages snapshot {info.snapshot!r}, but the "
            f"passages are now at {expected_snapshot!r}; rebuild the index"
        )
    return info
