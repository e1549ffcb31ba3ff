"""`--model` / `--base` resolution: a path that names nothing is refused by name, before any work.

Before, a missing folder such as `/nonexistent/model` (typed into a deployment's `model` field)
was passed on as a Hugging Face name: the run failed deep in huggingface_hub with "Repo id must be
in the form 'repo_name' or 'namespace/repo_name'", and `odqa index build` had already recorded the
model under `indexes/dense/` first."""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.storage import Workspace
from odqa.storage.model_registry import resolve_model


@pytest.mark.parametrize("given", ["/nonexistent/model", "./nope", "../nope/model", "~/no-such-odqa-model",
                                   "a/b/c", "-model", "name."])  # fmt: skip
def test_a_path_that_names_no_model_is_refused_with_what_to_give(workspace: Workspace, given: str) -> None:
    with pytest.raises(FileNotFoundError) as raised:
        resolve_model(workspace, given)
    message = str(raised.value)
    assert f"model {given!r} not found" in message and "does not exist" in message
    assert "model id of this workspace (known: none)" in message and "Hugging Face" in message
    assert "Repo id" not in message


def test_a_file_is_not_a_model_folder(workspace: Workspace, tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0")
    with pytest.raises(FileNotFoundError, match="is a file, not a model folder"):
        resolve_model(workspace, str(weights))


def test_folders_and_hugging_face_names_still_resolve(workspace: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "my model"
    folder.mkdir()
    assert resolve_model(workspace, str(folder)).path == str(folder.resolve())
    for name in ("bert-base-uncased", "facebook/dpr-question_encoder-single-nq-base", "BAAI/bge-small-en-v1.5"):
        ref = resolve_model(workspace, name)
        assert (ref.path, ref.passage_path) == (name, name)
