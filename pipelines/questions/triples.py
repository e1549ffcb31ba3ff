"""(subject, relation, object) triples from local files: JSON Lines and T-REx.

The thesis (section 3.2) turns Wikidata facts into template questions. Facts come from three
places: a SPARQL endpoint (`sparql.py`), the T-REx dataset (Elsahar et al. 2018) the thesis
sampled from, and a plain JSON Lines file for anything else. All three produce the same
`Triple` records and use the same deterministic per-relation sample (`sample_key`), so the same
facts give the same triples whichever way they arrive: a fact's place in the sample depends only
on the seed and the entity ids, never on file order, paging or the server.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jsonstream import JsonFormatError, iter_json_array, iter_json_lines

RELATION_ID = re.compile(r"^P\d+$")
ENTITY_ID = re.compile(r"^Q\d+$")
WIKIDATA_ENTITY = "http://www.wikidata.org/entity/"
WIKIDATA_DIRECT = "http://www.wikidata.org/prop/direct/"


class TripleFormatError(ValueError):
    """A triple input that does not have the expected shape, with file and position."""


@dataclass(frozen=True)
class Triple:
    """One fact. Labels are what questions and answers are made of; ids identify the entities."""

    subject: str
    relation: str
    object: str
    subject_id: str | None = None
    object_id: str | None = None
    object_aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def subject_key(self) -> str:
        """The subject's identity: its Wikidata id, or its label when the source has no id."""
        return self.subject_id or self.subject

    @property
    def object_key(self) -> str:
        return self.object_id or self.object


def check_relation_id(relation: str) -> str:
    """Return `relation` if it is a Wikidata property id (P123); refuse anything else.

    Relation ids end up inside SPARQL queries, so only this exact shape is ever accepted.
    """
    if not isinstance(relation, str) or not RELATION_ID.match(relation):
        raise ValueError(f"invalid relation id {relation!r}: expected a Wikidata property id like 'P19'")
    return relation


def check_entity_id(entity: str) -> str:
    """Return `entity` if it is a Wikidata item id (Q123); refuse anything else."""
    if not isinstance(entity, str) or not ENTITY_ID.match(entity):
        raise ValueError(f"invalid entity id {entity!r}: expected a Wikidata item id like 'Q42'")
    return entity


def sample_key(seed: int, subject_key: str, object_key: str) -> str:
    """The hex MD5 of "seed|subject|object": a fact's rank in every per-relation sample.

    SPARQL 1.1 has the same MD5 function, so the endpoint can order by exactly this key and
    return the same sample that local files give (see `sparql.py`).
    """
    return hashlib.md5(f"{seed}|{subject_key}|{object_key}".encode()).hexdigest()


class _RelationSample:
    """The `size` facts with the smallest sample keys seen so far (all facts when size is None).

    Memory stays at about 2*size facts however long the input is: when the buffer doubles it is
    cut back to the best `size`, and anything ranked behind the cut is refused from then on.
    Repeated facts (same subject and object) keep their first occurrence.
    """

    def __init__(self, size: int | None, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.kept: dict[tuple[str, str], tuple[str, Triple]] = {}
        self.cutoff: tuple[str, str, str] | None = None

    def offer(self, triple: Triple) -> None:
        ident = (triple.subject_key, triple.object_key)
        if ident in self.kept:
            return
        rank = (sample_key(self.seed, *ident), *ident)
        if self.cutoff is not None and rank >= self.cutoff:
            return
        self.kept[ident] = (rank[0], triple)
        if self.size is not None and len(self.kept) >= 2 * max(self.size, 1):
            self._shrink()

    def _shrink(self) -> None:
        ranked = sorted(self.kept.items(), key=lambda item: (item[1][0], *item[0]))
        size = self.size or 0
        if len(ranked) > size:
            first_out_ident, (first_out_key, _) = ranked[size]
            self.cutoff = (first_out_key, *first_out_ident)
        self.kept = dict(ranked[:size])

    def result(self) -> list[Triple]:
        ordered = sorted(self.kept.items(), key=lambda item: (item[1][0], *item[0]))
        if self.size is not None:
            ordered = ordered[: self.size]
        return [triple for _, (_, triple) in ordered]


def _relation_order(relation: str) -> tuple[int, str]:
    digits = relation[1:]
    return (int(digits), relation) if digits.isdigit() else (1 << 62, relation)


def sample_triples(
    triples: Iterable[Triple],
    relations: Sequence[str] | None = None,
    sample_per_relation: int | None = None,
    seed: int = 0,
) -> list[Triple]:
    """Distinct triples of the wanted relations, at most `sample_per_relation` each.

    Output order: relations in the given order (numeric P-id order when not given), then by
    sample key. That is the order the SPARQL source returns too.
    """
    if sample_per_relation is not None and sample_per_relation < 0:
        raise ValueError(f"sample_per_relation must be >= 0, got {sample_per_relation}")
    wanted = [check_relation_id(r) for r in relations] if relations is not None else None
    samples: dict[str, _RelationSample] = {}
    if wanted is not None:
        samples = {r: _RelationSample(sample_per_relation, seed) for r in wanted}
    for triple in triples:
        sample = samples.get(triple.relation)
        if sample is None:
            if wanted is not None:
                continue
            sample = samples[triple.relation] = _RelationSample(sample_per_relation, seed)
        sample.offer(triple)
    order = wanted if wanted is not None else sorted(samples, key=_relation_order)
    return [t for r in order for t in samples[r].result()]


def _optional_entity(value: Any, name: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ENTITY_ID.match(value):
        raise TripleFormatError(f"{where}: {name} must be a Wikidata item id like 'Q42', got {value!r}")
    return value


def _label(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TripleFormatError(f"{where}: {name} must be a non-empty string, got {value!r}")
    return value


def triple_from_record(record: Any, where: str) -> Triple:
    """Validate one JSON Lines record into a Triple; `where` ("file:line") prefixes errors."""
    if not isinstance(record, dict):
        raise TripleFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    relation = record.get("relation")
    if not isinstance(relation, str) or not RELATION_ID.match(relation):
        raise TripleFormatError(f"{where}: relation must be a Wikidata property id like 'P19', got {relation!r}")
    aliases = record.get("object_aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise TripleFormatError(f"{where}: object_aliases must be a list of strings, got {aliases!r}")
    return Triple(
        subject=_label(record.get("subject"), "subject", where),
        relation=relation,
        object=_label(record.get("object"), "object", where),
        subject_id=_optional_entity(record.get("subject_id"), "subject_id", where),
        object_id=_optional_entity(record.get("object_id"), "object_id", where),
        object_aliases=tuple(aliases),
    )


def read_triples_jsonl(path: Path) -> Iterator[Triple]:
    """Triples of a JSON Lines file, one object per line; a malformed line names its number."""
    path = Path(path)
    try:
        for line_no, record in iter_json_lines(path):
            yield triple_from_record(record, f"{path}:{line_no}")
    except JsonFormatError as exc:
        raise TripleFormatError(str(exc)) from None


class JsonlTripleSource:
    """Triples from a JSON Lines file, sampled per relation like every other source."""

    def __init__(
        self,
        path: Path,
        relations: Sequence[str] | None = None,
        sample_per_relation: int | None = None,
        seed: int = 0,
    ) -> None:
        self.path = Path(path)
        self.relations = [check_relation_id(r) for r in relations] if relations is not None else None
        self.sample_per_relation = sample_per_relation
        self.seed = seed

    def fetch(self) -> list[Triple]:
        return sample_triples(read_triples_jsonl(self.path), self.relations, self.sample_per_relation, self.seed)


def _strip_prefix(uri: Any, prefix: str, pattern: re.Pattern[str]) -> str | None:
    if isinstance(uri, str) and uri.startswith(prefix):
        ident = uri[len(prefix):]
        if pattern.match(ident):
            return ident
    return None


class TrexTripleSource:
    """Triples from T-REx JSON files (Elsahar et al. 2018), streamed document by document.

    Each file is a JSON array of documents; a document's "triples" carry subject, predicate and
    object with a Wikidata `uri` and the `surfaceform` found in the text. The surface forms
    become the labels (as in the thesis, which sampled T-REx). T-REx has no aliases. Triples
    whose predicate is not a Wikidata direct property, or whose subject is not a Wikidata item,
    are skipped and counted in `skipped`; objects that are not items (dates, quantities) keep
    `object_id=None`.
    """

    def __init__(
        self,
        paths: Sequence[Path] | Path,
        relations: Sequence[str] | None = None,
        sample_per_relation: int | None = None,
        seed: int = 0,
    ) -> None:
        paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
        files: list[Path] = []
        for p in paths:
            files.extend(sorted(p.glob("*.json*")) if p.is_dir() else [p])
        if not files:
            raise FileNotFoundError(f"no T-REx JSON files in {', '.join(map(str, paths))}")
        self.files = files
        self.relations = [check_relation_id(r) for r in relations] if relations is not None else None
        self.sample_per_relation = sample_per_relation
        self.seed = seed
        self.skipped: Counter[str] = Counter()

    def iter_triples(self) -> Iterator[Triple]:
        wanted = set(self.relations) if self.relations is not None else None
        for path in self.files:
            try:
                yield from self._file_triples(path, wanted)
            except JsonFormatError as exc:
                raise TripleFormatError(str(exc)) from None

    def _file_triples(self, path: Path, wanted: set[str] | None) -> Iterator[Triple]:
        for doc_index, document in enumerate(iter_json_array(path)):
            where = f"{path}: document {doc_index}"
            if not isinstance(document, dict) or not isinstance(document.get("triples", []), list):
                raise TripleFormatError(f"{where}: expected an object with a 'triples' list")
            for item in document.get("triples", []):
                triple = self._convert(item, where)
                if triple is not None and (wanted is None or triple.relation in wanted):
                    yield triple

    def _convert(self, item: Any, where: str) -> Triple | None:
        try:
            subject, predicate, obj = item["subject"], item["predicate"], item["object"]
            s_uri, s_form = subject["uri"], subject["surfaceform"]
            p_uri, o_uri, o_form = predicate["uri"], obj["uri"], obj["surfaceform"]
        except (KeyError, TypeError):
            raise TripleFormatError(
                f"{where}: a triple needs subject/predicate/object with 'uri' (and 'surfaceform'), got {item!r:.200}"
            ) from None
        relation = _strip_prefix(p_uri, WIKIDATA_DIRECT, RELATION_ID)
        if relation is None:
            self.skipped["predicate not a Wikidata property"] += 1
            return None
        subject_id = _strip_prefix(s_uri, WIKIDATA_ENTITY, ENTITY_ID)
        if subject_id is None:
            self.skipped["subject not a Wikidata item"] += 1
            return None
        if not (isinstance(s_form, str) and s_form.strip() and isinstance(o_form, str) and o_form.strip()):
            self.skipped["empty surface form"] += 1
            return None
        return Triple(
            subject=s_form,
            relation=relation,
            object=o_form,
            subject_id=subject_id,
            object_id=_strip_prefix(o_uri, WIKIDATA_ENTITY, ENTITY_ID),
        )

    def fetch(self) -> list[Triple]:
        return sample_triples(self.iter_triples(), self.relations, self.sample_per_relation, self.seed)
