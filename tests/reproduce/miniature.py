"""Miniatures of the papers' releases, in their own file layouts, made from the bundled sample:
a mirror folder (`--mirror`: BASE/HOST/PATH) that the loopback server serves in place of the
publishers, and a registry file for what a mirror cannot stand in for (the shipped registry's
sizes and digests of the real files: BEIR's md5, DPR's passages and training files).

- DPR: psgs_w100.tsv.gz (id, text, title), biencoder-*-train.json.gz, nq-test.qa.csv;
- EntityQuestions: dataset.zip with dataset/test/P<relation>.test.json;
- BEIR: fever.zip with fever/corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv;
- Wikipedia: the sample's page, categorylinks and linktarget SQL dumps under the dump's names,
  with the dump's sha1sums file.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import zipfile
from pathlib import Path

import yaml

from odqa.pipelines.downloads.registry import CHECKSUM_ALGORITHMS, SHIPPED_REGISTRY
from tests.conftest import SAMPLE_DIR

OWN = SAMPLE_DIR / "own-data"
DPR = "dl.fbaipublicfiles.com/dpr"
DUMP = "dumps.wikimedia.org/enwiki/20250601"
EQ_ZIP = "nlp.cs.princeton.edu/projects/entity-questions/dataset.zip"
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/fever.zip"
TRAIN_FILES = ("nq", "trivia", "squad1", "webquestions", "curatedtrec")  # DPR's biencoder-<name>-train.json.gz


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _questions(count: int) -> tuple[list[dict], list[dict]]:
    """(training, evaluation) questions of the sample's own data: DPR's retriever JSON records."""
    train = json.loads((OWN / "train.dpr.json").read_text(encoding="utf-8"))
    dev = json.loads((OWN / "dev.dpr.json").read_text(encoding="utf-8"))
    return train[:count], dev[:count]


def build_mirror(root: Path, questions: int = 40) -> tuple[Path, Path]:
    """The mirror folder and the registry file of the miniatures."""
    mirror = root / "mirror"
    train, test = _questions(questions)
    _write(mirror / DPR / "wikipedia_split/psgs_w100.tsv.gz", gzip.compress((OWN / "passages.tsv").read_bytes()))
    for offset, file in enumerate(TRAIN_FILES):
        part = train[offset:] + train[:offset]  # each set its own order of the same questions
        _write(mirror / DPR / f"data/retriever/biencoder-{file}-train.json.gz",
               gzip.compress(json.dumps(part).encode()))  # fmt: skip
    qas = io.StringIO()
    csv.writer(qas, delimiter="\t", lineterminator="\n").writerows([q["question"], str(q["answers"])] for q in test)
    _write(mirror / DPR / "data/retriever/nq-test.qa.csv", qas.getvalue().encode())
    eq = {f"dataset/test/P{relation}.test.json": json.dumps([{"question": q["question"], "answers": q["answers"]}
                                                             for q in test[i::2]]).encode()
          for i, relation in enumerate((19, 26))}  # fmt: skip
    _write(mirror / EQ_ZIP, _zip(eq))
    _write(mirror / BEIR_URL.removeprefix("https://"), _zip(_beir(train, test)))
    sums = []
    for table in ("page", "categorylinks", "linktarget"):
        data = (SAMPLE_DIR / "sql" / f"{table}.sql.gz").read_bytes()
        _write(mirror / DUMP / f"enwiki-20250601-{table}.sql.gz", data)
        sums.append(f"{hashlib.sha1(data).hexdigest()}  enwiki-20250601-{table}.sql.gz\n")
    _write(mirror / DUMP / "enwiki-20250601-sha1sums.txt", "".join(sums).encode())
    registry = root / "registry.yaml"
    registry.write_text(json.dumps(_registry_of(mirror)), encoding="utf-8")
    return mirror, registry


def _registry_of(mirror: Path) -> dict[str, dict]:
    """The shipped entries of the mirrored files that give a size or digest (DPR's passages and NQ,
    TriviaQA training files, the BEIR zips), with the miniature's size and sha256 instead, as
    a user's own mirror of other bytes would be registered."""
    shipped = yaml.safe_load(SHIPPED_REGISTRY.read_text(encoding="utf-8"))
    entries = {}
    for name, entry in shipped.items():
        copy = mirror / entry.get("url", "").removeprefix("https://")
        if not copy.is_file() or not ({"size", *CHECKSUM_ALGORITHMS} & set(entry)):
            continue
        data = copy.read_bytes()
        own = {key: value for key, value in entry.items() if key not in CHECKSUM_ALGORITHMS}
        entries[name] = {**own, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                         "description": f"a miniature of {name}"}  # fmt: skip
    return entries


def _beir(train: list[dict], test: list[dict]) -> dict[str, bytes]:
    """BEIR's layout over the sample's passages: the DPR questions' gold passages as qrels."""
    with (OWN / "passages.tsv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    corpus = "".join(json.dumps({"_id": f"d{r['id']}", "title": r["title"], "text": r["text"]}) + "\n" for r in rows)
    queries, qrels = [], {"train": train, "test": test}
    files = {}
    for split, records in qrels.items():
        lines = ["query-id\tcorpus-id\tscore"]
        for index, record in enumerate(records):
            qid = f"{split}{index}"
            queries.append(json.dumps({"_id": qid, "text": record["question"]}))
            lines += [f"{qid}\td{ctx['passage_id']}\t1" for ctx in record["positive_ctxs"][:1]]
        files[f"fever/qrels/{split}.tsv"] = ("\n".join(lines) + "\n").encode()
    return {"fever/corpus.jsonl": corpus.encode(), "fever/queries.jsonl": ("\n".join(queries) + "\n").encode(), **files}
