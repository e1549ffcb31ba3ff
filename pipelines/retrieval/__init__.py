"""Retrieval steps: BM25 over Lucene (pyserini), run files and hard-negative selection."""
