"""`odqa export model`: trained SDE, two-tower and TASER models load with sentence-transformers in a
process that cannot import odqa, and give odqa's own vectors; DESIRE-ME is refused with a reason."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from odqa.models.retriever import load_retriever
from odqa.storage import Workspace
from tests.models.filled_workspace import fill_workspace

# Looked up, not imported: the models load in a subprocess, and importing sentence-transformers here
# cost every pytest worker ~6 CPU-s of its collection.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                                reason="sentence-transformers is not installed (the bench extra)")

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = ["Who wrote Hamlet?", "What is the capital of France?"]
PASSAGES = [("Hamlet", "Hamlet is a tragedy by William Shakespeare."), ("Paris", "Paris is the capital of France.")]

# Runs in a fresh interpreter from an empty folder: the editable install's way to odqa (the
# repository on sys.path, or setuptools' import finder) is removed first, and the script checks
# that odqa's packages cannot be imported.
LOADER = """
import json, os, sys
repo = os.path.realpath(sys.argv[1])
sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != repo]
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
import importlib.util
leaked = [n for n in ("flows", "models", "pipelines", "storage", "service", "odqa") if importlib.util.find_spec(n)]
assert not leaked, f"odqa packages importable: {leaked}"
from sentence_transformers import SentenceTransformer
from transformers import AutoModel
spec = json.loads(sys.argv[2])
out = {}
for path, hf_folders in spec["models"].items():
    model = SentenceTransformer(path, device="cpu")
    for folder in hf_folders:
        AutoModel.from_pretrained(path + "/" + folder)
    out[path] = {"q": model.encode_query(spec["questions"]).tolist(),
                 "p": model.encode_document([tuple(pair) for pair in spec["passages"]]).tolist()}
print(json.dumps(out))
"""


def _vectors_without_odqa(folders: dict[str, list[str]], cwd: Path) -> dict[str, dict[str, list]]:
    spec = json.dumps({"models": folders, "questions": QUESTIONS, "passages": PASSAGES})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", LOADER, str(REPO), spec], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_exported_models_give_odqa_vectors_without_odqa(cli, tiny_checkpoint, tmp_path):
    """SDE (one encoder), ADE (two towers) and TASER Det-R (expert routes), each trained 2 steps."""
    root = tmp_path / "ws"
    fill_workspace(root)
    layouts = {"sde": "single", "ade": "router", "taser": "router"}
    folders: dict[str, list[str]] = {}
    for arch, layout in layouts.items():
        cli("--workspace", str(root), "train", "--arch", arch, "--base", tiny_checkpoint, "--train", "toy:train",
            "--model-id", arch, "--max-steps", "2", "--batch-size", "3", "--lr", "1e-3")  # fmt: skip
        out = tmp_path / "exported" / arch
        result = cli("--workspace", str(root), "export", "model", arch, "--format", "sentence-transformers",
                     "--out", str(out))  # fmt: skip
        assert "export model: done" in result.output
        modules = json.loads((out / "modules.json").read_text())
        assert any(m["type"].endswith("Router") for m in modules) == (layout == "router")
        card = (out / "README.md").read_text()
        assert "(title, text) pair" in card and f"arch `{arch}`" in card
        hf = ["."] if layout == "single" else ["query_0_Transformer", "document_0_Transformer"]
        folders[str(out)] = hf
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    vectors = _vectors_without_odqa(folders, empty)

    for arch in layouts:
        model = load_retriever(Workspace.resolve(root).models_dir / arch)
        theirs = vectors[str(tmp_path / "exported" / arch)]
        ours_q = model.encode_questions(QUESTIONS, show_progress=False)
        ours_p = model.encode_passages([t for t, _ in PASSAGES], [x for _, x in PASSAGES], show_progress=False)
        assert _cosines(np.array(theirs["q"]), ours_q).min() >= 0.999, arch
        assert _cosines(np.array(theirs["p"]), ours_p).min() >= 0.999, arch


def test_desire_me_export_is_refused_with_the_reason(cli, tiny_checkpoint, tmp_path):
    root = tmp_path / "ws"
    fill_workspace(root)
    common = ["--workspace", str(root), "train", "--train", "toy:train", "--max-steps", "1", "--batch-size", "3"]
    cli(*common, "--arch", "sde", "--base", tiny_checkpoint, "--model-id", "base")
    cli(*common, "--arch", "desire-me", "--base", "base", "--model-id", "dme")
    result = cli("--workspace", str(root), "export", "model", "dme", "--out", str(tmp_path / "x"), ok=False)
    assert result.exit_code == 1
    assert "learned gate" in result.output and "Export the base retriever" in result.output
    assert not (tmp_path / "x").exists()
