"""The Python packages a lent GPU machine lacks, brought over in parts, and odqa laid out there.

The device image holds torch, transformers and sentence-transformers but not faiss, duckdb or
mwparserfromhell, nothing can be fetched there, and one device call carries at most 64 MiB.
faiss-gpu needs CUDA 12's cuBLAS (its symbols are versioned ``libcublas.so.12``; the image's
CUDA 13 libraries cannot stand in), a 347 MiB wheel, so the packages are installed here for the
device's Python (pip ``--target`` with its platform tags), packed as one xz archive (cuBLAS's
kernels compress to about a fifth with xz where its wheel's zip keeps two thirds) and cut into
parts of at most ``--part-mib``, one folder each, so one call carries one part. The parts stay on
the warm machine between calls (ignored paths are kept there); the last call unpacks them.

Here (once; ``.device-carry/`` is ignored by git):

    python3 benchmarks/device_packages.py pack            # prints the calls to make

There, in the call that carries the last part (stdlib only, Python 3.12):

    python3 benchmarks/device_packages.py unpack && . /tmp/site/env.sh

``unpack`` checks that every part is there and that the whole archive's sha256 is the one packed,
extracts it into ``/tmp/site``, lays out the ``odqa`` package as ``pyproject.toml`` maps it (the
repository's folders linked under its ``odqa/``; nothing is installed) and writes ``/tmp/site/env.sh``: it puts
``/tmp/site`` on ``PYTHONPATH`` and points the benchmarks at the real Wikipedia excerpt when one
was packed (``ODQA_BENCH_DUMP``, read by ``bench_encode.dump_path``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".device-carry"
MANIFEST = "manifest.json"
ARCHIVE = "site.tar.xz"
DUMP_NAME = "enwiki-sample-pages-articles.xml.bz2"
REAL_DUMP = ROOT / ".." / "shared" / "data" / "wikipedia" / DUMP_NAME

# What the image lacks, pinned: faiss-gpu-cu12 1.14.1 (46 MiB) asks for cuBLAS >= 12.1.3.1, and
# 12.4.5.8 is the smallest cuBLAS 12 wheel with Hopper's kernels (12.8+ are 570+ MiB).
PACKAGES = (
    "faiss-gpu-cu12==1.14.1.post1",
    "nvidia-cublas-cu12==12.4.5.8",
    "nvidia-cuda-runtime-cu12==12.4.127",
    "duckdb==2.0.1",
    "mwparserfromhell==0.7.2",
)
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
            *[arg for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                              "manylinux2014_x86_64") for arg in ("--platform", tag)])  # fmt: skip


def sha256(paths: list[Path], copy_to: BinaryIO | None = None) -> str:
    """The sha256 of the files end to end, written on to ``copy_to`` as they are read (the one
    file ``cat`` would make of the parts)."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                if copy_to is not None:
                    copy_to.write(chunk)
    return digest.hexdigest()


def pack(carry: Path, part_mib: int, packages: tuple[str, ...]) -> None:
    """Install ``packages`` for the device's Python into a staging folder, then ``pack_site``."""
    with tempfile.TemporaryDirectory() as staging_name:
        site = Path(staging_name) / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                        "--target", str(site), *PLATFORM, *packages], check=True)  # fmt: skip
        print(f"packing {sum(p.stat().st_size for p in site.rglob('*') if p.is_file()) / 2**20:.0f} MiB", flush=True)
        manifest = pack_site(site, carry, part_mib << 20, packages, REAL_DUMP if REAL_DUMP.exists() else None)
    print(f"{len(manifest['parts'])} parts, {manifest['bytes'] / 2**20:.1f} MiB in all, sha256 {manifest['sha256'][:16]}")
    print("device calls (each one right after the one before: a machine stays warm 30 s):")
    for number, part in enumerate(manifest["parts"], 1):
        folder = (carry / part).parent.relative_to(ROOT).as_posix()
        command = "ls -la .device-carry" if number < len(manifest["parts"]) else (
            "python3 benchmarks/device_packages.py unpack && . /tmp/site/env.sh && bash benchmarks/gpu_checks.sh ...")
        print(f"  {number}. carry [{folder!r}], command: {command}")


def pack_site(site: Path, carry: Path, part_bytes: int, packages: tuple[str, ...], dump: Path | None) -> dict:
    """``site`` as one xz tar archive cut into ``carry/pNN/`` folders of at most ``part_bytes``;
    the manifest (with the whole archive's sha256) goes with the last part, ``dump`` with the first."""
    if carry.exists():
        shutil.rmtree(carry)
    carry.mkdir(parents=True)
    archive = carry / ARCHIVE
    if shutil.which("xz"):  # several threads; the same format tarfile reads back
        with archive.open("wb") as out:
            tar = subprocess.Popen(["tar", "-C", str(site), "-cf", "-", "."], stdout=subprocess.PIPE)
            subprocess.run(["xz", "-6", "-T0", "-c"], stdin=tar.stdout, stdout=out, check=True)
            if tar.wait() != 0:
                raise SystemExit(f"tar of {site} failed")
    else:
        with tarfile.open(archive, "w:xz", preset=6) as tar_file:
            tar_file.add(site, arcname=".")
    parts = cut(archive, carry, part_bytes)
    archive.unlink()
    manifest = {"archive": ARCHIVE, "sha256": sha256(parts), "parts": [p.relative_to(carry).as_posix() for p in parts],
                "bytes": sum(p.stat().st_size for p in parts), "packages": list(packages),
                "dump": None}  # fmt: skip
    if dump is not None:  # real Wikipedia prose for bench_encode.real_passages (1.7 MB)
        shutil.copy(dump, parts[0].parent / dump.name)
        manifest["dump"] = f"{parts[0].parent.name}/{dump.name}"
    (parts[-1].parent / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def cut(archive: Path, carry: Path, part_bytes: int) -> list[Path]:
    parts: list[Path] = []
    with archive.open("rb") as source:
        while chunk := source.read(part_bytes):
            folder = carry / f"p{len(parts) + 1:02d}"
            folder.mkdir()
            part = folder / f"{ARCHIVE}.{len(parts) + 1:02d}"
            part.write_bytes(chunk)
            parts.append(part)
    return parts


def unpack(carry: Path, target: Path, package: Path = ROOT / "odqa") -> None:
    """Check the parts against the manifest, extract them into ``target``, lay out odqa's ``package``."""
    manifests = sorted(carry.glob(f"*/{MANIFEST}"))
    if not manifests:
        raise SystemExit(f"{carry}: no {MANIFEST} (the call carrying the last part brings it)")
    manifest = json.loads(manifests[-1].read_text(encoding="utf-8"))
    parts = [carry / name for name in manifest["parts"]]
    missing = [p.relative_to(carry).as_posix() for p in parts if not p.exists()]
    if missing:
        raise SystemExit(f"{carry}: parts not here yet: {', '.join(missing)} (carry each in its own call)")
    stamp = target / ".device-packages"
    if not (stamp.exists() and stamp.read_text(encoding="utf-8") == manifest["sha256"]):
        with tempfile.TemporaryDirectory() as scratch:
            archive = Path(scratch) / manifest["archive"]
            with archive.open("wb") as joined:
                found = sha256(parts, joined)
            if found != manifest["sha256"]:
                raise SystemExit(f"{carry}: the parts' sha256 is {found}, the manifest's {manifest['sha256']}")
            if target.exists() and any(target.iterdir()):
                if not stamp.exists():  # never empty a folder this script did not fill
                    raise SystemExit(f"{target}: not empty and not an unpack of ours; name another --target")
                shutil.rmtree(target)
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive, "r:xz") as tar_file:
                tar_file.extractall(target, filter="tar")
        stamp.write_text(manifest["sha256"], encoding="utf-8")
    lay_out_odqa(package)
    env = [f"export PYTHONPATH={shlex.quote(str(target))}${{PYTHONPATH:+:$PYTHONPATH}}"]
    if manifest.get("dump"):
        env.append(f"export ODQA_BENCH_DUMP={shlex.quote(str((carry / manifest['dump']).resolve()))}")
    (target / "env.sh").write_text("\n".join(env) + "\n", encoding="utf-8")
    print(f"unpacked {len(parts)} parts into {target}: {', '.join(manifest['packages'])}")


def lay_out_odqa(package: Path) -> None:
    """``odqa`` importable as ``pyproject.toml`` maps it, without installing it: a link in the
    repository's ``odqa/`` for each mapped folder (``odqa/models`` -> ``models/``). The benchmarks
    put the repository's root first on ``sys.path`` and pytest its rootdir, so both find it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    for name, folder in mapping.items():
        if name == "odqa":
            continue
        link = package / name.split(".", 1)[1]
        if link.is_symlink() and link.resolve() == (ROOT / folder).resolve():
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(ROOT / folder, target_is_directory=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    packer = verbs.add_parser("pack", help="here: install, archive and cut the packages into parts")
    packer.add_argument("--part-mib", type=int, default=56, help="a part's size (a call carries 64 MiB with the tree)")
    unpacker = verbs.add_parser("unpack", help="on the device: check, extract, lay out odqa")
    unpacker.add_argument("--carry", type=Path, default=CARRY)
    unpacker.add_argument("--target", type=Path, default=Path("/tmp/site"))
    args = parser.parse_args()
    if args.verb == "pack":
        pack(CARRY, args.part_mib, PACKAGES)
    else:
        unpack(args.carry, args.target)


if __name__ == "__main__":
    main()
