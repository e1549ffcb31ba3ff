"""odqa's public Python API: what a notebook or another harness needs, without reaching into the
pipeline's layers.

    import odqa

    ws = odqa.open_workspace("workspace")
    for hit in ws.searcher("bm25").search(["Where was Marie Curie born?"], k=3)[0]:
        print(hit.rank, hit.passage_id, hit.title)
    model = odqa.load_retriever("dpr", workspace=ws)  # BEIR's model interface
    vectors = model.encode_corpus([{"title": "Warsaw", "text": "Warsaw is the capital of Poland."}])

Searching, encoding and reading tables import no Prefect; `Workspace.evaluate` reuses the
evaluate verb's scoring and imports Prefect's library (it starts no server). `docs/python-api.md`
has the whole tour; `odqa.langchain` holds a LangChain retriever (extra `odqa[langchain]`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# oneDNN, torch's CPU kernels, keeps a compiled primitive per operation shape, up to 1,024 of them.
# Length-bucketed training (the default) and length-sorted encoding bring many shapes, and that
# cache alone grew a CPU training process by 2-3 GB; 64 entries hold a step's shapes and were no
# slower (benchmarks/RESULTS.md, "Bucketed training by default"). oneDNN reads this at its first
# primitive, so it is set here, where every `odqa.*` import passes first; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

if TYPE_CHECKING:
    from .api.encoders import BeirRetriever, load_retriever
    from .api.search import Hit, Searcher
    from .api.workspace import Workspace, open_workspace

__all__ = ["BeirRetriever", "Hit", "Searcher", "Workspace", "load_retriever", "open_workspace"]


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use: every `odqa.*` module (the CLI, the service, a BM25
    search) imports this package first, and must not pay for torch and transformers with it."""
    if name in ("BeirRetriever", "load_retriever"):
        from .api import encoders as module
    elif name in ("Hit", "Searcher"):
        from .api import search as module
    elif name in ("Workspace", "open_workspace"):
        from .api import workspace as module
    else:
        raise AttributeError(f"module 'odqa' has no attribute {name!r}")
    return getattr(module, name)
