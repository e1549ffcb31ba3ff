"""A BM25 retrieval and a BM25-only re-index (the scheduled run of a workspace without a model) do
not import torch or transformers: ~4 CPU-s and seconds of every such command and flow-run process.
The flow modules are imported in a fresh interpreter (this worker has torch loaded already)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.serve.harness import REPO, subprocess_env

IMPORTS = """
import json, sys
import odqa.flows.compositions.reindex, odqa.flows.stages.retrieve, odqa.flows.stages.negatives
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & {"torch", "transformers"})))
"""


def test_bm25_flow_modules_do_not_import_torch() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, env=subprocess_env(),
                          cwd=REPO, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], done.stdout
