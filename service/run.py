"""Running the search service with uvicorn: one process, one event loop, tuned threads."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal

from ..storage.choices import IndexType, RetrieverKind
from .app import create_app, log
from .connections import uvicorn_config
from .releases import BatchSettings


def serve(workspace: str | None, host: str, port: int, *, model: str | None, retriever: RetrieverKind,
          max_wait_ms: float, max_batch: int, poll_s: float, torch_threads: int | None = None,
          encoder_workers: int | None = None, index_type: IndexType | None = None,
          head_limits: dict[str, int | None] | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:  # fmt: skip
    """Run the service with uvicorn until interrupted (one process, one event loop).

    `torch_threads` are torch's intra-op threads, by default half the cores: on a host whose cores
    are busy with other work, fewer threads avoid OpenMP barriers waiting for descheduled threads
    (10x slower there, see benchmarks/RESULTS.md). `encoder_workers` batches run at once, by
    default enough to give every core a torch thread (cores / torch_threads). `head_limits` sets
    `service.connections.uvicorn_config`'s max_url_bytes, max_header_bytes and max_headers (None:
    its default). `allowed_hosts`: `Host` names answered besides the service's own addresses
    (`service.hosts`)."""
    import faiss
    import torch
    import uvicorn

    # `kill -USR1 <pid>` writes every thread's stack to stderr: what a stalled request waits on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    cores = os.cpu_count() or 2
    torch.set_num_threads(torch_threads or max(1, cores // 2))
    encoder_workers = encoder_workers or max(1, cores // torch.get_num_threads())
    # Parallelism comes from the encoder workers (FAISS releases the GIL); FAISS's own OpenMP
    # regions, entered from several worker threads at once next to torch's, are not needed for a
    # micro-batch and were the suspect of one request that never returned under load.
    faiss.omp_set_num_threads(1)

    odqa_log = logging.getLogger("odqa")
    odqa_log.setLevel(logging.INFO)  # loads, swaps, frees and load failures are what an operator watches
    if not odqa_log.handlers and not logging.getLogger().handlers:  # importing Prefect usually sets one up
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        odqa_log.addHandler(handler)
    app = create_app(workspace, model=model, retriever=retriever, index_type=index_type, poll_s=poll_s,
                     batching=BatchSettings(max_wait_s=max_wait_ms / 1000, max_items=max_batch,
                                            encoder_workers=encoder_workers), address=f"http://{host}:{port}")  # fmt: skip
    log.info("torch intra-op threads: %d, encoder workers: %d", torch.get_num_threads(), encoder_workers)
    limits = {name: value for name, value in (head_limits or {}).items() if value is not None}
    uvicorn.Server(uvicorn_config(app, host, port, extra_hosts=allowed_hosts, **limits)).run()
