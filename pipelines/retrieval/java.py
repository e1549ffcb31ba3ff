"""Preflight for the Java runtime that pyserini's Lucene (Anserini) needs.

pyserini starts a JVM the moment its Lucene classes are imported, and Anserini 1.x needs a
JDK 21 or newer that ships the ``jdk.incubator.vector`` module. With an older or missing JDK
the import dies with an obscure JNI error, possibly after minutes of other work, so every BM25
step calls :func:`ensure_java` first: it finds a suitable JDK (``JAVA_HOME``, then the usual
install folders, then ``java`` on ``PATH``), points ``JAVA_HOME`` at it for pyjnius, and
otherwise raises :class:`JavaMissingError` saying exactly what to install. Nothing here imports
pyserini, so the check is cheap and safe to run before anything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from ...storage.atomic import atomic_write_text

log = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 21
VECTOR_MODULE = "jdk.incubator.vector"
JVM_DIRS_ENV = "ODQA_JVM_DIRS"
DEFAULT_JVM_DIRS = ("/usr/lib/jvm", "/usr/lib64/jvm", "/Library/Java/JavaVirtualMachines")

INSTALL_HELP = f"""\
BM25 runs Lucene through pyserini, which needs a Java Development Kit {MIN_JAVA_MAJOR} or newer
that includes the {VECTOR_MODULE} module (every OpenJDK/Temurin build does).
Install one, for example:
  Debian/Ubuntu:  sudo apt-get install openjdk-21-jdk-headless
  Fedora/RHEL:    sudo dnf install java-21-openjdk-devel
  macOS:          brew install openjdk@21
  conda:          conda install -c conda-forge 'openjdk>=21'
  any system:     a Temurin 21+ JDK from https://adoptium.net/
then point JAVA_HOME at it (the folder that contains bin/java), e.g.
  export JAVA_HOME=/usr/lib/jvm/java-21-openjdk-amd64"""


class JavaMissingError(RuntimeError):
    """No JDK 21+ with jdk.incubator.vector was found; the message says what to install."""


@dataclass(frozen=True)
class JavaInfo:
    home: Path
    version: str
    major: int


def _major(version: str) -> int:
    """'25.0.3' -> 25, '21' -> 21, '1.8.0_392' -> 8."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] or [0]
    return parts[1] if parts[0] == 1 and len(parts) > 1 else parts[0]


def _release_facts(home: Path) -> tuple[str, set[str]] | None:
    """Version and module names from the JDK's ``release`` file, if it has one."""
    release = home / "release"
    if not release.is_file():
        return None
    fields = dict(re.findall(r'^(\w+)="?(.*?)"?$', release.read_text(errors="replace"), re.M))
    if "JAVA_VERSION" not in fields:
        return None
    return fields["JAVA_VERSION"], set(fields.get("MODULES", "").split())


def _list_modules(java: Path) -> tuple[str, set[str]] | None:
    """Version and modules by asking the ``java`` binary (for JDKs without a release file)."""
    try:
        out = subprocess.run(
            [str(java), "--list-modules"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    modules = {line.split("@")[0] for line in out.split() if line}
    base = re.search(r"java\.base@(\S+)", out)
    return (base.group(1), modules) if base else None


def _libjvm(home: Path) -> Path | None:
    for name in ("libjvm.so", "libjvm.dylib", "jvm.dll"):
        for folder in (home / "lib" / "server", home / "jre" / "lib" / "server", home / "bin" / "server"):
            if (folder / name).is_file():
                return folder / name
    return None


def inspect_jdk(home: Path) -> JavaInfo | str:
    """A usable JDK at ``home`` as :class:`JavaInfo`, or the reason it is not usable."""
    java = home / "bin" / "java"
    if not java.is_file():
        return "no bin/java"
    facts = _release_facts(home) or _list_modules(java)
    if facts is None:
        return "cannot tell its version"
    version, modules = facts
    if _major(version) < MIN_JAVA_MAJOR:
        return f"Java {version} is older than {MIN_JAVA_MAJOR}"
    if VECTOR_MODULE not in modules:
        return f"Java {version} lacks the {VECTOR_MODULE} module"
    if _libjvm(home) is None:
        return f"Java {version} has no server libjvm (a JRE-only or partial install?)"
    return JavaInfo(home=home.resolve(), version=version, major=_major(version))


def _candidates(env: Mapping[str, str], jvm_dirs: list[Path]) -> Iterator[tuple[str, Path]]:
    if env.get("JAVA_HOME"):
        yield "JAVA_HOME", Path(env["JAVA_HOME"])
    found: list[Path] = []
    for root in jvm_dirs:
        if root.is_dir():
            for child in sorted(root.iterdir()):
                home = child / "Contents" / "Home" if (child / "Contents" / "Home").is_dir() else child
                found.append(home)
    # newest first, so several installed JDKs resolve to the most capable one
    for home in sorted(found, key=lambda h: _major(h.name) if re.search(r"\d", h.name) else 0, reverse=True):
        yield "installed", home
    on_path = shutil.which("java", path=env.get("PATH", ""))
    if on_path:
        yield "PATH", Path(os.path.realpath(on_path)).parent.parent


def check_java(env: Mapping[str, str] | None = None, jvm_dirs: list[Path] | None = None) -> JavaInfo:
    """Find a JDK 21+ with jdk.incubator.vector, or raise :class:`JavaMissingError`.

    ``jvm_dirs`` defaults to ``$ODQA_JVM_DIRS`` (``os.pathsep``-separated) or the usual
    install folders. The first usable candidate wins: ``JAVA_HOME``, installed JDKs (newest
    first), then the ``java`` on ``PATH``.
    """
    env = os.environ if env is None else env
    if jvm_dirs is None:
        listed = env.get(JVM_DIRS_ENV)
        jvm_dirs = [
            Path(p) for p in (listed.split(os.pathsep) if listed is not None else DEFAULT_JVM_DIRS) if p
        ]
    rejected: list[str] = []
    seen: set[Path] = set()
    for origin, home in _candidates(env, jvm_dirs):
        key = home.resolve() if home.exists() else home
        if key in seen:
            continue
        seen.add(key)
        result = inspect_jdk(home)
        if isinstance(result, JavaInfo):
            return result
        rejected.append(f"  {home} ({origin}): {result}")
    checked = "\n".join(rejected) if rejected else "  no JAVA_HOME, no JDK folders, no java on PATH"
    raise JavaMissingError(f"No usable Java found. Checked:\n{checked}\n{INSTALL_HELP}")


def ensure_java(env: MutableMapping[str, str] | None = None) -> JavaInfo:
    """:func:`check_java`, then prepare the environment pyserini reads when it starts the JVM.

    Sets ``JAVA_HOME`` to the JDK found (pyjnius loads libjvm from it) and a placeholder
    ``OPENAI_API_KEY`` when none is set, because importing ``pyserini.search.lucene`` imports
    pyserini's OpenAI encoder, which refuses to load without one. Must run before pyserini is
    imported in this process.
    """
    env = os.environ if env is None else env
    info = check_java(env)
    env["JAVA_HOME"] = str(info.home)
    env.setdefault("OPENAI_API_KEY", "unused-placeholder")
    return info


# Lucene logs a WARNING through java.util.logging when it cannot use its newest MMapDirectory;
# JDK 24+ warns (once, on stderr) when Lucene calls sun.misc.Unsafe. Neither is actionable for
# a user, so the in-process JVM keeps java.util.logging to SEVERE and allows the Unsafe call.
_JUL_PROPERTIES = "handlers = java.util.logging.ConsoleHandler\n.level = SEVERE\n"
UNSAFE_OPTION_SINCE = 24


def quiet_jvm_options(info: JavaInfo, scratch: Path) -> list[str]:
    """JVM options that keep the in-process JVM's non-actionable warnings off the terminal."""
    properties = scratch / "odqa-jul.properties"
    if not properties.exists():
        atomic_write_text(properties, _JUL_PROPERTIES)  # several processes may start a JVM at once
    options = [f"-Djava.util.logging.config.file={properties}"]
    if info.major >= UNSAFE_OPTION_SINCE:
        options.append("--sun-misc-unsafe-memory-access=allow")
    return options


@contextlib.contextmanager
def jvm_stderr_captured() -> Iterator[None]:
    """Send what the JVM prints on file descriptor 2 while it boots ("WARNING: Using incubator
    modules", which no option turns off) to this module's logger at DEBUG level instead of the
    terminal; the descriptor is restored afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").splitlines():
                if line.strip():
                    log.debug("jvm: %s", line)


def start_quiet_jvm(info: JavaInfo) -> None:
    """Start pyserini's JVM in this process (if not yet started) without its boot warnings."""
    import jnius_config

    if not jnius_config.vm_running:
        jnius_config.add_options(*quiet_jvm_options(info, Path(tempfile.gettempdir())))
    with jvm_stderr_captured():
        import pyserini.pyclass  # noqa: F401  (starts the JVM)

