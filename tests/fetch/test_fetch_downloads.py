"""Downloads as `odqa fetch` makes them, against the loopback server (no test reaches the
internet): a cut transfer resumed with a Range request, a corrupted byte refused with nothing
published, retries on 503, `--mirror`'s URL mapping, a publisher's sums file, and the sha256 of a
first download recorded and checked on every later use."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from odqa.flows.compositions.fetch import fetch_resource
from odqa.pipelines.downloads.checksums import ChecksumMismatch
from odqa.pipelines.downloads.registry import Resource, parse_entry
from odqa.pipelines.downloads.transfer import TransferError, TransferPolicy, transfer
from odqa.pipelines.downloads.unpack import gunzip, unzip
from odqa.storage.atomic import DiskFullError
from odqa.storage.downloads import LinkedDownloadError, download_slot, open_part, part_size, seen_sha256

from .loopback_http import LoopbackServer

FAST = TransferPolicy(retries=2, backoff_s=0.0, timeout_s=10.0, block=4096)
PAYLOAD = b"".join(b"%06d\tpassage number %d\tTitle %d\n" % (i, i, i) for i in range(4000))  # ~120 KB


def _resource(url: str, **entry: object) -> Resource:
    return parse_entry("test.file", {"url": url, **entry}, "test-registry.yaml")


@pytest.fixture
def served(tmp_path: Path):
    (tmp_path / "site" / "files").mkdir(parents=True)
    (tmp_path / "site" / "files" / "psgs.tsv").write_bytes(PAYLOAD)
    with LoopbackServer(tmp_path / "site") as server:
        yield server


def test_a_cut_transfer_is_resumed_with_a_range_request_and_the_sha256_matches(served, tmp_path):
    served.cut_after["files/psgs.tsv"] = len(PAYLOAD) // 2
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    resource = _resource(served.url_of("files/psgs.tsv"), sha256=sha, size=len(PAYLOAD))
    fetched = fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    ranges = [r["headers"].get("Range") for r in served.requests_for("files/psgs.tsv")]
    assert ranges == [None, f"bytes={len(PAYLOAD) // 2}-"]
    assert fetched.file.read_bytes() == PAYLOAD and fetched.verified.sha256 == sha
    assert fetched.verified.verified_by == "sha256 (registry)"
    assert not download_slot(tmp_path / "ws", resource.url).part.exists()


def test_a_fetch_cut_short_keeps_its_bytes_and_the_next_fetch_resumes_them(served, tmp_path):
    served.cut_after["files/psgs.tsv"] = 50_000
    resource = _resource(served.url_of("files/psgs.tsv"))
    slot = download_slot(tmp_path / "ws", resource.url)
    with pytest.raises(TransferError, match="fetch again to resume"):
        fetch_resource(tmp_path / "ws", resource, policy=TransferPolicy(retries=0), progress=False)
    assert slot.part.stat().st_size == 50_000 and not slot.final.exists()
    fetched = fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    assert served.requests_for("files/psgs.tsv")[-1]["headers"]["Range"] == "bytes=50000-"
    assert fetched.file.read_bytes() == PAYLOAD


def test_a_corrupted_byte_is_refused_and_nothing_is_published(served, tmp_path):
    served.corrupt["files/psgs.tsv"] = 1234
    resource = _resource(served.url_of("files/psgs.tsv"), sha256=hashlib.sha256(PAYLOAD).hexdigest())
    with pytest.raises(ChecksumMismatch, match=r"test\.file: psgs\.tsv has sha256 .* but the registry "
                                               r"\(test-registry\.yaml\) gives .* not published"):  # fmt: skip
        fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    slot = download_slot(tmp_path / "ws", resource.url)
    assert not slot.final.exists() and not slot.part.exists() and not slot.state.exists()


def test_without_a_publisher_checksum_the_first_sha256_is_recorded_and_every_later_use_checked(served, tmp_path):
    resource = _resource(served.url_of("files/psgs.tsv"))
    first = fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    slot = download_slot(tmp_path / "ws", resource.url)
    assert seen_sha256(tmp_path / "ws", slot)["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert first.verified.verified_by.startswith("sha256 recorded now")
    again = fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    assert not again.downloaded and again.verified.verified_by == "sha256 (first download)"
    slot.final.write_bytes(PAYLOAD[:-1] + b"?")  # the published file changed on disk
    with pytest.raises(ChecksumMismatch, match="first download"):
        fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)


def test_a_503_is_retried_and_a_redirect_followed(served, tmp_path):
    served.fail_once["files/psgs.tsv"] = 503
    served.redirects["old/psgs.tsv"] = "files/psgs.tsv"
    fetched = fetch_resource(tmp_path / "ws", _resource(served.url_of("old/psgs.tsv")), policy=FAST, progress=False)
    assert fetched.file.read_bytes() == PAYLOAD
    assert len(served.requests_for("files/psgs.tsv")) == 2


def test_a_host_that_does_not_resolve_is_not_retried_and_the_next_url_is_tried_at_once(served, tmp_path):
    """Offline (or with a mistyped host) retrying a name lookup cannot help: as wget and curl do,
    the URL fails at once, with no backoff, and its mirror is tried. `.invalid` never resolves
    (RFC 2606)."""
    waits: list[float] = []
    patient = TransferPolicy(retries=5, backoff_s=10.0, timeout_s=10.0, block=4096)
    unresolvable = "http://odqa-test.invalid/files/psgs.tsv"
    slot = download_slot(tmp_path / "ws", served.url_of("files/psgs.tsv"))
    with pytest.raises(TransferError, match=r"odqa-test\.invalid does not resolve \(no network, or no DNS"):
        transfer([unresolvable], slot, policy=patient, progress=False, sleep=waits.append)
    assert waits == []
    assert transfer([unresolvable, served.url_of("files/psgs.tsv")], slot, policy=patient, progress=False,
                    sleep=waits.append) == len(PAYLOAD)  # fmt: skip
    assert waits == [] and slot.part.read_bytes() == PAYLOAD


def test_a_mirror_serves_https_host_path_as_base_host_path(tmp_path):
    mirror_root = tmp_path / "mirror" / "dl.example.org" / "dpr"
    mirror_root.mkdir(parents=True)
    (mirror_root / "nq-test.qa.csv").write_bytes(PAYLOAD)
    resource = _resource("https://dl.example.org/dpr/nq-test.qa.csv")
    with LoopbackServer(tmp_path / "mirror") as mirror:
        fetched = fetch_resource(tmp_path / "ws", resource, mirror=mirror.url + "/", policy=FAST, progress=False)
        assert [r["path"] for r in mirror.requests] == ["/dl.example.org/dpr/nq-test.qa.csv"]
    assert fetched.file == tmp_path / "ws" / "downloads" / "dl.example.org" / "dpr" / "nq-test.qa.csv"


def test_a_checksum_from_the_publishers_sums_file(served, tmp_path):
    sums = f"{'0' * 40}  other-file.sql.gz\n{hashlib.sha1(PAYLOAD).hexdigest()}  psgs.tsv\n"
    (served.folder / "files" / "sha1sums.txt").write_text(sums)
    resource = _resource(served.url_of("files/psgs.tsv"), sha1={"sums": served.url_of("files/sha1sums.txt")})
    assert fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False).verified.verified_by == \
        "sha1 (publisher's sums file)"  # fmt: skip
    (served.folder / "files" / "sha1sums.txt").write_text(sums.replace("psgs.tsv", "renamed.tsv"))
    with pytest.raises(ChecksumMismatch, match="sha1sums.txt: no line for psgs.tsv"):
        fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)


def test_an_archive_is_unpacked_for_its_import_and_a_member_leaving_it_is_refused(served, tmp_path):
    import zipfile

    with zipfile.ZipFile(served.folder / "files" / "nq.zip", "w") as archive:
        archive.writestr("nq/corpus.jsonl", '{"_id": "1", "title": "T", "text": "x"}\n')
    with zipfile.ZipFile(served.folder / "files" / "evil.zip", "w") as archive:
        archive.writestr("../outside.txt", "x")
    good = _resource(served.url_of("files/nq.zip"), unpack="unzip", member="nq")
    fetched = fetch_resource(tmp_path / "ws", good, policy=FAST, progress=False)
    assert fetched.path == fetched.file.with_name("nq.zip.unpacked") / "nq" and (fetched.path / "corpus.jsonl").exists()
    evil = _resource(served.url_of("files/evil.zip"), unpack="unzip")
    with pytest.raises(ValueError, match="'../outside.txt' is a link or leaves the archive's folder"):
        fetch_resource(tmp_path / "ws", evil, policy=FAST, progress=False)
    assert not (tmp_path / "ws" / "downloads" / "127.0.0.1" / "outside.txt").exists()
    assert not download_slot(tmp_path / "ws", evil.url).unpacked.exists()


def test_a_download_that_would_not_fit_is_refused_before_its_first_byte(served, tmp_path):
    resource = _resource(served.url_of("files/psgs.tsv"), size=len(PAYLOAD))
    free = shutil.disk_usage(tmp_path).free
    tight = dataclasses.replace(FAST, keep_free=free - len(PAYLOAD) // 2)  # room for half the file
    with pytest.raises(DiskFullError, match=f"{len(PAYLOAD):,} more bytes to fetch.*kept free"):
        fetch_resource(tmp_path / "ws", resource, policy=tight, progress=False)
    slot = download_slot(tmp_path / "ws", resource.url)
    assert part_size(slot) == 0 and not slot.final.exists()
    assert len(served.requests_for("files/psgs.tsv")) == 1, "a full disk is not retried"


def test_a_download_of_no_known_size_stops_at_the_disks_margin(served, tmp_path, monkeypatch):
    """A server sending a body of no announced size that never ends (and a registry entry with
    no size): the download stops with a clear error while the disk still has room.

    The disk's free space is what it was at the start less what this download wrote: the suite's
    other workers write and delete files on the same file system meanwhile, and with the real
    figure the 4 MiB window moved under the test (a run wrote 4,345,856 bytes)."""
    served.endless.add("files/endless.bin")
    resource = _resource(served.url_of("files/endless.bin"))
    slot = download_slot(tmp_path / "ws", resource.url)
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real._replace(free=real.free - part_size(slot)))
    tight = dataclasses.replace(FAST, keep_free=real.free - (4 << 20))
    with pytest.raises(DiskFullError, match="gives no size .* has sent [0-9,]+ bytes; stopped there"):
        fetch_resource(tmp_path / "ws", resource, policy=tight, progress=False)
    assert 0 < part_size(slot) <= 4 << 20 and not slot.final.exists()


@pytest.mark.parametrize("planted", ["part", "final"])
def test_a_link_where_a_download_goes_is_refused_and_what_it_names_is_untouched(served, tmp_path, planted):
    """Bytes appended to a linked partial file would land in whatever it names; a linked
    "published" file was never fetched or checked here."""
    resource = _resource(served.url_of("files/psgs.tsv"))
    slot = download_slot(tmp_path / "ws", resource.url)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    getattr(slot, planted).parent.mkdir(parents=True, exist_ok=True)
    getattr(slot, planted).symlink_to(victim)
    with pytest.raises(LinkedDownloadError, match="a symbolic link .* remove the link"):
        fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=False)
    assert victim.read_text() == "keep me\n" and served.requests_for("files/psgs.tsv") == []


def test_a_link_made_after_the_check_is_not_written_through(tmp_path):
    slot = download_slot(tmp_path / "ws", "https://example.org/files/psgs.tsv")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    slot.part.parent.mkdir(parents=True)
    slot.part.symlink_to(victim)
    for append in (True, False):
        with pytest.raises(LinkedDownloadError):
            open_part(slot, append=append)
    assert victim.read_text() == "keep me\n"


FETCH_IN_A_PROCESS = """
import sys
from pathlib import Path
from odqa.flows.compositions.fetch import fetch_resource
from odqa.pipelines.downloads.registry import parse_entry
from odqa.pipelines.downloads.transfer import TransferPolicy
resource = parse_entry("test.file", {"url": sys.argv[2], "size": int(sys.argv[3])}, "test-registry.yaml")
fetched = fetch_resource(Path(sys.argv[1]), resource, policy=TransferPolicy(retries=0), progress=False)
print("downloaded" if fetched.downloaded else "found", fetched.verified.sha256)
"""


def test_two_processes_fetching_one_file_download_it_once(served, tmp_path):
    """The second waits on the file's lock while the first downloads (a slow link), then finds the
    file published and checks it: one transfer, two verified answers with the same sha256."""
    served.delay_s["files/psgs.tsv"] = 2.0
    command = [sys.executable, "-c", FETCH_IN_A_PROCESS, str(tmp_path / "ws"), served.url_of("files/psgs.tsv"),
               str(len(PAYLOAD))]  # fmt: skip
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]  # fmt: skip
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [p.returncode for p in processes] == [0, 0], [err for _, err in outputs]
    answers = sorted(out.split()[0] for out, _ in outputs)
    assert answers == ["downloaded", "found"]
    assert {out.split()[1] for out, _ in outputs} == {hashlib.sha256(PAYLOAD).hexdigest()}
    assert len(served.requests_for("files/psgs.tsv")) == 1
    assert download_slot(tmp_path / "ws", served.url_of("files/psgs.tsv")).final.read_bytes() == PAYLOAD


def test_unpacking_stops_at_the_disks_margin(tmp_path):
    """An archive whose declared sizes would not fit is refused before its first member; a .gz
    (its size known only once decompressed) stops at the margin."""
    import gzip
    import zipfile

    archive_path, gz_path = tmp_path / "big.zip", tmp_path / "big.tsv.gz"
    with zipfile.ZipFile(archive_path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("big/a.tsv", b"\0" * (8 << 20))
    gz_path.write_bytes(gzip.compress(b"\0" * (8 << 20)))
    tight = shutil.disk_usage(tmp_path).free - (4 << 20)  # room for about half of either
    (tmp_path / "zip").mkdir()
    with pytest.raises(DiskFullError, match=f"big.zip unpacks to {8 << 20:,} bytes.*kept free"):
        unzip(archive_path, tmp_path / "zip", keep_free=tight)
    assert list((tmp_path / "zip").iterdir()) == []
    (tmp_path / "gz").mkdir()
    with pytest.raises(DiskFullError, match="decompressing big.tsv.gz has written"):
        gunzip(gz_path, tmp_path / "gz", keep_free=tight)
    assert (tmp_path / "gz" / "big.tsv").stat().st_size <= 4 << 20
    assert unzip(archive_path, tmp_path / "zip") == tmp_path / "zip"  # with the default margin: whole
    assert (tmp_path / "zip" / "big" / "a.tsv").stat().st_size == 8 << 20


def test_off_a_terminal_a_download_and_its_check_log_their_progress(served, tmp_path, monkeypatch, caplog):
    """`odqa fetch > log 2>&1` and a Prefect run's log tab get `odqa.progress` records (a tqdm bar
    would only write carriage returns there)."""
    monkeypatch.setenv("ODQA_PROGRESS", "log")
    monkeypatch.setenv("ODQA_PROGRESS_INTERVAL", "0")
    resource = _resource(served.url_of("files/psgs.tsv"), size=len(PAYLOAD))
    with caplog.at_level("INFO", logger="odqa.progress"):
        fetch_resource(tmp_path / "ws", resource, policy=FAST, progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "odqa.progress"]
    size = f"{len(PAYLOAD) / 1024:.1f} KiB"
    assert any(line.startswith(f"fetch psgs.tsv: {size}/{size} (100.0%)") and line.endswith("done") for line in lines)
    assert any(line.startswith(f"verify psgs.tsv: {size}/{size} (100.0%)") for line in lines), lines
