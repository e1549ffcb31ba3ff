"""`odqa serve`: the HTTP search service over the workspace's published indexes (the `service` package)."""

from __future__ import annotations

import click

from .groups import INDEX_TYPES, RETRIEVER_CHOICES, main, workspace_arg
from .numbers import FiniteRange


@main.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8000, show_default=True)
@click.option("--model", default=None,
              help="Question encoder (default: the release's default model; a query-side fine-tune of a served "
                   "model also works).")
@click.option("--index-type", type=click.Choice(INDEX_TYPES), default=None,
              help="Dense index searched (default: flat if built, else hnsw, else ivfpq).")
@click.option("--retriever", type=click.Choice(RETRIEVER_CHOICES), default="dense", show_default=True,
              help="Retriever of requests that name none.")  # fmt: skip
@click.option("--max-wait-ms", type=FiniteRange(min=0, max=50), default=5.0, show_default=True,
              help="Longest wait for more concurrent questions before encoding a batch.")  # fmt: skip
@click.option("--max-batch", type=click.IntRange(min=1, max=4096), default=256, show_default=True,
              help="Most questions encoded in one batch.")  # fmt: skip
@click.option("--poll-seconds", type=FiniteRange(min=0.1), default=1.0, show_default=True,
              help="How often to check for a newly published release.")  # fmt: skip
@click.option("--torch-threads", type=click.IntRange(min=1), default=None,
              help="torch intra-op threads per encoder worker (default: half the cores).")
@click.option("--encoder-workers", type=click.IntRange(min=1, max=64), default=None,
              help="Question-encoding batches run at once, threads sharing the model "
                   "(default: cores / torch threads).")
@click.option("--max-url-bytes", type=click.IntRange(min=64), default=None,
              help="Longest request line (URL); a longer one gets 414 (default 8,192).")
@click.option("--max-header-bytes", type=click.IntRange(min=256), default=None,
              help="Largest request head (request line and headers); a larger one gets 431 (default 65,536).")
@click.option("--max-headers", type=click.IntRange(min=1), default=None,
              help="Most header fields of a request; more get 431 (default 100).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests for this Host name (repeatable; also $ODQA_SERVE_ALLOWED_HOSTS, "
                   "comma-separated; '*' answers any). By default only the addresses it listens on are answered "
                   "(127.0.0.1, localhost, [::1]; on 0.0.0.0 also any IP address and this machine's name): "
                   "a web page that points its own name at this machine gets 421.")  # fmt: skip
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, model: str | None, index_type: str | None, retriever: str,
          max_wait_ms: float, max_batch: int, poll_seconds: float, torch_threads: int | None,
          encoder_workers: int | None, max_url_bytes: int | None, max_header_bytes: int | None,
          max_headers: int | None, allowed_hosts: tuple[str, ...]) -> None:  # fmt: skip
    """Serve POST /search, GET /health, GET /index, a search page at / and API docs at /docs (offline).

    Answers from the indexes the workspace published last (every `odqa bm25 index`, `odqa index
    build` and `odqa reindex` publishes its builds) and follows them: a newly published release is
    loaded beside the old one and swapped in atomically; no Prefect server runs."""
    from ...service.connections import allowed_hosts as answered_hosts
    from ...service.run import serve as run_service

    click.echo(f"odqa serve: http://{host}:{port}/ (docs at /docs); Ctrl-C stops", err=True)
    click.echo(f"odqa serve: answers requests for Host {answered_hosts(host, allowed_hosts).describe()} "
               "(--allowed-host adds one)", err=True)  # fmt: skip
    run_service(workspace_arg(ctx), host, port, model=model, index_type=index_type, retriever=retriever,
                max_wait_ms=max_wait_ms,
                max_batch=max_batch, poll_s=poll_seconds, torch_threads=torch_threads,
                encoder_workers=encoder_workers, allowed_hosts=allowed_hosts, head_limits={"max_url_bytes": max_url_bytes,
                "max_header_bytes": max_header_bytes, "max_headers": max_headers})  # fmt: skip
