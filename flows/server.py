"""`./run server`: a local Prefect server with every odqa deployment, ready to run from the UI.

Starts `prefect server start` bound to 127.0.0.1, creates the process work pool, the `gpu` tag
concurrency limit (one GPU task per device), deploys everything in prefect.yaml
(`prefect deploy --all`) and starts a worker for the pool; prints the UI URL and keeps running
until Ctrl-C, which stops the worker and the server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
POOL = "odqa-process"
GPU_TAG = "gpu"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def gpu_slots() -> int:
    """Concurrent `gpu`-tagged tasks allowed: one per device (one on a CPU-only machine)."""
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except ImportError:
        return 1


def prefect_env(api_url: str, home: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "ODQA_HOME": str(REPO_ROOT), "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1")})  # fmt: skip
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    return env


def prefect(args: list[str], env: dict[str, str], timeout: float = 600) -> str:
    """Run the Prefect CLI of this interpreter; a failure raises with the CLI's output.

    Goes through `python -m flows.server prefect ...` so the CLI runs with `_fix_worker_filter`.
    """
    command = [sys.executable, "-m", "flows.server", "prefect", *args]
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"prefect {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def wait_healthy(api_url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {process.returncode} before it was healthy")
        if time.monotonic() > deadline:
            raise TimeoutError(f"prefect server at {api_url} not healthy after {timeout:.0f}s")
        time.sleep(1)


@dataclass
class LocalPrefect:
    """A running local server (and worker); `api_url` for clients, `ui_url` for people."""

    host: str
    port: int
    env: dict[str, str]
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop the worker first (it reports to the server), then the server."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def local_prefect(
    host: str = "127.0.0.1", port: int | None = None, home: Path | None = None, pool: str = POOL,
    deploy: bool = True, worker: bool = True, startup_timeout: float = 300, log_dir: Path | None = None,
) -> Iterator[LocalPrefect]:  # fmt: skip
    """Server + pool + gpu limit + deployments + worker, stopped when the block ends."""
    port = port or free_port(host)
    env = prefect_env(f"http://{host}:{port}/api", home)
    logs = log_dir or (home or REPO_ROOT / "workspace") / "prefect-logs"
    logs.mkdir(parents=True, exist_ok=True)
    running = LocalPrefect(host, port, env)
    server_log = open(logs / "server.log", "ab")  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
                              env=env, cwd=REPO_ROOT, stdout=server_log, stderr=subprocess.STDOUT)  # fmt: skip
    running.processes.append(server)
    try:
        wait_healthy(running.api_url, server, startup_timeout)
        prefect(["work-pool", "create", pool, "--type", "process", "--overwrite"], env)
        prefect(["concurrency-limit", "create", GPU_TAG, str(gpu_slots())], env)
        if deploy:
            prefect(["--no-prompt", "deploy", "--all"], env)
        if worker:
            worker_log = open(logs / "worker.log", "ab")  # noqa: SIM115
            running.processes.append(subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"],
                env=env, cwd=REPO_ROOT, stdout=worker_log, stderr=subprocess.STDOUT))  # fmt: skip
        yield running
    finally:
        running.stop()
        server_log.close()


def _fix_worker_filter() -> None:
    """Work around Prefect 3.8.8's `prefect deploy`: after creating a deployment it asks for the
    pool's online workers with `limit=None, offset=None`, which the 3.8.8 server rejects (HTTP 422),
    so `deploy --all` stops after the first deployment. Send the server's defaults instead."""
    from prefect.client.orchestration import PrefectClient

    original = PrefectClient.read_workers_for_work_pool
    if getattr(original, "odqa_fixed", False):
        return

    async def read_workers_for_work_pool(self, work_pool_name, worker_filter=None, offset=None, limit=None):
        return await original(self, work_pool_name, worker_filter=worker_filter, offset=offset or 0,
                              limit=limit if limit is not None else 200)  # fmt: skip

    read_workers_for_work_pool.odqa_fixed = True  # type: ignore[attr-defined]
    PrefectClient.read_workers_for_work_pool = read_workers_for_work_pool  # type: ignore[method-assign]


def run_prefect_cli(args: list[str]) -> int:
    """`python -m flows.server prefect ARGS`: the Prefect CLI with `_fix_worker_filter` applied."""
    _fix_worker_filter()
    from prefect.cli import app

    sys.argv = ["prefect", *args]
    try:
        app()
    except SystemExit as done:
        return int(done.code or 0) if not isinstance(done.code, str) else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prefect"]:
        return run_prefect_cli(argv[1:])
    parser = argparse.ArgumentParser(prog="./run server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4200, help="server port on 127.0.0.1 (default 4200)")
    parser.add_argument("--pool", default=POOL, help=f"process work pool name (default {POOL})")
    parser.add_argument("--no-deploy", action="store_true", help="do not run `prefect deploy --all`")
    args = parser.parse_args(argv)
    print(f"odqa server: starting Prefect on http://127.0.0.1:{args.port} ...", flush=True)
    try:
        with local_prefect(port=args.port, pool=args.pool, deploy=not args.no_deploy) as running:
            print(f"odqa server: UI at {running.ui_url}  (API {running.api_url})", flush=True)
            print(f"odqa server: work pool {args.pool!r} with a worker; deployments from prefect.yaml; "
                  f"'{GPU_TAG}' tag limit {gpu_slots()}", flush=True)  # fmt: skip
            print(f"odqa server: in another shell: export PREFECT_API_URL={running.api_url}", flush=True)
            print("odqa server: Ctrl-C stops the worker and the server", flush=True)
            while all(p.poll() is None for p in running.processes):
                time.sleep(1)
            print("odqa server: a process exited; stopping", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("\nodqa server: stopped", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
