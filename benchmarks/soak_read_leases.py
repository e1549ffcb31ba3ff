"""A soak of read leases: processes that commit without pause, beside processes that scan.

    .venv/bin/python benchmarks/soak_read_leases.py [--seconds 60] [--writers 2] [--readers 2]
        [--kill-every 0] [--json benchmarks/results/read_leases_soak.json]

Each writer process replaces its own source of a scratch workspace's passages table, one commit
after another (each commit's collection deletes what no snapshot, pin or lease keeps). Each reader
process scans the whole table again and again, slowly (a pause between batches, so dozens of
commits land during one scan; the table has more files than a scan opens ahead), and checks each scan: the rows it read are exactly the rows of the
snapshot it started on. With ``--kill-every N`` a reader is SIGKILLed every N seconds, mid-scan,
and a new one started (its lease must be dropped, its files then collected). At the end: scans
done and failed, commits made, leases left, and table files left beyond what the kept snapshots
list.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odqa.storage import Workspace  # noqa: E402
from odqa.storage.read_leases import leases_dir, live_leases  # noqa: E402
from odqa.storage.snapshot import recent_snapshots  # noqa: E402
from odqa.storage.tables import KEEP_SNAPSHOTS  # noqa: E402

WRITER = """
import sys, time
from odqa.storage import Workspace
ws, name, until = Workspace.resolve(sys.argv[1]), sys.argv[2], float(sys.argv[3])
commits = 0
while time.time() < until:
    with ws.transaction("soak") as tx:
        tx.replace_source("passages", name)
        tx.write("passages", [{"passage_id": f"{name}-{commits}-{i}", "article_id": 1, "title": "T",
                               "text": "x", "position": i} for i in range(200)], source=name, part="p")
    commits += 1
print(commits)
"""

READER = """
import sys, time
from odqa.storage import Workspace
ws, until = Workspace.resolve(sys.argv[1]), float(sys.argv[2])
while time.time() < until:
    try:
        with ws.reading("passages", what="soak reader") as snapshot:
            expected = snapshot.rows("passages")
            seen = 0
            for batch in ws.scan("passages", batch_size=500, snapshot=snapshot):
                seen += batch.num_rows
                time.sleep(0.005)
        if seen != expected:
            raise RuntimeError(f"read {seen} rows of a snapshot of {expected}")
        print("ok", flush=True)
    except Exception as exc:
        print("FAILED", type(exc).__name__, exc, flush=True)
"""


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=0.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odqa-soak-leases-") as folder:
        root = Path(folder) / "ws"
        ws = Workspace.resolve(root)
        with ws.transaction("seed") as tx:  # more files than a scan opens ahead (pyarrow: 4)
            for part in range(20):
                tx.write("passages", [{"passage_id": f"seed-{part}-{i}", "article_id": 1, "title": "T",
                                       "text": f"passage {i} " * 30, "position": i} for i in range(20_000)],
                         source=f"seed{part}", part=f"p{part}")  # fmt: skip
        until = time.time() + args.seconds
        writers = [spawn(WRITER, str(root), f"w{n}", str(until)) for n in range(args.writers)]
        readers = [spawn(READER, str(root), str(until)) for _ in range(args.readers)]
        killed, next_kill, lines = 0, time.time() + args.kill_every, []
        while time.time() < until:
            time.sleep(0.2)
            if args.kill_every and time.time() >= next_kill and time.time() < until - 2:
                victim = readers.pop(0)
                victim.send_signal(signal.SIGKILL)
                lines += victim.communicate(timeout=60)[0].splitlines()
                killed += 1
                readers.append(spawn(READER, str(root), str(until)))
                next_kill = time.time() + args.kill_every
        commits = sum(int(w.communicate(timeout=600)[0].split()[-1]) for w in writers)
        for reader in readers:
            lines += reader.communicate(timeout=600)[0].splitlines()
        scans, failures = [line for line in lines if line == "ok"], [line for line in lines if line != "ok"]
        codes = [p.returncode for p in writers + readers]
        with ws.transaction("final") as tx:  # one more commit: its collection drops the dead readers' leases
            tx.replace_source("passages", "w0")
        kept = {e.path for snap in recent_snapshots(root, KEEP_SNAPSHOTS) for es in snap.tables.values() for e in es}
        on_disk = {str(p.relative_to(root)) for p in (root / "tables" / "passages").glob("*.parquet")}
        result = {"seconds": args.seconds, "writers": args.writers, "readers": args.readers,
                  "readers_killed": killed, "commits": commits, "scans": len(scans), "scans_failed": len(failures),
                  "failures": failures[:5],
                  "exit_codes": codes, "leases_left": len(list(leases_dir(root).glob("*.json"))),
                  "live_leases_left": len(live_leases(root)), "files_beyond_kept": len(on_disk - kept)}  # fmt: skip
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
