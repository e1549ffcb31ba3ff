"""The one way from a model to a searcher: `--model` resolved once, then its searcher opened.

Every verb that searches (retrieve, search, mine, QSFT, tune-hybrid, BM25 negatives, the
experiments through them), the Python API (`odqa.Workspace.searcher`) and the search service
open their searchers here, so they answer alike. As in pyserini, each kind owns how it opens its
index and the hybrid composes the other two:

* `encoders`: models by path with their fingerprints, loaded once and again when saved anew (one
  cache per thread for the flows, one shared by a service's encoder workers);
* `bm25`: the BM25 index of the current passages;
* `dense`: the model's FAISS index for the current passages, opened only after its fingerprints
  were compared with the passages and the passage encoder's weights;
* `choice`: `RetrieverChoice` (bm25, dense, hybrid and their options) and `open_searcher`, which
  resolves the model once and passes the resolved `ModelRef` down;
* `release`: a published release's searchers, for the service (index preference, fingerprint check).

No Prefect here: the service and the API open searchers without a server. A verb that may build
a missing index passes its builder in (`open_searcher(..., ensure_index=...)`).
"""

from .choice import IndexBuilder, OpenSearcher, RetrieverChoice, open_searcher, tuned_alpha
from .encoders import EncoderCache, LoadedModel, loaded_model

__all__ = ["EncoderCache", "IndexBuilder", "LoadedModel", "OpenSearcher", "RetrieverChoice", "loaded_model",
           "open_searcher", "tuned_alpha"]  # fmt: skip
