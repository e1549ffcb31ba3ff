"""The registry of public resources `odqa fetch` knows: one YAML file shipped with odqa
(`resources.yaml`, next to this module), plus the user's own files (`--registry FILE`, same schema,
its entries added to or replacing the shipped ones).

An entry (docs/data.md, "Fetching public resources"):

```yaml
data.retriever.qas.nq-test:          # the name `odqa fetch NAME` takes
  url: https://dl.fbaipublicfiles.com/dpr/data/retriever/nq-test.qa.csv   # or urls: [a list of mirrors]
  size: 12345                        # bytes, where known
  sha256: <hex>                      # or md5 / sha1: where the publisher gives one; a sums file:
                                     #   sha1: {sums: https://.../enwiki-20250601-sha1sums.txt}
  format: dpr-qas                    # the format the import reads
  dataset: nq                        # the dataset (and split) the import stores the questions under
  split: test
  import: import questions           # which odqa import feeds on it (or none)
  unpack: gunzip                     # optional: gunzip, or unzip (then `member`: the path inside)
  description: free text
```

Bad entries are refused naming the file, the entry and what was expected.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ...storage.choices import PASSAGE_FORMATS, QUESTION_FORMATS

SHIPPED_REGISTRY = Path(__file__).with_name("resources.yaml")
CHECKSUM_ALGORITHMS = ("sha256", "sha1", "md5")
UNPACKERS = ("gunzip", "unzip")
# Which odqa import feeds on a resource, and the formats it reads.
IMPORT_FORMATS: dict[str, tuple[str, ...]] = {
    "import passages": PASSAGE_FORMATS,
    "import questions": QUESTION_FORMATS,
    "questions paq": ("paq-metadata",),
    "ingest wikipedia": ("mediawiki-xml",),
    "ingest categories": ("page", "categorylinks", "linktarget", "redirect"),
    "none": (),
}
# Imports that store under a dataset (and a split) the entry must name.
NEEDS_DATASET = {"import questions": ("dataset", "split"), "questions paq": ("dataset",),
                 "ingest categories": ("dataset",)}  # fmt: skip
_KEYS = {"url", "urls", "size", *CHECKSUM_ALGORITHMS, "format", "dataset", "split", "import", "unpack", "member",
         "description"}  # fmt: skip
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX = {"sha256": 64, "sha1": 40, "md5": 32}


class RegistryError(ValueError):
    """A registry file or entry that does not follow the schema; the message names file and entry."""


@dataclass(frozen=True)
class Checksum:
    """What a download is checked against: a digest given in the registry, or the line for the file
    in a sums file the publisher serves (`<hex>  <file name>`, as Wikimedia's `*-sha1sums.txt`)."""

    algorithm: str
    digest: str = ""
    sums_url: str = ""


@dataclass(frozen=True)
class Resource:
    name: str
    urls: tuple[str, ...]
    size: int | None
    checksum: Checksum | None
    format: str
    dataset: str
    split: str
    feeds: str  # the `import` key: which odqa import reads it
    unpack: str
    member: str
    description: str
    origin: str  # the registry file it comes from

    @property
    def url(self) -> str:
        """The publisher's URL: where the file's place in the workspace comes from."""
        return self.urls[0]

    @property
    def file_name(self) -> str:
        return urlsplit(self.url).path.rsplit("/", 1)[-1]


def _http_url(value: Any, where: str) -> str:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or not parts.path.strip("/"):
        raise RegistryError(f"{where}: expected an http:// or https:// URL of a file, got {value!r}")
    return value


def _checksum(entry: dict[str, Any], where: str) -> Checksum | None:
    given = [a for a in CHECKSUM_ALGORITHMS if entry.get(a) not in (None, "")]
    if len(given) > 1:
        raise RegistryError(f"{where}: give one checksum (the strongest the publisher gives), not {given}")
    if not given:
        return None
    algorithm = given[0]
    value = entry[algorithm]
    if isinstance(value, dict):
        if set(value) != {"sums"}:
            raise RegistryError(f"{where}: {algorithm}: expected a hex digest or {{sums: URL of a sums file}}, "
                                f"got the keys {sorted(value)}")  # fmt: skip
        return Checksum(algorithm, sums_url=_http_url(value["sums"], f"{where}: {algorithm}.sums"))
    digest = str(value).strip().lower()
    if not re.fullmatch(rf"[0-9a-f]{{{_HEX[algorithm]}}}", digest):
        raise RegistryError(f"{where}: {algorithm}: expected {_HEX[algorithm]} hex digits, got {value!r}")
    return Checksum(algorithm, digest=digest)


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RegistryError(f"{where}: {key}: expected text, got {value!r}")
    return value.strip()


def parse_entry(name: Any, entry: Any, origin: str) -> Resource:
    """One registry entry as a `Resource`, or a `RegistryError` naming the file, entry and what was expected."""
    where = f"{origin}: entry {name!r}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RegistryError(f"{where}: a name is letters, digits and ._- (starting with a letter or digit)")
    if not isinstance(entry, dict):
        raise RegistryError(f"{where}: expected a mapping of {sorted(_KEYS)}, got {type(entry).__name__}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise RegistryError(f"{where}: unknown keys {unknown}; an entry has {sorted(_KEYS)}")
    if ("url" in entry) == ("urls" in entry):
        raise RegistryError(f"{where}: give url (one URL) or urls (a list of mirrors of one file), one of them")
    raw_urls = [entry["url"]] if "url" in entry else entry["urls"]
    if not isinstance(raw_urls, list) or not raw_urls:
        raise RegistryError(f"{where}: urls: expected a non-empty list of URLs")
    urls = tuple(_http_url(u, f"{where}: url") for u in raw_urls)
    size = entry.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise RegistryError(f"{where}: size: expected a number of bytes, got {size!r}")
    feeds = _text(entry, "import", where) or "none"
    if feeds not in IMPORT_FORMATS:
        raise RegistryError(f"{where}: import: expected one of {list(IMPORT_FORMATS)}, got {feeds!r}")
    fmt = _text(entry, "format", where)
    formats = IMPORT_FORMATS[feeds]
    if formats and fmt not in formats:
        raise RegistryError(f"{where}: format: `{feeds}` reads {list(formats)}, got {fmt!r}")
    missing = [key for key in NEEDS_DATASET.get(feeds, ()) if not _text(entry, key, where)]
    if missing:
        raise RegistryError(f"{where}: `{feeds}` stores under a dataset and split: give {missing}")
    unpack = _text(entry, "unpack", where)
    if unpack and unpack not in UNPACKERS:
        raise RegistryError(f"{where}: unpack: expected one of {list(UNPACKERS)} or nothing, got {unpack!r}")
    member = _text(entry, "member", where)
    if member and unpack != "unzip":
        raise RegistryError(f"{where}: member names a path inside an archive: it needs unpack: unzip")
    if member and (member.startswith("/") or ".." in member.split("/")):
        raise RegistryError(f"{where}: member: expected a relative path inside the archive, got {member!r}")
    return Resource(name=name, urls=urls, size=size, checksum=_checksum(entry, where), format=fmt,
                    dataset=_text(entry, "dataset", where), split=_text(entry, "split", where), feeds=feeds,
                    unpack=unpack, member=member, description=_text(entry, "description", where),
                    origin=origin)  # fmt: skip


def read_registry_file(path: Path | str) -> dict[str, Resource]:
    """The entries of one registry file (YAML or JSON), each checked."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read the registry file ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML or JSON: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise RegistryError(f"{path}: expected a mapping of resource names to entries "
                            "(name: {url, sha256, format, dataset, split, import})")  # fmt: skip
    return {name: parse_entry(name, entry, str(path)) for name, entry in data.items()}


def load_registry(extra: Path | str | None = None) -> dict[str, Resource]:
    """The shipped registry, with the entries of `extra` (a user's file) added or replacing them."""
    resources = read_registry_file(SHIPPED_REGISTRY)
    if extra:
        resources.update(read_registry_file(extra))
    return resources


def resolve(names: list[str], resources: dict[str, Resource]) -> list[Resource]:
    """The resources `names` name, or an error naming each unknown one with its closest names."""
    unknown = [name for name in names if name not in resources]
    if unknown:
        lines = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(resources), n=5, cutoff=0.6)
            close += [n for n in resources if name.lower() in n.lower() and n not in close][: 5 - len(close)]
            lines.append(f"{name!r}" + (f" (did you mean: {', '.join(close)}?)" if close else ""))
        raise RegistryError(f"unknown resource {'; '.join(lines)}. `odqa fetch --list` shows every name")
    return [resources[name] for name in dict.fromkeys(names)]


def mirrored(url: str, mirror: str) -> str:
    """`https://HOST/PATH` as `MIRROR/HOST/PATH`: the same file through a proxy or an offline mirror."""
    if not mirror:
        return url
    parts = urlsplit(url)
    base = urlsplit(mirror)
    if base.scheme not in ("http", "https") or not base.netloc:
        raise ValueError(f"--mirror {mirror!r}: expected an http:// or https:// base URL")
    tail = parts.netloc + parts.path + (f"?{parts.query}" if parts.query else "")
    return f"{mirror.rstrip('/')}/{tail}"
