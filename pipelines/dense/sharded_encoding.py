"""Encode a passage corpus into fixed-size embedding shards that survive being killed.

Encoding 21M Wikipedia passages takes hours, so the work is cut into shards of ``shard_size``
passages in corpus order. Each finished shard is written under a temporary name and renamed
into place (``shard-00012.npy`` with the vectors, ``shard-00012.ids.parquet`` with the passage
ids in the same order), then ``manifest.json`` is rewritten atomically to list it. A shard
exists for readers only once the manifest names it, so a killed run leaves nothing half-written
and the next run resumes with the first shard the manifest does not list.

The manifest also records which model and which corpus snapshot the vectors belong to: the same
pair with ``complete: true`` makes a re-run a no-op, a different pair starts over (with a log
line saying why), because mixing vectors of two models or two corpora would silently corrupt
every index built from them.

Speed comes from: token ids stored once per tokenizer in the workspace (``token_store``,
``pipelines.dense.stored_tokens``), so a passage is tokenized once for every model that shares
its tokenizer, and the rest tokenized in worker processes for the next shard while this one is
encoded; ordering a shard's passages by their real token counts, so a batch pads to the longest
of near-equal lengths (ordering by characters, as sentence-transformers does, leaves 25-40%
padding on 100-word passages); the original order is restored on write. The device thread only
moves ready batches: a helper thread builds the next padded batch (in pinned memory on CUDA,
copied with ``non_blocking``) while the current one runs, and a batch's vectors are read back
only once the next batch is queued behind it. Then ``torch.inference_mode``, the
weights cast to bf16 on GPUs (``precision``), and one process per GPU (shards handed out
round-robin). Memory stays bounded by two shards per worker (the one encoded, the one tokenized
ahead) plus one queued shard, whatever the corpus size.

torch is imported where vectors are computed, not with the module: index builds, release
publishing and BM25-only re-index runs read manifests and shards through it and never encode
(importing torch costs ~3 CPU-s a process).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import queue
import re
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...storage.atomic import atomic_write, atomic_write_text
from ...storage.choices import PRECISIONS, Precision
from ..progress import progress as progress_bar
from .retriever_protocol import DenseRetriever
from .stored_tokens import TokenFeed, TokenRows, TokenStore, passage_strings

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
DEFAULT_SHARD_SIZE = 50_000
FORMAT_VERSION = 1
REQUIRED_COLUMNS = ("passage_id", "title", "text")
StorageDtype = Literal["float32", "float16"]
_SHARD_FILE = re.compile(r"^shard-\d{5}\.(npy|ids\.parquet)$")


@dataclass(frozen=True)
class ShardInfo:
    """One finished shard: its files (relative to the output dir) and the ids it covers."""

    index: int
    count: int
    first_id: Any
    last_id: Any
    vectors_file: str
    ids_file: str


@dataclass
class EncodingManifest:
    """What an embeddings directory holds; the single source of truth for resuming."""

    model_fingerprint: str
    corpus_fingerprint: str
    shard_size: int
    dim: int
    dtype: StorageDtype
    similarity: str
    precision: Precision = "fp32"  # compute precision the vectors were encoded in
    shards: list[ShardInfo] = field(default_factory=list)
    complete: bool = False
    num_passages: int = 0
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EncodingManifest:
        data = json.loads(text)
        data["shards"] = [ShardInfo(**shard) for shard in data["shards"]]
        return cls(**data)

    def identity(self) -> tuple:
        """Everything that must match for finished shards to be reused. Not the shard size: it
        is how the vectors were cut, not what they are, so an existing layout is kept."""
        return (self.format_version, self.model_fingerprint, self.corpus_fingerprint,
                self.dim, self.dtype, self.precision)


@dataclass(frozen=True)
class EncodingResult:
    manifest: EncodingManifest
    encoded_passages: int  # written by this call, encoded or reused (0 when skipped)
    skipped: bool  # the directory was already complete for this model and corpus
    restart_reason: str | None  # why earlier shards were discarded, if they were
    reused_passages: int = 0  # of encoded_passages, copied from a previous encoding (``reuse``)
    tokenized: int = 0  # passages tokenized by this call
    tokens_reused: int = 0  # passages whose token ids came from the token store


class VectorSource(Protocol):
    """Vectors of passages encoded before (``pipelines.dense.passage_diff.VectorReuse``)."""

    def take(self, ids: Sequence[str], titles: Sequence[str], texts: Sequence[str]
             ) -> tuple[np.ndarray, np.ndarray]: ...


def read_manifest(out_dir: Path | str) -> EncodingManifest | None:
    """The manifest of an embeddings directory, or None when there is none."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return EncodingManifest.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a valid embeddings manifest ({exc})") from exc


def write_manifest(out_dir: Path, manifest: EncodingManifest) -> None:
    atomic_write_text(out_dir / MANIFEST_NAME, manifest.to_json())


def write_shard(out_dir: Path, index: int, ids: pa.Array, vectors: np.ndarray) -> ShardInfo:
    """Write one shard's ids then vectors, each atomically; the manifest update comes after."""
    stem = f"shard-{index:05d}"
    ids_file, vectors_file = f"{stem}.ids.parquet", f"{stem}.npy"
    ids_table = pa.table({"passage_id": ids})
    atomic_write(out_dir / ids_file, lambda h: pq.write_table(ids_table, h))
    atomic_write(out_dir / vectors_file, lambda h: np.save(h, vectors, allow_pickle=False))
    return ShardInfo(index=index, count=len(ids), first_id=ids[0].as_py(), last_id=ids[-1].as_py(),
                     vectors_file=vectors_file, ids_file=ids_file)


def written_shard(out_dir: Path, index: int, ids: pa.Array, dim: int, dtype: StorageDtype) -> ShardInfo | None:
    """The shard ``index`` as a task of this run already wrote it (both files in place, for
    exactly these ids, vectors of this shape and type), else None. A cluster that lost a worker
    reruns the tasks whose results were in that worker's memory; their shards are on shared
    storage already and are taken as they are instead of being encoded again."""
    stem = f"shard-{index:05d}"
    ids_file, vectors_file = out_dir / f"{stem}.ids.parquet", out_dir / f"{stem}.npy"
    if not (ids_file.is_file() and vectors_file.is_file()):
        return None
    try:
        written = pq.read_table(ids_file).column("passage_id").combine_chunks()
        vectors = np.load(vectors_file, mmap_mode="r")
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
    if not written.equals(ids) or vectors.shape != (len(ids), dim) or vectors.dtype != np.dtype(dtype):
        return None
    return ShardInfo(index=index, count=len(ids), first_id=ids[0].as_py(), last_id=ids[-1].as_py(),
                     vectors_file=vectors_file.name, ids_file=ids_file.name)


def iter_corpus_shards(
    batches: Iterable[pa.RecordBatch | pa.Table], shard_size: int
) -> Iterator[tuple[int, pa.Table]]:
    """Cut a stream of record batches into tables of exactly ``shard_size`` rows (last: fewer).

    Holds at most one shard plus one incoming batch. Bad input fails with the offending row
    offset: a missing column, or a null passage id or text (a null title is read as "").
    """
    buffered: list[pa.Table] = []
    buffered_rows = 0
    offset = 0
    shard_index = 0
    for batch_number, batch in enumerate(batches):
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(
                f"record batch {batch_number} (corpus rows {offset}..{offset + table.num_rows - 1}) "
                f"lacks column(s) {missing}; expected columns {list(REQUIRED_COLUMNS)}"
            )
        table = table.select(list(REQUIRED_COLUMNS))
        for column in ("passage_id", "text"):
            nulls = table.column(column).null_count
            if nulls:
                row = next(i for i, v in enumerate(table.column(column).is_null().to_pylist()) if v)
                raise ValueError(f"corpus row {offset + row}: null {column} (record batch {batch_number})")
        offset += table.num_rows
        buffered.append(table)
        buffered_rows += table.num_rows
        while buffered_rows >= shard_size:
            combined = pa.concat_tables(buffered)
            yield shard_index, combined.slice(0, shard_size).combine_chunks()
            shard_index += 1
            rest = combined.slice(shard_size)
            buffered, buffered_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
    if buffered_rows:
        yield shard_index, pa.concat_tables(buffered).combine_chunks()


def resolve_precision(precision: Precision, devices: Sequence[str | None]) -> Precision:
    """``auto``: bf16 on GPUs that support it (else fp16), fp32 on CPU.

    ``bf16`` runs on a copy of the model whose linear layers hold bf16 weights, under bf16
    autocast (``inference_weights``): the matrix products read bf16 weights without casting
    them at every call, while embeddings, LayerNorm and the residual stream stay fp32, so the
    vectors are those of plain autocast (MiniLM on real passages: cosine >= 0.99998 to fp32;
    casting the embeddings too drops it to 0.997). ``fp32`` keeps everything in fp32, the
    option for vectors that must not depend on the device. bf16 is also offered on CPU: on CPUs with native bf16 matrix units (AMX, AVX512-BF16)
    it encodes about twice as fast. It is not the CPU default because the vectors then depend
    on the CPU's instruction set.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    on_gpu = all(d is not None and str(d).startswith("cuda") for d in devices)
    if precision == "fp16" and not on_gpu:
        raise ValueError("fp16 encoding needs a GPU; use bf16 or fp32 on CPU")
    if precision != "auto":
        return precision
    if on_gpu:
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def _autocast(device: str | None, precision: Precision) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    device_type = "cuda" if device is not None and str(device).startswith("cuda") else "cpu"
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def _on_cpu(device: str | None) -> bool:
    return device is None or str(device).startswith("cpu")


def inference_weights(retriever: DenseRetriever, precision: Precision, device: str | None = None) -> DenseRetriever:
    """The retriever to encode with on ``device``; the tokenizer is shared, never copied.

    - ``bf16``: a copy whose linear layers hold bf16 weights (see ``resolve_precision``).
    - ``fp32`` on CPU: a copy that shares every parameter and whose linear layers run on
      oneDNN with prepacked weights, on x86 CPUs not made by Intel (``cpu_linear``: 1.13-1.16x
      a real MiniLM encode on this project's AMD machine; the vectors equal plain PyTorch's to
      fp32 rounding, and do not depend on the runner or the thread count).
    - else, or when nothing would change, the retriever itself (so calling this again on its
      result returns that result).
    """
    import torch

    if not isinstance(retriever, torch.nn.Module):
        return retriever
    tokenizer = getattr(retriever, "tokenizer", None)
    memo: dict[int, Any] = {id(tokenizer): tokenizer} if tokenizer is not None else {}
    if precision == "fp32" and _on_cpu(device):
        from .cpu_linear import has_packable_linears, with_packed_linears

        if not has_packable_linears(retriever):
            return retriever
        shared = [*retriever.parameters(), *retriever.buffers()]
        memo.update({id(tensor): tensor for tensor in shared})
        return with_packed_linears(copy.deepcopy(retriever, memo)).eval()  # type: ignore[return-value]
    if precision != "bf16":
        return retriever
    linears = [m for m in retriever.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or all(m.weight.dtype == torch.bfloat16 for m in linears):
        return retriever
    cast = copy.deepcopy(retriever, memo)
    for module in cast.modules():
        if isinstance(module, torch.nn.Linear):
            module.to(torch.bfloat16)
    return cast.eval()  # type: ignore[return-value]


class TokenLevelRetriever(Protocol):
    """A retriever that also exposes its two halves: tokenization and the tensor forward.

    ``models.Retriever`` has this shape. With it the encoder tokenizes a whole shard once, orders
    passages by their real token counts and feeds the forward pre-built tensors; without it (any
    other ``DenseRetriever``) batches go through ``encode_passages``, ordered by characters.
    """

    def tokenize_passages(self, titles: Sequence[str], texts: Sequence[str]) -> dict[str, torch.Tensor]: ...

    def embed_passages(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor: ...


TOKENIZE_CHUNK = 1024  # passages per tokenizer call while tokenizing a shard


@dataclass(frozen=True)
class TokenizedShard:
    """A shard's passages as ragged token arrays: row ``i`` is ``flat[k][starts[i]:starts[i]+lengths[i]]``.

    Ragged storage costs the real tokens only (no padding), about 1 KB per 100-word passage.
    """

    flat: dict[str, np.ndarray]
    starts: np.ndarray
    lengths: np.ndarray
    pad_values: dict[str, int]

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def from_rows(cls, rows: TokenRows, order: np.ndarray, pad_values: dict[str, int]) -> TokenizedShard | None:
        """Passage ``i`` as row ``order[i]`` of stored or worker-made rows; None when the model's
        tokenizer gives an input the rows do not hold (only ids, segment ids and the mask)."""
        flat: dict[str, np.ndarray] = {}
        for key in pad_values:
            if key == "input_ids":
                flat[key] = rows.input_ids
            elif key == "token_type_ids":
                flat[key] = rows.type_ids
            elif key == "attention_mask":
                flat[key] = np.ones(len(rows.input_ids), np.uint8)
            else:
                return None
        return cls(flat, rows.starts[order], rows.lengths[order].astype(np.int64), pad_values)

    def batch(self, positions: np.ndarray, pin: bool = False) -> dict[str, torch.Tensor]:
        """Right-padded tensors of the given rows, padded to the longest of them only (in pinned
        memory with ``pin``, so the copy to the GPU can run while the host goes on)."""
        import torch

        lengths = self.lengths[positions]
        width = int(lengths.max())
        valid = np.arange(width)[None, :] < lengths[:, None]
        # the flat index of every real token, row by row (the order ``out[valid]`` fills in)
        firsts = np.cumsum(lengths) - lengths
        source = np.arange(int(lengths.sum())) + np.repeat(self.starts[positions] - firsts, lengths)
        out = {}
        for key, values in self.flat.items():
            if key == "attention_mask" and self.pad_values[key] == 0:
                padded = valid.astype(np.int64)  # a real token's mask is 1 (only real tokens are kept)
            else:
                padded = np.full(valid.shape, self.pad_values[key], dtype=np.int64)
                padded[valid] = values[source]
            tensor = torch.from_numpy(padded)
            out[key] = tensor.pin_memory() if pin else tensor
        return out


def _is_token_level(retriever: object) -> bool:
    import torch

    return (isinstance(retriever, torch.nn.Module) and callable(getattr(retriever, "tokenize_passages", None))
            and callable(getattr(retriever, "embed_passages", None)))


def _pad_values(retriever: TokenLevelRetriever) -> dict[str, int] | None:
    """The value each input tensor holds at a padded position, read from a two-passage probe;
    None when the tokenizer does not pad on the right (the ragged layout assumes it does)."""
    probe = retriever.tokenize_passages(["a", "a"], ["a", "a a a a a a a a"])
    mask = probe.get("attention_mask")
    if mask is None or not bool(mask[0, -1] == 0) or not bool(mask[0, 0] == 1) or not bool(mask[1].all()):
        return None
    return {key: int(tensor[0, -1]) for key, tensor in probe.items()}


def tokenize_shard(retriever: object, titles: Sequence[str], texts: Sequence[str]) -> TokenizedShard | None:
    """Tokenize a shard once, in chunks; None when ``retriever`` is not token-level (see above).

    Called from a background thread while the previous shard is encoded: Hugging Face fast
    tokenizers release the GIL, so tokenizing overlaps the model forward.
    """
    if not _is_token_level(retriever):
        return None
    pad_values = _pad_values(retriever)  # type: ignore[arg-type]
    if pad_values is None:
        return None
    flat: dict[str, list[np.ndarray]] = {key: [] for key in pad_values}
    lengths: list[np.ndarray] = []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        inputs = retriever.tokenize_passages(titles[start:start + TOKENIZE_CHUNK],  # type: ignore[attr-defined]
                                             texts[start:start + TOKENIZE_CHUNK])
        mask = inputs["attention_mask"].numpy().astype(bool)
        counts = mask.sum(axis=1)
        if not np.array_equal(mask, np.arange(mask.shape[1])[None, :] < counts[:, None]):
            return None  # not right-padded after all
        lengths.append(counts)
        for key, tensor in inputs.items():
            flat[key].append(tensor.numpy()[mask].astype(np.int32))
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(all_lengths)[:-1]]).astype(np.int64)
    return TokenizedShard({k: np.concatenate(v) if v else np.zeros(0, np.int32) for k, v in flat.items()},
                          starts, all_lengths, pad_values)


_STORABLE_INPUTS = {"input_ids", "token_type_ids", "attention_mask"}


def token_feed(retriever: object, store: TokenStore | None, passages_version: str,
               workers: int | None = None, write: bool = True) -> TokenFeed | None:  # fmt: skip
    """Where the shards' tokens come from: the store (when given) and tokenizer worker
    processes; None when the retriever is not token-level, has no fast tokenizer, or takes
    inputs other than ids, segment ids and mask (it is then tokenized as before, unstored)."""
    make = getattr(retriever, "passage_tokenizer", None)
    if not _is_token_level(retriever) or not callable(make):
        return None
    pad_values = _pad_values(retriever)  # type: ignore[arg-type]
    tokenizer = make()
    if pad_values is None or tokenizer is None or not set(pad_values) <= _STORABLE_INPUTS:
        return None
    return TokenFeed(tokenizer, store, passages_version, workers, write)


def shard_tokens(retriever: object, feed: TokenFeed | None, ids: pa.Array, titles: Sequence[str],
                 texts: Sequence[str]) -> TokenizedShard | None:  # fmt: skip
    """A shard's tokens from the feed, else tokenized here (``tokenize_shard``)."""
    if feed is None:
        return tokenize_shard(retriever, passage_strings(titles), passage_strings(texts))
    rows, order = feed.rows(ids, titles, texts)
    return TokenizedShard.from_rows(rows, order, _pad_values(retriever))  # type: ignore[arg-type]


CPU_BATCH_TOKENS = 2048  # padded tokens per batch on CPU (about 15 passages of 100 words)


def token_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
    """Positions of each batch: longest passages first, consecutive in token-length order.

    Sorting by real token counts leaves almost no padding (sorting by characters leaves 25-40%
    on 100-word Wikipedia passages: word pieces per word vary more than words per passage).
    A batch holds at most ``batch_size`` passages and, with ``max_tokens``, at most that many
    padded tokens (passages x its longest; never fewer than one passage): on CPU, batches of a
    few thousand tokens keep the activations in cache and run faster than large ones.
    Longest first, so a batch that does not fit in memory fails at the start, not hours in.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        count = batch_size
        if max_tokens is not None:
            count = min(count, max(1, max_tokens // max(1, int(lengths[order[start]]))))
        batches.append(order[start:start + count])
        start += count
    return batches


def _character_batches(titles: Sequence[str], texts: Sequence[str], batch_size: int) -> list[np.ndarray]:
    lengths = np.fromiter((len(a) + len(b) for a, b in zip(titles, texts, strict=True)),
                          dtype=np.int64, count=len(texts))
    return token_batches(lengths, batch_size)


def encode_tokenized(
    retriever: TokenLevelRetriever,
    tokens: TokenizedShard,
    *,
    batch_size: int,
    device: str | None,
    precision: Precision = "fp32",
    on_batch: Callable[[int], None] | None = None,
    batch_tokens: int | None = None,
) -> np.ndarray:
    """float32 vectors of a tokenized shard in input order (see ``encode_shard``). A batch holds
    at most ``batch_tokens`` padded tokens: None is the device's default (``CPU_BATCH_TOKENS``
    on CPU, no cap on GPUs), 0 no cap."""
    import torch

    module: torch.nn.Module = inference_weights(retriever, precision, device)  # type: ignore[arg-type, assignment]
    if device is not None:
        module.to(device)
    target = next(module.parameters()).device
    out = np.empty((len(tokens), int(retriever.embedding_dim)), dtype=np.float32)  # type: ignore[attr-defined]
    budget = (CPU_BATCH_TOKENS if target.type == "cpu" else None) if batch_tokens is None else (batch_tokens or None)
    pin = target.type == "cuda"
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode(), _autocast(device, precision):
            batches = token_batches(tokens.lengths, batch_size, budget)
            landing: _Landing | None = None
            for positions, host in _ahead(lambda p: tokens.batch(p, pin), batches):
                inputs = {k: v.to(target, non_blocking=pin) for k, v in host.items()}
                launched = _Landing.start(positions, module.embed_passages(inputs).float(), pin)  # type: ignore[operator]
                if landing is not None:  # the batch before lands while this one runs
                    landing.land(out, on_batch)
                landing = launched
            if landing is not None:
                landing.land(out, on_batch)
    finally:
        module.train(was_training)
    return out


class _Landing:
    """A batch's vectors on their way to the host. On CUDA the copy is queued into pinned memory
    behind the batch's kernels and waited for only after the next batch's kernels are queued:
    reading each batch's vectors at once (``.cpu()``) would leave the GPU idle from the end of
    every batch until the host had queued the next one."""

    def __init__(self, positions: np.ndarray, host: Any, done: Any) -> None:
        self.positions, self.host, self.done = positions, host, done

    @classmethod
    def start(cls, positions: np.ndarray, vectors: Any, on_cuda: bool) -> _Landing:
        import torch

        if not on_cuda:
            return cls(positions, vectors, None)
        host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
        host.copy_(vectors, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(vectors.device))  # the copy's stream, on any GPU
        return cls(positions, host, done)

    def land(self, out: np.ndarray, on_batch: Callable[[int], None] | None) -> None:
        if self.done is not None:
            self.done.synchronize()
        out[self.positions] = self.host.numpy()
        if on_batch is not None:
            on_batch(len(self.positions))


def encode_shard(
    retriever: DenseRetriever,
    titles: Sequence[str],
    texts: Sequence[str],
    *,
    batch_size: int,
    device: str | None,
    precision: Precision = "fp32",
    on_batch: Callable[[int], None] | None = None,
    tokens: TokenizedShard | None = None,
    batch_tokens: int | None = None,
) -> np.ndarray:
    """float32 vectors of one shard in input order, encoded in length-sorted batches.

    A token-level retriever (``models.Retriever``) is fed tensors of the shard tokenized once
    (``tokens``, or tokenized here) in batches sorted by token count; any other retriever gets
    ``encode_passages`` calls in batches sorted by character count.
    """
    if tokens is None:
        tokens = tokenize_shard(retriever, titles, texts)
    if tokens is not None:
        return encode_tokenized(retriever, tokens, batch_size=batch_size, device=device,  # type: ignore[arg-type]
                                precision=precision, on_batch=on_batch, batch_tokens=batch_tokens)
    import torch

    out = np.empty((len(texts), retriever.embedding_dim), dtype=np.float32)
    with torch.inference_mode(), _autocast(device, precision):
        for positions in _character_batches(titles, texts, batch_size):
            out[positions] = retriever.encode_passages(
                [titles[i] for i in positions], [texts[i] for i in positions],
                batch_size=len(positions), device=device,
            )
            if on_batch is not None:
                on_batch(len(positions))
    return out


def shard_columns(shard: pa.Table) -> tuple[pa.Array, list[str], list[str]]:
    """Ids, titles (missing ones as "") and texts of a shard, as the encoder takes them."""
    return (shard.column("passage_id").combine_chunks(), passage_strings(shard.column("title")),
            shard.column("text").to_pylist())


def default_devices() -> list[str | None]:
    """One entry per GPU, or [None] (the retriever's own device choice) without one."""
    import torch

    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [None]


def finished_encoding(out_dir: Path | str, wanted: EncodingManifest) -> EncodingManifest | None:
    """The manifest of ``out_dir`` when it holds a complete encoding that ``wanted`` would
    reuse whole (same model, corpus and settings): encoding again is a no-op. A cheap read, so
    a stage can find it out before it waits for a device."""
    existing = read_manifest(out_dir)
    if existing is not None and existing.complete and existing.identity() == wanted.identity():
        return existing
    return None


def prepare_out_dir(out_dir: Path, wanted: EncodingManifest) -> tuple[EncodingManifest, str | None]:
    """Reuse the finished shards of a matching manifest, or clear the directory and explain why.

    A matching manifest cut into shards of another size keeps its own cut (finished or not):
    re-encoding vectors that exist only to cut them differently would throw work away."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for leftover in out_dir.glob("*.tmp"):
        leftover.unlink()
    existing = read_manifest(out_dir)
    if existing is None:
        return wanted, None
    if existing.identity() == wanted.identity():
        if existing.shard_size != wanted.shard_size:
            log.info("%s: keeping the existing shards of %d passages (asked for %d)", out_dir, existing.shard_size,
                     wanted.shard_size)
        return existing, None
    changes = []
    if existing.model_fingerprint != wanted.model_fingerprint:
        changes.append(f"model {existing.model_fingerprint[:12]} -> {wanted.model_fingerprint[:12]}")
    if existing.corpus_fingerprint != wanted.corpus_fingerprint:
        changes.append(f"corpus {existing.corpus_fingerprint[:12]} -> {wanted.corpus_fingerprint[:12]}")
    for name in ("dim", "dtype", "precision", "format_version"):
        if getattr(existing, name) != getattr(wanted, name):
            changes.append(f"{name} {getattr(existing, name)} -> {getattr(wanted, name)}")
    reason = (f"{out_dir}: existing embeddings do not match ({'; '.join(changes)}); "
              f"discarding {len(existing.shards)} shard(s) and encoding from the start")
    log.warning(reason)
    (out_dir / MANIFEST_NAME).unlink()
    for path in out_dir.iterdir():
        if _SHARD_FILE.match(path.name):
            path.unlink()
    return wanted, reason


def _check_reused_shard(out_dir: Path, info: ShardInfo, ids: pa.Array) -> None:
    if info.count != len(ids) or info.first_id != ids[0].as_py() or info.last_id != ids[-1].as_py():
        raise ValueError(
            f"{out_dir / MANIFEST_NAME}: shard {info.index} holds {info.count} passages "
            f"{info.first_id!r}..{info.last_id!r}, but the corpus stream now gives {len(ids)} passages "
            f"{ids[0].as_py()!r}..{ids[-1].as_py()!r} at that position although its fingerprint is "
            "unchanged; the corpus fingerprint must change whenever the passages do"
        )


def wanted_manifest(
    retriever: DenseRetriever,
    corpus_fingerprint: str,
    shard_size: int,
    batch_size: int,
    dtype: StorageDtype,
    precision: Precision,
    devices: Sequence[str | None],
) -> EncodingManifest:
    """The manifest an encoding with these settings produces (what an existing one must match
    to be resumed); refuses settings no encoding can run with."""
    if shard_size < 1 or batch_size < 1:
        raise ValueError(f"shard_size and batch_size must be positive, got {shard_size}, {batch_size}")
    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
    return EncodingManifest(
        model_fingerprint=retriever.config_fingerprint(), corpus_fingerprint=corpus_fingerprint,
        shard_size=shard_size, dim=int(retriever.embedding_dim), dtype=dtype,
        similarity=str(retriever.similarity), precision=resolve_precision(precision, devices),
    )


def encode_corpus(
    retriever: DenseRetriever,
    batches: Iterable[pa.RecordBatch | pa.Table],
    out_dir: Path | str,
    *,
    corpus_fingerprint: str,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = 128,
    dtype: StorageDtype = "float32",
    devices: Sequence[str | None] | None = None,
    retriever_factory: Callable[[], DenseRetriever] | None = None,
    precision: Precision = "auto",
    total: int | None = None,
    progress: bool | None = None,
    reuse: VectorSource | None = None,
    token_store: TokenStore | None = None,
    tokenize_workers: int | None = None,
    batch_tokens: int | None = None,
) -> EncodingResult:
    """Encode the passages of ``batches`` (columns passage_id, title, text) into ``out_dir``.

    Resumes after the last finished shard; skips the work (and does not read ``batches``) when
    the directory is already complete for this model and corpus. With more than one device
    (default: every visible GPU) one worker process per device loads its own retriever with
    ``retriever_factory`` (a picklable callable, e.g. ``functools.partial(load_retriever, path)``).
    ``precision`` is the compute precision (see ``resolve_precision``); the manifest records it
    and a change starts over. ``total`` (number of passages, if known) only sizes the progress
    report (``pipelines.progress``: a bar on a terminal, log records off it); ``progress=False``
    silences it. ``reuse`` hands over the vectors of passages encoded before (same model, same
    text): only the others are encoded, and the shards are those a full encoding writes. It
    applies to the single-device path; with several devices everything is encoded.
    ``token_store`` holds the token ids of passages tokenized before with the model's
    tokenizer: only the others are tokenized (in ``tokenize_workers`` processes, default all
    cores but one) and added to it, on one device or several (the device workers get ready
    tokens). ``batch_tokens`` caps a batch's padded tokens (see ``encode_tokenized``).
    """
    out_dir = Path(out_dir)
    devices = list(devices) if devices is not None else default_devices()
    wanted = wanted_manifest(retriever, corpus_fingerprint, shard_size, batch_size, dtype, precision, devices)
    manifest, restart_reason = prepare_out_dir(out_dir, wanted)
    if manifest.complete:
        log.info("%s: embeddings complete for this model and corpus; nothing to encode", out_dir)
        return EncodingResult(manifest, 0, True, None)
    done = {info.index: info for info in manifest.shards}
    if len(devices) > 1 and retriever_factory is None:
        raise ValueError("several devices need retriever_factory so each worker loads its own copy")
    reused = 0
    with progress_bar(total, "encode", "psg", enabled=progress is not False) as bar:
        feed = token_feed(retriever, token_store, corpus_fingerprint, tokenize_workers)
        try:
            if len(devices) > 1:
                if reuse is not None:
                    log.warning("%s: vector reuse applies to one device; encoding every passage on %d", out_dir,
                                len(devices))
                encoded = _encode_multiprocess(manifest, done, batches, out_dir, devices, retriever_factory,
                                               batch_size, bar, retriever, feed)
            else:
                encoded, reused = _encode_in_process(manifest, done, batches, out_dir, retriever, devices[0],
                                                     batch_size, bar, reuse, feed, batch_tokens)
        finally:
            if feed is not None:
                feed.close()
    manifest.shards.sort(key=lambda s: s.index)
    manifest.num_passages = sum(s.count for s in manifest.shards)
    manifest.complete = True
    write_manifest(out_dir, manifest)
    # Without a feed (a retriever without a fast tokenizer) every passage encoded was tokenized.
    tokenized, tokens_reused = (feed.tokenized, feed.reused) if feed is not None else (encoded - reused, 0)
    return EncodingResult(manifest, encoded, False, restart_reason, reused, tokenized, tokens_reused)


def record_shard(out_dir: Path, manifest: EncodingManifest, info: ShardInfo) -> None:
    """Add a finished shard to the manifest (kept in shard order) and write it atomically."""
    manifest.shards.append(info)
    manifest.shards.sort(key=lambda s: s.index)
    manifest.num_passages = sum(s.count for s in manifest.shards)
    write_manifest(out_dir, manifest)


class NonFiniteVectors(ValueError):
    """Passage vectors holding nan or inf. A model whose weights hold nan (a training that
    diverged) encodes every passage to nan, and FAISS indexes them without a word: the index
    then answers every question with nothing, and a re-index would release it."""


def non_finite_rows(vectors: np.ndarray) -> np.ndarray:
    """Row numbers of the vectors with a nan or inf component."""
    return np.flatnonzero(~np.isfinite(vectors).all(axis=1))


def as_storage(vectors: np.ndarray, dtype: StorageDtype, ids: pa.Array) -> np.ndarray:
    """Vectors in the stored dtype (float16 halves the files; compute stays in float32), refused
    (`NonFiniteVectors`, naming the first passage) when one is not finite, before its shard is
    written."""
    with np.errstate(over="ignore"):  # (an overflow to inf is found and named below)
        stored = vectors if dtype == "float32" else vectors.astype(np.float16)
    bad = non_finite_rows(stored)
    if len(bad):
        if dtype == "float16" and np.isfinite(vectors[bad]).all():
            why = "they exceed float16's range (65504): encode with --dtype float32"
        else:
            why = "the model's weights or its outputs hold nan or inf (a training that diverged?)"
        raise NonFiniteVectors(f"{len(bad)} of {len(ids)} passage vectors of a shard are not finite numbers "
                               f"(first: passage {ids[int(bad[0])].as_py()!r}): {why}; that shard is not written")
    return stored


def _skip_finished(out_dir: Path, done: dict[int, ShardInfo], index: int, shard: pa.Table, bar) -> bool:
    """True for a shard an earlier run finished (after checking the stream still matches it)."""
    if index not in done:
        return False
    _check_reused_shard(out_dir, done[index], shard.column("passage_id").combine_chunks())
    bar.update(shard.num_rows)
    return True


def _ahead(make: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """Pair each item with ``make(item)``, making the next one in a helper thread while the
    caller works on the current one (at most two made at a time). Shards get their tokens this
    way (tokenizing itself runs in worker processes, ``TokenFeed``), batches their tensors."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ahead") as pool:
        pending: tuple[Any, Future] | None = None
        for item in items:
            future = pool.submit(make, item)
            if pending is not None:
                yield pending[0], pending[1].result()
            pending = (item, future)
        if pending is not None:
            yield pending[0], pending[1].result()


def _encode_in_process(manifest, done, batches, out_dir, retriever, device, batch_size, bar,
                       reuse: VectorSource | None = None, feed: TokenFeed | None = None,
                       batch_tokens: int | None = None) -> tuple[int, int]:  # fmt: skip
    """(passages written, of which reused): each shard's reusable vectors are looked up first,
    and only the rest gets its tokens (``feed``) and is encoded. A shard's files are written
    (and synced) in a helper thread while the next shard is encoded; one write at a time, and a
    shard enters the manifest only once its files are whole."""
    encoded = reused = 0
    model = inference_weights(retriever, manifest.precision, device)

    def work() -> Iterator[tuple]:
        """Each shard's Arrow columns (only its passages without reusable vectors): hashed and
        looked up in the token store as they are; Python strings are made only to tokenize."""
        for index, shard in iter_corpus_shards(batches, manifest.shard_size):
            if _skip_finished(out_dir, done, index, shard, bar):
                continue
            ids, titles, texts = (shard.column(name).combine_chunks() for name in REQUIRED_COLUMNS)
            if reuse is None:
                yield index, ids, ids, titles, texts, None, None
                continue
            found, old = reuse.take(ids, titles, texts)
            todo = pa.array(np.flatnonzero(~found), pa.int64())
            yield index, ids, ids.take(todo), titles.take(todo), texts.take(todo), found, old

    def tokens_of(item: tuple) -> TokenizedShard | None:
        return shard_tokens(retriever, feed, item[2], item[3], item[4]) if len(item[4]) else None

    def write(index: int, ids: pa.Array, vectors: np.ndarray) -> None:
        record_shard(out_dir, manifest, write_shard(out_dir, index, ids, as_storage(vectors, manifest.dtype, ids)))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer") as writer:
        writing: Future | None = None
        for (index, ids, _, titles, texts, found, old), tokens in _ahead(tokens_of, work()):
            if tokens is None:  # not token-level (or nothing to encode): the retriever takes strings
                titles, texts = passage_strings(titles), passage_strings(texts)
            fresh = encode_shard(model, titles, texts, batch_size=batch_size, device=device,
                                 precision=manifest.precision, on_batch=bar.update, tokens=tokens,
                                 batch_tokens=batch_tokens) if len(texts) else np.zeros((0, manifest.dim), np.float32)
            if found is None:
                vectors = fresh
            else:
                vectors = np.empty((len(ids), manifest.dim), dtype=np.float32)
                vectors[found], vectors[~found] = old, fresh
                reused += int(found.sum())
                bar.update(int(found.sum()))
            if writing is not None:
                writing.result()  # the previous shard is written and recorded (or its error raised here)
            writing = writer.submit(write, index, ids, vectors)
            encoded += len(ids)
        if writing is not None:
            writing.result()
    return encoded, reused


def _worker_main(device, factory, tasks, results, out_dir, batch_size, precision, dtype) -> None:
    """One process per device: load a retriever, encode and write the shards it is handed, with
    the tokens the parent took from the feed (tokenized here when it had none for this model)."""
    try:
        retriever = factory()
        model = inference_weights(retriever, precision, device)
        tokenize = lambda item: item[4] if item[4] is not None else tokenize_shard(retriever, item[2], item[3])  # noqa: E731
        for (index, ids, titles, texts, _), tokens in _ahead(tokenize, iter(tasks.get, None)):
            vectors = encode_shard(model, titles, texts, batch_size=batch_size, device=device, precision=precision,
                                   on_batch=lambda n: results.put(("progress", n)), tokens=tokens)
            results.put(("done", write_shard(Path(out_dir), index, ids, as_storage(vectors, dtype, ids))))
    except NonFiniteVectors as error:  # the model's fault: one line, as in one process, and no traceback
        results.put(("non-finite", f"{error} (encoding worker on {device or 'cpu'})"))
        raise SystemExit(1) from None
    except BaseException:
        results.put(("error", f"worker on {device}:\n{traceback.format_exc()}"))
        raise


def _raise_worker_error(kind: str, payload: str) -> None:
    """A worker's failure, raised in the parent: non-finite vectors as themselves (the model's
    fault, one line), anything else with the worker's traceback."""
    if kind == "non-finite":
        raise NonFiniteVectors(payload)
    raise RuntimeError(f"encoding failed in {payload}")


def _encode_multiprocess(manifest, done, batches, out_dir, devices, factory, batch_size, bar, retriever,
                         feed: TokenFeed | None) -> int:  # fmt: skip
    """Hand shards round-robin to one worker process per device, each with its tokens from
    ``feed`` (stored ids, the rest tokenized in the feed's worker processes) made one shard ahead
    here, so no device worker tokenizes what the store holds."""
    import torch

    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    task_queues = [ctx.Queue(maxsize=1) for _ in devices]
    workers = [
        ctx.Process(target=_worker_main, args=(device, factory, tasks, results, str(out_dir), batch_size,
                                               manifest.precision, manifest.dtype), daemon=True)
        for device, tasks in zip(devices, task_queues, strict=True)
    ]
    for worker in workers:
        worker.start()
    in_flight: set[int] = set()
    encoded = 0

    def drain(block: bool) -> None:
        nonlocal encoded
        while True:
            try:
                kind, payload = results.get(timeout=0.5) if block else results.get_nowait()
            except queue.Empty:
                break
            block = False
            if kind == "progress":
                bar.update(payload)
            elif kind == "done":
                in_flight.discard(payload.index)
                record_shard(out_dir, manifest, payload)
                encoded += payload.count
            else:
                _raise_worker_error(kind, payload)
        dead = [w for w in workers if not w.is_alive() and w.exitcode not in (0, None)]
        if dead:
            with contextlib.suppress(queue.Empty):  # a worker's last word, flushed as it exited, says why
                while True:
                    kind, payload = results.get(timeout=1.0)
                    if kind in ("error", "non-finite"):
                        _raise_worker_error(kind, payload)
            raise RuntimeError(f"encoding worker(s) died with exit code(s) {[w.exitcode for w in dead]}")

    try:
        def shards() -> Iterator[tuple]:
            for index, shard in iter_corpus_shards(batches, manifest.shard_size):
                if not _skip_finished(out_dir, done, index, shard, bar):
                    yield (index, *shard_columns(shard))

        def tokens_of(item: tuple) -> TokenizedShard | None:
            return shard_tokens(retriever, feed, item[1], item[2], item[3]) if feed is not None else None

        for pending, ((index, ids, titles, texts), tokens) in enumerate(_ahead(tokens_of, shards())):
            tasks = task_queues[pending % len(devices)]
            in_flight.add(index)
            while True:
                try:
                    tasks.put((index, ids, titles, texts, tokens), timeout=0.5)
                    break
                except queue.Full:
                    drain(block=False)
            drain(block=False)
        for tasks in task_queues:
            tasks.put(None)
        while in_flight:
            drain(block=True)
        for worker in workers:
            worker.join()
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
                worker.join()
    return encoded


@dataclass(frozen=True)
class EncodedShard:
    info: ShardInfo
    ids: pa.Array
    vectors: np.ndarray  # memory-mapped, stored dtype


class EncodedCorpus:
    """Read side of an embeddings directory: shards in corpus order, ids, random row access.

    Vectors are memory-mapped, so opening a 60 GB directory costs nothing until rows are read.
    """

    def __init__(self, out_dir: Path | str, *, require_complete: bool = True) -> None:
        self.dir = Path(out_dir)
        manifest = read_manifest(self.dir)
        if manifest is None:
            raise FileNotFoundError(f"{self.dir}: no {MANIFEST_NAME}; run the encoding first")
        if require_complete and not manifest.complete:
            raise ValueError(f"{self.dir}: encoding is not complete ({len(manifest.shards)} shard(s) done); "
                             "resume it before building an index")
        self.manifest = manifest
        self.offsets = np.cumsum([0] + [s.count for s in manifest.shards])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def shard(self, position: int) -> EncodedShard:
        info = self.manifest.shards[position]
        vectors = np.load(self.dir / info.vectors_file, mmap_mode="r")
        ids = pq.read_table(self.dir / info.ids_file).column("passage_id").combine_chunks()
        if vectors.shape != (info.count, self.manifest.dim) or len(ids) != info.count:
            raise ValueError(f"{self.dir / info.vectors_file}: shape {vectors.shape} / {len(ids)} ids, "
                             f"manifest says {info.count} x {self.manifest.dim}")
        return EncodedShard(info, ids, vectors)

    def iter_shards(self) -> Iterator[EncodedShard]:
        for position in range(len(self.manifest.shards)):
            yield self.shard(position)

    def ids(self) -> pa.Array:
        """All passage ids in corpus (= index row) order."""
        chunks = [pq.read_table(self.dir / s.ids_file).column("passage_id") for s in self.manifest.shards]
        if not chunks:
            return pa.array([], type=pa.string())
        return pa.chunked_array([c for chunk in chunks for c in chunk.chunks]).combine_chunks()

    def iter_blocks(self, rows_per_block: int, start: int = 0, stop: int | None = None
                    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first global row, float32 block)`` over rows ``[start, stop)``, at most
        ``rows_per_block`` rows each, never crossing a shard.

        Read with plain file reads rather than through a memory map: pages touched through a map
        stay in the process's resident set until it is unmapped, so a build reading a 60 GB
        directory that way shows a resident set of the whole shard it is on; here a block is
        the only copy held.
        """
        stop = len(self) if stop is None else stop
        if rows_per_block < 1 or not 0 <= start <= stop <= len(self):
            raise ValueError(f"bad block request: rows {start}..{stop} of {len(self)}, {rows_per_block} per block")
        dim = self.manifest.dim
        for position, info in enumerate(self.manifest.shards):
            lo, hi = int(self.offsets[position]), int(self.offsets[position + 1])
            if hi <= start or lo >= stop:
                continue
            path = self.dir / info.vectors_file
            header = np.load(path, mmap_mode="r")
            if header.shape != (info.count, dim):
                raise ValueError(f"{path}: shape {header.shape}, manifest says {info.count} x {dim}")
            dtype, data_offset = header.dtype, header.offset
            del header
            with open(path, "rb") as handle:
                first = max(start, lo)
                while first < min(stop, hi):
                    count = min(rows_per_block, min(stop, hi) - first)
                    handle.seek(data_offset + (first - lo) * dim * dtype.itemsize)
                    block = np.fromfile(handle, dtype=dtype, count=count * dim)
                    if block.size != count * dim:
                        raise ValueError(f"{path}: truncated at row {first - lo}")
                    block = block.reshape(count, dim)
                    bad = non_finite_rows(block)
                    if len(bad):  # (embeddings written before encoding refused them, or by other tools)
                        row = first - lo + int(bad[0])
                        passage = pq.read_table(self.dir / info.ids_file).column("passage_id")[row].as_py()
                        raise NonFiniteVectors(f"{path}: row {row} (passage {passage!r}) is not a finite vector: the "
                                               "model that encoded it gives nan or inf (its weights hold them: a "
                                               "training that diverged?); encode with a working model")  # fmt: skip
                    yield first, block.astype(np.float32, copy=False)
                    first += count

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """float32 vectors of the given global rows (any order, any shape), read from the mmaps."""
        rows = np.asarray(rows, dtype=np.int64)
        flat = rows.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"row out of range 0..{len(self) - 1}")
        out = np.empty((flat.size, self.manifest.dim), dtype=np.float32)
        shard_of = np.searchsorted(self.offsets, flat, side="right") - 1
        for position in np.unique(shard_of):
            mask = shard_of == position
            info = self.manifest.shards[position]
            mm = np.load(self.dir / info.vectors_file, mmap_mode="r")
            out[mask] = mm[flat[mask] - self.offsets[position]]
        return out.reshape(*rows.shape, self.manifest.dim)
