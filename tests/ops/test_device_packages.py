"""benchmarks/device_packages.py: packages cut into parts for a GPU machine's 64 MiB calls come
back whole there, or the unpack says which part is missing or damaged; odqa is laid out beside
them as pyproject.toml maps it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("device_packages", REPO_ROOT / "benchmarks" / "device_packages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def packed(tmp_path):
    script = load_script()
    site = tmp_path / "site"
    (site / "tinypkg").mkdir(parents=True)
    (site / "tinypkg" / "__init__.py").write_text("VALUE = 42\n")
    (site / "tinypkg" / "blob.bin").write_bytes(os.urandom(20_000))  # incompressible: several parts
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(b"BZh9 not really")
    carry = tmp_path / "carry"
    manifest = script.pack_site(site, carry, 4096, ("tinypkg==1",), dump)
    return script, site, carry, manifest


@pytest.mark.parametrize("with_xz_binary", [True, False])
def test_parts_unpack_to_the_packed_site_and_odqa_imports_from_it(packed, tmp_path, monkeypatch, with_xz_binary):
    script, site, carry, manifest = packed
    if not with_xz_binary:  # the device may lack xz: Python's lzma writes and reads the same format
        monkeypatch.setattr(script.shutil, "which", lambda name: None)
        manifest = script.pack_site(site, carry, 4096, ("tinypkg==1",), None)
    assert len(manifest["parts"]) >= 4
    assert all((carry / part).stat().st_size <= 4096 for part in manifest["parts"])
    assert (carry / Path(manifest["parts"][-1]).parent / script.MANIFEST).exists()
    target, checkout = tmp_path / "target", tmp_path / "checkout"  # the device's copy of the repository
    shutil.copytree(REPO_ROOT / "odqa", checkout / "odqa", ignore=shutil.ignore_patterns("__pycache__"))
    script.unpack(carry, target, checkout / "odqa")
    script.unpack(carry, target, checkout / "odqa")  # a second call finds it done and says so again
    assert (target / "tinypkg" / "blob.bin").read_bytes() == (site / "tinypkg" / "blob.bin").read_bytes()
    assert (checkout / "odqa" / "models").resolve() == (REPO_ROOT / "models").resolve()
    env = (target / "env.sh").read_text()
    assert f"PYTHONPATH={target}" in env
    assert ("ODQA_BENCH_DUMP" in env) == with_xz_binary
    probe = "import odqa.storage, tinypkg; print(odqa.storage.__file__, tinypkg.VALUE)"
    out = subprocess.run(["bash", "-c", f". {target}/env.sh && {sys.executable} -c '{probe}'"], cwd=checkout,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert out[0] == str(checkout / "odqa" / "storage" / "__init__.py") and out[1] == "42"


def test_a_part_not_yet_carried_is_named(packed, tmp_path):
    script, _, carry, manifest = packed
    second = carry / manifest["parts"][1]
    second.unlink()
    with pytest.raises(SystemExit, match=second.parent.name):
        script.unpack(carry, tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_a_damaged_part_fails_on_its_checksum_before_anything_is_extracted(packed, tmp_path):
    script, _, carry, manifest = packed
    part = carry / manifest["parts"][0]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(SystemExit, match="sha256"):
        script.unpack(carry, tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_without_the_last_part_there_is_no_manifest_to_go_by(packed, tmp_path):
    script, _, carry, manifest = packed
    (carry / Path(manifest["parts"][-1]).parent / script.MANIFEST).unlink()
    with pytest.raises(SystemExit, match="last part"):
        script.unpack(carry, tmp_path / "target")


def test_a_folder_it_did_not_fill_is_never_emptied(packed, tmp_path):
    script, _, carry, _ = packed
    target = tmp_path / "someone-elses"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not an unpack of ours"):
        script.unpack(carry, target, tmp_path / "unused")
    assert (target / "keep.txt").read_text() == "mine"
