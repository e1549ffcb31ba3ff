"""The passage_tokens lookup one process shares between its stores (a mapped encode's shard tasks
each build a store): built once, grown by every commit, started over when the table is rebuilt,
and right while threads add and find at once."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odqa.storage import Workspace
from odqa.storage.passage_tokens import PassageTokenStore, Tokenization, TokenRows

TOKENIZATION = Tokenization(tokenizer="fingerprint", passage_input="title-text-pair", max_length=16, id_width=2)


def _rows(first: int, count: int) -> tuple[np.ndarray, pa.Array, TokenRows]:
    """Passages first..first+count-1: key (n, n + 1), ids [n, n + 1, ...] of length 1 + n % 5."""
    numbers = np.arange(first, first + count, dtype=np.uint64)
    lengths = (1 + numbers % 5).astype(np.int32)
    ids = np.concatenate([np.arange(n, n + length) for n, length in zip(numbers, lengths, strict=True)])
    keys = np.stack([numbers * 7919 + 1, numbers + 1], axis=1).astype(np.uint64)
    return keys, pa.array([f"p{n}" for n in numbers]), TokenRows(ids.astype(np.uint16),
                                                                   np.zeros(len(ids), np.uint8), lengths)


def _check(store: PassageTokenStore, first: int, count: int) -> None:
    keys, _, expected = _rows(first, count)
    found, rows = store.find(keys)
    assert found.all(), f"{(~found).sum()} of passages {first}..{first + count - 1} not found"
    np.testing.assert_array_equal(rows.lengths, expected.lengths)
    np.testing.assert_array_equal(rows.input_ids, expected.input_ids)


def _read_key_columns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The parts whose key column is read from here on."""
    reads: list[str] = []
    real = pq.read_table

    def counting(path, *args, **kwargs):
        if kwargs.get("columns") == ["passage_key"]:
            reads.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", counting)
    return reads


def test_a_second_store_reads_no_key_column_and_sees_later_commits(workspace: Workspace, monkeypatch) -> None:
    first = PassageTokenStore(workspace, TOKENIZATION)
    for start in (0, 100, 200):
        first.add(*_rows(start, 100), passages_version="v1")
    _check(first, 0, 300)
    reads = _read_key_columns(monkeypatch)
    second = PassageTokenStore(Workspace.resolve(workspace.root), TOKENIZATION)
    _check(second, 0, 300)
    assert reads == [], "the second store read key columns the first had read"
    second.add(*_rows(300, 50), passages_version="v2")
    _check(first, 300, 50)
    assert len(reads) == 1 and len(first) == len(second) == 350
    other = PassageTokenStore(workspace, Tokenization("other", "title-text-pair", 16, 2))
    assert not other.find(_rows(0, 10)[0])[0].any(), "another tokenization's rows"


def test_a_rebuilt_table_starts_the_lookup_over(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    old = PassageTokenStore(Workspace.resolve(root), TOKENIZATION)
    old.add(*_rows(0, 100), passages_version="v1")
    _check(old, 0, 100)
    shutil.rmtree(root)  # the same folder, made again, holds other passages
    again = PassageTokenStore(Workspace.resolve(root), TOKENIZATION)
    assert not again.find(_rows(0, 100)[0])[0].any() and len(again) == 0
    again.add(*_rows(500, 20), passages_version="v1")
    _check(again, 500, 20)
    assert len(again) == 20


def test_threads_adding_and_finding_at_once(workspace: Workspace) -> None:
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            store = PassageTokenStore(workspace, TOKENIZATION)
            for chunk in range(4):
                start = 1000 * thread + 50 * chunk
                store.add(*_rows(start, 50), passages_version="v1")
                _check(store, 1000 * thread, 50 * (chunk + 1))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    store = PassageTokenStore(workspace, TOKENIZATION)
    for thread in range(4):
        _check(store, 1000 * thread, 200)
    assert len(store) == 800
