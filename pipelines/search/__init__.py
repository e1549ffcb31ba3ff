"""Search: one interface for every retriever (BM25, dense, hybrid) and the index checks around it.

A :class:`~pipelines.search.searcher.Searcher` answers ``search(questions, k)`` with
:class:`~pipelines.search.hits.Hits`; retrieval runs, `odqa search`, hybrid tuning, hard-negative
mining, query-side fine-tuning and the HTTP service all go through it. Nothing here knows a
workspace: searchers are built from index folders and loaded encoders, and whether an index is
missing or stale is decided from fingerprints (`pipelines.search.freshness`).
"""
