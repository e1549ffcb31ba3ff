"""The JDK preflight: finds a suitable JDK, or fails fast saying what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from odqa.pipelines.retrieval.java import JavaInfo, JavaMissingError, check_java, ensure_java, inspect_jdk

REPO_ROOT = Path(__file__).resolve().parents[2]


def fake_jdk(root: Path, name: str, version: str, modules: str, libjvm: bool = True) -> Path:
    """A folder laid out like a JDK (bin/java, release, lib/server/libjvm.so) that never runs."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (home / "bin" / "java").chmod(0o755)
    (home / "release").write_text(f'JAVA_VERSION="{version}"\nMODULES="java.base {modules}"\n')
    if libjvm:
        (home / "lib" / "server").mkdir(parents=True)
        (home / "lib" / "server" / "libjvm.so").write_bytes(b"")
    return home


def test_inspect_jdk_reasons(tmp_path: Path) -> None:
    assert inspect_jdk(tmp_path / "missing") == "no bin/java"
    old = fake_jdk(tmp_path, "jdk-17", "17.0.15", "jdk.incubator.vector")
    assert "older than 21" in inspect_jdk(old)
    legacy = fake_jdk(tmp_path, "jdk-8", "1.8.0_392", "")
    assert "1.8.0_392 is older than 21" in inspect_jdk(legacy)
    no_vector = fake_jdk(tmp_path, "jdk-21-slim", "21.0.2", "java.sql")
    assert "lacks the jdk.incubator.vector module" in inspect_jdk(no_vector)
    jre = fake_jdk(tmp_path, "jdk-22-partial", "22", "jdk.incubator.vector", libjvm=False)
    assert "no server libjvm" in inspect_jdk(jre)
    good = fake_jdk(tmp_path, "jdk-21", "21.0.2", "jdk.incubator.vector")
    assert inspect_jdk(good) == JavaInfo(home=good.resolve(), version="21.0.2", major=21)


def test_check_java_prefers_usable_and_newest(tmp_path: Path) -> None:
    fake_jdk(tmp_path, "java-17-openjdk", "17.0.15", "jdk.incubator.vector")
    fake_jdk(tmp_path, "temurin-21-jdk", "21.0.2", "jdk.incubator.vector")
    newest = fake_jdk(tmp_path, "temurin-25-jdk", "25.0.3", "jdk.incubator.vector")
    env = {"JAVA_HOME": str(tmp_path / "java-17-openjdk"), "PATH": ""}
    # JAVA_HOME points at 17: rejected, the newest installed JDK wins
    assert check_java(env, jvm_dirs=[tmp_path]).home == newest.resolve()
    env["JAVA_HOME"] = str(tmp_path / "temurin-21-jdk")
    assert check_java(env, jvm_dirs=[tmp_path]).major == 21  # a usable JAVA_HOME is respected


def test_ensure_java_sets_environment(tmp_path: Path) -> None:
    good = fake_jdk(tmp_path, "temurin-21-jdk", "21.0.2", "jdk.incubator.vector")
    env = {"JAVA_HOME": "/nonexistent", "PATH": "", "ODQA_JVM_DIRS": str(tmp_path)}
    info = ensure_java(env)
    assert env["JAVA_HOME"] == str(good.resolve()) == str(info.home)
    assert env["OPENAI_API_KEY"]  # placeholder so pyserini.search.lucene can be imported


PREFLIGHT_SCRIPT = """
import sys

import pytest
import odqa.pipelines.retrieval.bm25, odqa.pipelines.retrieval.trec, odqa.pipelines.retrieval.negatives
import odqa.pipelines.evaluation.metrics
assert "pyserini" not in sys.modules and "jnius" not in sys.modules, "imported pyserini too early"
from pathlib import Path
from odqa.pipelines.retrieval.bm25 import build_bm25_index
from odqa.pipelines.retrieval.java import JavaMissingError
try:
    build_bm25_index(iter([("p1", "t", "x")]), Path(sys.argv[1]), snapshot="s")
except JavaMissingError as error:
    assert "pyserini" not in sys.modules, "JVM bridge loaded before the preflight failed"
    print(error)
    sys.exit(3)
"""


def test_missing_jdk_fails_fast_with_install_instructions(tmp_path: Path) -> None:
    fake_jdk(tmp_path / "jvms", "java-17-openjdk", "17.0.15", "jdk.incubator.vector")
    env = {
        "JAVA_HOME": str(tmp_path / "no-such-jdk"),
        "PATH": str(tmp_path / "empty-bin"),
        "ODQA_JVM_DIRS": str(tmp_path / "jvms"),
        "PYTHONPATH": str(REPO_ROOT),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT_SCRIPT, str(tmp_path / "index")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    message = done.stdout
    assert "no-such-jdk (JAVA_HOME): no bin/java" in message
    assert "java-17-openjdk (installed): Java 17.0.15 is older than 21" in message
    assert "sudo apt-get install openjdk-21-jdk-headless" in message
    assert "export JAVA_HOME=" in message and "jdk.incubator.vector" in message
    assert not (tmp_path / "index").exists()


def test_real_machine_jdk_is_found_or_explained() -> None:
    """On this machine: either a usable JDK, or the error lists what was checked."""
    try:
        info = check_java()
    except JavaMissingError as error:
        assert "Checked:" in str(error)
    else:
        assert info.major >= 21 and (info.home / "bin" / "java").is_file()
        assert os.access(info.home / "bin" / "java", os.X_OK)


JVM_BOOT = (
    "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s'); "
    "from odqa.pipelines.retrieval.java import ensure_java, start_quiet_jvm; info = ensure_java(); "
    "{start}; from pyserini.pyclass import autoclass; "
    "autoclass('java.util.logging.Logger').getLogger('odqa.test').warning('lucene-style warning')"
)


def _boot_jvm(start: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-c", JVM_BOOT.format(start=start)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_quiet_jvm_start_keeps_warnings_off_the_terminal() -> None:
    try:
        check_java()
    except JavaMissingError:
        pytest.skip("no JDK 21+ with jdk.incubator.vector here")
    loud = _boot_jvm("import pyserini.pyclass")
    assert loud.returncode == 0, loud.stderr
    assert "WARNING" in loud.stderr  # the control: pyserini's own start prints JVM warnings
    quiet = _boot_jvm("start_quiet_jvm(info)")
    assert quiet.returncode == 0, quiet.stderr
    assert "WARNING" not in quiet.stderr and "lucene-style warning" not in quiet.stderr, quiet.stderr
    assert "jvm: WARNING: Using incubator modules" in quiet.stdout  # kept, in the debug log
