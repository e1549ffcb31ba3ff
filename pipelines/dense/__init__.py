"""Dense retrieval at corpus scale: sharded encoding, FAISS indexes, hybrid fusion with BM25,
iterative hard-negative mining, query-side fine-tuning and the t-SNE tower probe.

Every step here is pure (numpy arrays, Arrow tables, plain directories handed in by the caller);
the flows (`flows/stages/encode.py`, `flows/stages/index.py`, ...) and `storage.index_layout` decide where the workspace keeps the results.
"""
