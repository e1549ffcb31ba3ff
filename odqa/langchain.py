"""A LangChain retriever over odqa: a workspace searched in this process, or a running `odqa serve`.

    from .langchain import OdqaRetriever

    local = OdqaRetriever(workspace="workspace", retriever="dense", model="dpr", k=5)
    remote = OdqaRetriever(url="http://127.0.0.1:8000", retriever="hybrid", k=5)
    docs = local.invoke("Where was Marie Curie born?")

Each passage becomes ``Document(page_content=text, metadata={passage_id, title, score, rank})``.
Over HTTP it uses the service's REST v1 route (`service.rest_v1`), whose ``{index}`` is the
retriever (or the served model's name). Needs the extra: ``pip install "odqa[langchain]"``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import PrivateAttr, model_validator

from .api.search import Searcher
from .api.workspace import open_workspace
from .pipelines.search.limits import checked_k


class OdqaRetriever(BaseRetriever):
    """Top `k` passages of a query from odqa, in process (`workspace`) or over HTTP (`url`)."""

    workspace: str | None = None
    """An odqa workspace folder, searched in this process."""
    url: str | None = None
    """The base URL of a running `odqa serve`, e.g. http://127.0.0.1:8000."""
    retriever: str = "bm25"
    """bm25, dense or hybrid; over HTTP also the served model's name."""
    model: str | None = None
    """In process, dense and hybrid: a model id, folder or Hugging Face name."""
    alpha: float | None = None
    """Hybrid: the weight of BM25 (default: the tuned one)."""
    k: int = 4
    timeout_s: float = 60.0
    """Over HTTP: seconds to wait for an answer."""

    _searcher: Searcher | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_source(self) -> OdqaRetriever:
        if (self.workspace is None) == (self.url is None):
            raise ValueError("give exactly one of workspace= (search in this process) or url= (a running odqa serve)")
        checked_k(self.k)
        return self

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.url is not None:
            return self._over_http(query)
        if self._searcher is None:
            self._searcher = open_workspace(self.workspace).searcher(self.retriever, self.model, alpha=self.alpha)
        return [Document(page_content=hit.text or "",
                         metadata={"passage_id": hit.passage_id, "title": hit.title, "score": hit.score,
                                   "rank": hit.rank})
                for hit in self._searcher.search([query], self.k)[0]]  # fmt: skip

    def _over_http(self, query: str) -> list[Document]:
        address = f"{self.url.rstrip('/')}/v1/{quote(self.retriever, safe='')}/search"  # type: ignore[union-attr]
        params = {"query": query, "hits": self.k, **({"alpha": self.alpha} if self.alpha is not None else {})}
        reply = requests.get(address, params=params, timeout=self.timeout_s)
        if reply.status_code != 200:
            raise RuntimeError(f"odqa serve at {self.url} answered {reply.status_code}: {_error_text(reply)}")
        return [Document(page_content=hit["doc"].get("text") or "",
                         metadata={"passage_id": hit["docid"], "title": hit["doc"].get("title"), "score": hit["score"],
                                   "rank": hit["rank"]})
                for hit in reply.json()["candidates"]]  # fmt: skip

    def close(self) -> None:
        """Free the in-process searcher's index (a later query opens it again)."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None


def _error_text(reply: Any) -> str:
    try:
        return str(reply.json().get("error"))[:500]
    except ValueError:
        return reply.text[:500]
