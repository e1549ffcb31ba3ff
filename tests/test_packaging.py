"""What an install puts on sys.path: one name, `odqa`, whatever the caller's own folder holds.

Researchers' repositories have their own `models/` and `storage/` packages; odqa's layers are
`odqa.models`, `odqa.storage`, ... so neither side shadows the other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("api", "flows", "models", "pipelines", "storage", "service")


def _package_folders() -> set[str]:
    found = set()
    for top in ("odqa", *LAYERS):
        for init in (REPO_ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO_ROOT).parts
            found.add(".".join(parts if parts[0] == "odqa" else ("odqa", *parts)))
    return found


def test_every_package_folder_is_installed() -> None:
    """A subpackage missing from pyproject's list would work from the checkout and vanish from a
    wheel; the list must name them all, and nothing that is not there."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    assert listed == _package_folders()


def _foreign_folder(tmp_path: Path) -> Path:
    """A user's project with packages named like odqa's layers."""
    for name in (*LAYERS, "odqa_user"):
        package = tmp_path / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"MARK = 'user-{name}'\n", encoding="utf-8")
    return tmp_path


def test_odqa_works_from_a_folder_with_its_own_models_and_storage(tmp_path: Path) -> None:
    folder = _foreign_folder(tmp_path / "project")
    workspace = tmp_path / "ws"
    script = f"""
import api, flows, models, pipelines, service, storage
assert [m.MARK for m in (api, flows, models, pipelines, service, storage)] == [
    'user-api', 'user-flows', 'user-models', 'user-pipelines', 'user-service', 'user-storage']
import odqa, odqa.models
from odqa.storage import Workspace
ws = Workspace.resolve({str(workspace)!r})
assert odqa.models.__name__ == 'odqa.models' and 'user' not in repr(odqa.models)
odqa.open_workspace({str(workspace)!r}).tables()  # the public API, from the user's folder
print(ws.root)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=folder, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(workspace)


def test_only_odqa_is_importable_by_name(tmp_path: Path) -> None:
    """From a neutral folder, the layers are not top-level modules of the install."""
    for name in LAYERS:
        result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, name


def test_the_console_script_runs_from_a_foreign_folder(tmp_path: Path) -> None:
    folder = _foreign_folder(tmp_path)
    odqa = Path(sys.executable).with_name("odqa")
    result = subprocess.run([str(odqa), "--help"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Usage: odqa" in result.stdout
