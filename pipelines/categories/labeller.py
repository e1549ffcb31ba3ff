"""Domain labels for articles: the nearest top-level categories in Wikipedia's category graph.

Semantics (DESIRE-ME, section 4.1): walk up breadth-first from an article's categories (its own
categories are depth 1, their parents depth 2, ...); the article gets every domain found at the
first depth where any domain is found (multi-label), and that depth. Hidden/maintenance
categories are not walked, category redirects are followed, article redirects take their
target's labels, and the walk stops at `max_depth`.

Why not walk per article: 5M articles x a few levels x 2.4M categories in Python is hours. The
same labels come from one breadth-first pass *down* from the domains: for every category c keep
dist(c) = its distance to the nearest domain and mask(c) = the domains at that distance (a
uint64 bitmask). Then for an article with categories C:

    depth  = 1 + min(dist(c) for c in C)
    labels = OR(mask(c) for c in C if dist(c) == depth - 1)

which is the per-article definition, because a shortest path from the article to domain D goes
through one of its categories, so dist(article, D) = 1 + min over c of dist(c, D). The pass is
level-synchronous over a CSR adjacency (parent -> children) with numpy, so the cost is one visit
per category and edge, whatever the number of articles. `tests/categories` checks it against a
literal per-article BFS on random graphs with cycles and hidden categories.

Strings are only touched on their distinct values: category_links is read once, in groups of
4M rows whose names are dictionary-encoded (a row becomes an int32 position); the groups'
distinct names are then normalized once and merged into one vocabulary per kind (categories,
article titles) by a single dictionary encoding. Memory is the id arrays (4 bytes per name per
edge) plus the vocabularies, never 40M Python strings; 2.4M categories, 10M category edges and
5M articles with 25M article edges take about 1 CPU minute and 2.7 GB (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..progress import Progress
from .domain_config import DomainConfig
from .titles import (
    NAMESPACE_NAMES,
    normalize_titles,
    split_namespace,
    strip_namespace_prefix,
)

__all__ = [
    "BatchSource",
    "DOMAINS_SCHEMA",
    "LabelReport",
    "LabelResult",
    "category_distances",
    "label_domains",
]

ARTICLE_NS = 0
CATEGORY_NS = 14
_UNREACHED = np.iinfo(np.int32).max
_GROUP_ROWS = 4_000_000  # rows per dictionary-encoded group of category_links
_REDIRECT_HOPS = 6  # pointer-jumping rounds: follows chains of up to 2**6 redirects
_ROWS_SLICE = 1_000_000  # labelled titles per slice of the output

#: A table, or a callable returning an iterable of record batches (read once, lazily).
BatchSource = pa.Table | Callable[[], Iterable[pa.RecordBatch]]

DOMAINS_SCHEMA = pa.schema([("title", pa.string()), ("domain", pa.string()), ("depth", pa.int32())])
_NAMESPACE_PREFIX = (
    "^(?i:"
    + "|".join(sorted((n.replace(" ", "[ _]") for n in NAMESPACE_NAMES.values() if n), key=len, reverse=True))
    + ")[ _]*:"
)


@dataclass
class LabelReport:
    """Counts for the stage report; every article is labelled, unreachable or without categories."""

    articles: int = 0
    labelled: int = 0
    unreachable: int = 0  # has walkable categories, but no domain within max_depth
    no_categories: int = 0  # no category left after dropping hidden ones (or none at all)
    redirects: int = 0
    redirects_labelled: int = 0
    redirects_unresolved: int = 0  # target unknown, not an article, or a redirect loop
    categories: int = 0
    hidden_categories: int = 0
    reachable_categories: int = 0  # categories within max_depth - 1 of a domain
    category_redirects: int = 0
    category_edges: int = 0  # category -> parent edges walked
    article_edges: int = 0  # article -> category edges used
    hidden_edges_dropped: int = 0
    max_depth: int = 0
    missing_domains: list[str] = field(default_factory=list)  # configured, but no such category
    depth_histogram: dict[int, int] = field(default_factory=dict)  # labelled articles per depth
    per_domain: dict[str, int] = field(default_factory=dict)  # labelled articles per domain

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LabelResult:
    domains: pa.Table  # DOMAINS_SCHEMA, sorted by title then configured domain order
    report: LabelReport


# -- helpers -------------------------------------------------------------------------------------
_COLUMN_TYPES = {
    "title": pa.string(),
    "namespace": pa.int32(),
    "category": pa.string(),
    "is_redirect": pa.bool_(),
    "redirect_target": pa.string(),
}


def _batches(source: BatchSource, columns: list[str]) -> Iterable[pa.RecordBatch]:
    """The source's batches, reduced to `columns` with the types the labeller computes on."""
    schema = pa.schema([(c, _COLUMN_TYPES[c]) for c in columns])
    batches = source.to_batches() if isinstance(source, pa.Table) else source()
    for batch in batches:
        if not isinstance(batch, pa.RecordBatch):
            batch = pa.record_batch(batch)
        yield batch.select(columns).cast(schema)


def _grouped(batches: Iterable[pa.RecordBatch], rows: int = _GROUP_ROWS) -> Iterable[pa.Table]:
    """Concatenate small batches into tables of about `rows` rows (one dictionary per group)."""
    group: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        group.append(batch)
        size += batch.num_rows
        if size >= rows:
            yield pa.Table.from_batches(group)
            group, size = [], 0
    if group:
        yield pa.Table.from_batches(group)


def _strip_namespace(titles: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.replace_substring_regex(titles, _NAMESPACE_PREFIX, "", max_replacements=1)


def _lookup(values: pa.Array | pa.ChunkedArray, value_set: pa.Array) -> np.ndarray:
    """Index of each value in `value_set` (int64, -1 where absent)."""
    idx = pc.index_in(values, value_set=value_set)
    if isinstance(idx, pa.ChunkedArray):
        idx = idx.combine_chunks() if idx.num_chunks else pa.array([], pa.int32())
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _neighbours(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All CSR neighbours of `rows`, concatenated, and how many each row has."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    total = int(counts.sum())
    ends = np.cumsum(counts)
    flat = np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - counts), counts)
    return indices[flat], counts


def _csr(rows: np.ndarray, cols: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return indptr, cols[order]


def _resolve_redirects(target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Follow redirect chains (`target[i] == i` for non-redirects) by pointer jumping.

    Returns the final target of every node and a mask of nodes caught in a redirect loop (they
    are mapped to themselves and reported as unresolved).
    """
    final = target.copy()
    for _ in range(_REDIRECT_HOPS):
        final = final[final]
    looping = final[final] != final
    final[looping] = np.flatnonzero(looping)
    return final, looping


def category_distances(
    parent_of: tuple[np.ndarray, np.ndarray], n_categories: int, domain_ids: np.ndarray, max_distance: int
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-source BFS from the domain categories down the reversed parent edges.

    `parent_of` = (child ids, parent ids) of category -> parent edges; `domain_ids[b]` is the
    category of domain bit b. Returns dist (int32, `_UNREACHED` beyond `max_distance`) and
    mask (uint64: the domains at that distance) per category. Cycles are harmless: a category is
    assigned once, at the level it is first reached.
    """
    child, parent = parent_of
    indptr, children = _csr(parent, child, n_categories)
    dist = np.full(n_categories, _UNREACHED, dtype=np.int32)
    mask = np.zeros(n_categories, dtype=np.uint64)
    valid = domain_ids >= 0
    bits = np.left_shift(np.uint64(1), np.arange(len(domain_ids), dtype=np.uint64))
    dist[domain_ids[valid]] = 0
    np.bitwise_or.at(mask, domain_ids[valid], bits[valid])
    frontier = np.unique(domain_ids[valid])
    marker = np.zeros(n_categories, dtype=bool)
    for level in range(1, max_distance + 1):
        if not len(frontier):
            break
        reached, counts = _neighbours(indptr, children, frontier)
        inherited = np.repeat(mask[frontier], counts)
        new = dist[reached] == _UNREACHED
        reached, inherited = reached[new], inherited[new]
        if not len(reached):
            break
        np.bitwise_or.at(mask, reached, inherited)
        dist[reached] = level
        marker[reached] = True
        frontier = np.flatnonzero(marker)
        marker[frontier] = False
    return dist, mask


# -- reading the inputs ---------------------------------------------------------------------------
@dataclass
class _Role:
    """One side of one kind of edge, dictionary-encoded group by group: row i's name is
    `dictionaries[k][j]`, stored as the position `positions[i]` in their concatenation."""

    dictionaries: list[pa.Array] = field(default_factory=list)
    positions: list[np.ndarray] = field(default_factory=list)
    size: int = 0

    def add(self, values: pa.ChunkedArray | pa.Array) -> None:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        encoded = pc.dictionary_encode(values)
        self.positions.append(
            encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32) + np.int32(self.size)
        )
        self.dictionaries.append(encoded.dictionary)
        self.size += len(encoded.dictionary)

    def names(self) -> pa.Array:
        return pa.concat_arrays(self.dictionaries) if self.dictionaries else pa.array([], pa.string())

    def rows(self) -> np.ndarray:
        return np.concatenate(self.positions) if self.positions else np.empty(0, np.int32)


@dataclass
class _Links:
    """category_links read once: (child, parent) names of category and article edges."""

    cat_child: _Role = field(default_factory=_Role)
    cat_parent: _Role = field(default_factory=_Role)
    art_child: _Role = field(default_factory=_Role)
    art_parent: _Role = field(default_factory=_Role)


def _read_links(source: BatchSource, progress: bool | None) -> _Links:
    """One pass over category_links. Names are dictionary-encoded per group (4M rows), so a name
    repeated on a million rows is kept once per group, and rows become int positions."""
    links = _Links()
    total = source.num_rows if isinstance(source, pa.Table) else None
    with Progress(total, "category links", "rows", enabled=progress is not False) as bar:
        for group in _grouped(_batches(source, ["title", "namespace", "category"])):
            valid = pc.and_(pc.is_valid(group.column("title")), pc.is_valid(group.column("category")))
            ns = group.column("namespace")
            for want_ns, child, parent in (
                (CATEGORY_NS, links.cat_child, links.cat_parent),
                (ARTICLE_NS, links.art_child, links.art_parent),
            ):
                rows = group.filter(pc.and_(valid, pc.equal(ns, want_ns)))
                if rows.num_rows:
                    child.add(rows.column("title"))
                    parent.add(rows.column("category"))
            bar.update(group.num_rows)
    return links


@dataclass
class _Pages:
    """What the articles table adds: plain articles, and redirects of articles and categories."""

    plain: list[pa.Array] = field(default_factory=list)
    redirect_titles: list[pa.Array] = field(default_factory=list)  # every article redirect
    redirect_src: list[pa.Array] = field(default_factory=list)  # ... those with an article target
    redirect_dst: list[pa.Array] = field(default_factory=list)
    category_src: list[str] = field(default_factory=list)
    category_dst: list[str] = field(default_factory=list)
    redirect_rows: int = 0


def _read_articles(source: BatchSource | None) -> _Pages:
    pages = _Pages()
    if source is None:
        return pages
    for group in _grouped(_batches(source, ["title", "namespace", "is_redirect", "redirect_target"])):
        group = group.filter(pc.is_valid(group.column("title")))
        ns = group.column("namespace")
        redirect = pc.fill_null(group.column("is_redirect"), False)
        pages.plain.append(
            normalize_titles(
                pc.filter(group.column("title"), pc.and_(pc.equal(ns, ARTICLE_NS), pc.invert(redirect)))
            )
        )
        art_redirects = group.filter(pc.and_(pc.equal(ns, ARTICLE_NS), redirect))
        pages.redirect_rows += art_redirects.num_rows
        pages.redirect_titles.append(normalize_titles(art_redirects.column("title")))
        target = pc.replace_substring_regex(art_redirects.column("redirect_target"), "#.*$", "")
        to_article = pc.and_(
            pc.is_valid(target), pc.invert(pc.match_substring_regex(target, _NAMESPACE_PREFIX))
        )
        pages.redirect_src.append(normalize_titles(pc.filter(art_redirects.column("title"), to_article)))
        pages.redirect_dst.append(normalize_titles(pc.filter(target, to_article)))
        # Category redirects are few (thousands): plain Python.
        cat_redirects = group.filter(pc.and_(pc.equal(ns, CATEGORY_NS), redirect))
        for title, target_title in zip(
            cat_redirects.column("title").to_pylist(),
            cat_redirects.column("redirect_target").to_pylist(),
            strict=True,
        ):
            target_ns, target_name = split_namespace((target_title or "").split("#", 1)[0])
            if target_ns == CATEGORY_NS and target_name:
                pages.category_src.append(strip_namespace_prefix(title, CATEGORY_NS))
                pages.category_dst.append(target_name)
    return pages


def _encode(parts: list[pa.Array]) -> tuple[pa.Array, list[np.ndarray]]:
    """One vocabulary over several name arrays: (distinct names, each part's ids into them)."""
    parts = [p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in parts]
    combined = pa.concat_arrays([p.cast(pa.string()) for p in parts]) if parts else pa.array([], pa.string())
    encoded = pc.dictionary_encode(combined)
    ids = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    bounds = np.cumsum([0, *(len(p) for p in parts)])
    return encoded.dictionary, [ids[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


# -- the labeller -------------------------------------------------------------------------------
def label_domains(
    category_links: BatchSource,
    config: DomainConfig | None = None,
    *,
    articles: BatchSource | None = None,
    progress: bool | None = None,
) -> LabelResult:
    """Label articles with domains; see the module docstring for the semantics.

    `category_links`: rows (title, namespace, category) as in the `category_links` table: the
    child page's full title ("Category:Foo" for category pages), its namespace, and the parent
    category's name without prefix. Rows of other namespaces than 0 and 14 are ignored.
    `articles`: optional rows (title, namespace, is_redirect, redirect_target) of the `articles`
    table: adds articles without any category to the counts and supplies redirects (article
    redirects take their target's labels; a category page redirecting to another category
    makes its members members of the target).
    """
    config = config or DomainConfig()
    report = LabelReport(max_depth=config.max_depth)
    links = _read_links(category_links, progress)
    pages = _read_articles(articles)
    report.redirects = pages.redirect_rows

    # Names -> integer ids: one vocabulary of categories, one of article titles.
    domain_names = pa.array(list(config.domains), pa.string())
    (
        categories,
        (cat_child_of, cat_parent_of, art_parent_of, domain_ids, cat_redirect_src, cat_redirect_dst),
    ) = _encode(
        [
            normalize_titles(_strip_namespace(links.cat_child.names())),
            normalize_titles(links.cat_parent.names()),
            normalize_titles(links.art_parent.names()),
            domain_names,
            normalize_titles(pa.array(pages.category_src, pa.string())),
            normalize_titles(pa.array(pages.category_dst, pa.string())),
        ]
    )
    cat_child_ids = cat_child_of[links.cat_child.rows()]
    cat_parent_ids = cat_parent_of[links.cat_parent.rows()]
    art_cat_ids = art_parent_of[links.art_parent.rows()]
    n_cat = len(categories)
    report.categories = n_cat

    n_plain, n_redirect_titles, n_src = len(pages.plain), len(pages.redirect_titles), len(pages.redirect_src)
    titles, title_ids = _encode(
        [
            normalize_titles(links.art_child.names()),
            *pages.plain,
            *pages.redirect_titles,
            *pages.redirect_src,
            *pages.redirect_dst,
        ]
    )
    art_ids = title_ids[0][links.art_child.rows()]
    listed_ids = np.concatenate([title_ids[0], *title_ids[1 : 1 + n_plain]])
    redirect_title_ids = np.concatenate(
        [np.empty(0, np.int64), *title_ids[1 + n_plain : 1 + n_plain + n_redirect_titles]]
    )
    start = 1 + n_plain + n_redirect_titles
    redirect_src_ids = np.concatenate([np.empty(0, np.int64), *title_ids[start : start + n_src]])
    redirect_dst_ids = np.concatenate([np.empty(0, np.int64), *title_ids[start + n_src :]])
    del links, pages

    # Category redirects: members of a redirect category belong to its target.
    redirect_target = np.arange(n_cat, dtype=np.int64)
    src_ids, dst_ids = cat_redirect_src, cat_redirect_dst
    redirect_target[src_ids] = dst_ids
    redirect_target, _ = _resolve_redirects(redirect_target)
    report.category_redirects = len(src_ids)
    is_redirect_cat = np.zeros(n_cat, dtype=bool)
    is_redirect_cat[src_ids] = True
    cat_parent_ids = redirect_target[cat_parent_ids]
    art_cat_ids = redirect_target[art_cat_ids]
    keep = ~is_redirect_cat[cat_child_ids]  # a redirect category's own parents are not its target's
    cat_child_ids, cat_parent_ids = cat_child_ids[keep], cat_parent_ids[keep]

    # Hidden categories: by prefix, by name, or filed under a hidden-parent category.
    hidden = np.zeros(n_cat, dtype=bool)
    regex = config.hidden_prefix_regex()
    if regex is not None and n_cat:
        hidden |= pc.match_substring_regex(categories, regex).to_numpy(zero_copy_only=False)
    if config.hidden_categories:
        explicit = _lookup(pa.array(sorted(config.hidden_categories), pa.string()), categories)
        hidden[explicit[explicit >= 0]] = True
    marker_ids = _lookup(pa.array(list(config.hidden_parents), pa.string()), categories)
    marker_ids = marker_ids[marker_ids >= 0]
    if len(marker_ids):
        hidden[marker_ids] = True
        hidden[cat_child_ids[np.isin(cat_parent_ids, marker_ids)]] = True
    hidden[domain_ids] = False
    report.hidden_categories = int(hidden.sum())
    report.missing_domains = [
        d
        for d, i in zip(config.domains, domain_ids, strict=True)
        if not _has_edges(i, cat_parent_ids, art_cat_ids)
    ]

    walk = ~hidden[cat_child_ids] & ~hidden[cat_parent_ids] & (cat_child_ids != cat_parent_ids)
    use = ~hidden[art_cat_ids]
    report.hidden_edges_dropped = int((~walk).sum() + (~use).sum())
    cat_child_ids, cat_parent_ids = cat_child_ids[walk], cat_parent_ids[walk]
    art_ids, art_cat_ids = art_ids[use], art_cat_ids[use]
    report.category_edges = len(cat_child_ids)
    report.article_edges = len(art_ids)

    dist, mask = category_distances((cat_child_ids, cat_parent_ids), n_cat, domain_ids, config.max_depth - 1)
    report.reachable_categories = int((dist != _UNREACHED).sum())

    # Articles: depth = 1 + nearest category distance; labels = domains at that distance.
    n_titles = len(titles)
    best = np.full(n_titles, _UNREACHED, dtype=np.int32)
    cat_dist = dist[art_cat_ids]
    np.minimum.at(best, art_ids, cat_dist)
    nearest = (cat_dist == best[art_ids]) & (cat_dist != _UNREACHED)
    labels = np.zeros(n_titles, dtype=np.uint64)
    np.bitwise_or.at(labels, art_ids[nearest], mask[art_cat_ids[nearest]])
    depth = np.where(best == _UNREACHED, 0, best.astype(np.int64) + 1)
    has_category = np.zeros(n_titles, dtype=bool)
    has_category[art_ids] = True

    # Redirects take their target's labels; their own categories ("Redirects from ...") do not count.
    is_redirect_title = np.zeros(n_titles, dtype=bool)
    is_redirect_title[redirect_title_ids] = True
    labels[redirect_title_ids] = 0
    depth[redirect_title_ids] = 0
    target = np.arange(n_titles, dtype=np.int64)
    target[redirect_src_ids] = redirect_dst_ids
    final, looping = _resolve_redirects(target)
    resolved = ~looping[redirect_src_ids] & ~is_redirect_title[final[redirect_src_ids]]
    src = redirect_src_ids[resolved]
    labels[src] = labels[final[src]]
    depth[src] = depth[final[src]]
    report.redirects_labelled = int((labels[src] != 0).sum())
    report.redirects_unresolved = report.redirects - len(src)

    # Articles to count: listed as articles (or linked as pages) and not redirects.
    listed = np.zeros(n_titles, dtype=bool)
    listed[listed_ids] = True
    is_article = listed & ~is_redirect_title
    labelled = labels != 0
    report.articles = int(is_article.sum())
    report.labelled = int((labelled & is_article).sum())
    report.unreachable = int((~labelled & is_article & has_category).sum())
    report.no_categories = int((~labelled & is_article & ~has_category).sum())
    if report.labelled:
        hist = np.bincount(depth[labelled & is_article])
        report.depth_histogram = {int(d): int(c) for d, c in enumerate(hist) if c}
    article_labels = labels[is_article]
    report.per_domain = {
        name: int(((article_labels >> np.uint64(bit)) & np.uint64(1)).sum())
        for bit, name in enumerate(config.domains)
    }
    table = _domain_rows(titles, labels, depth, config.domains)
    return LabelResult(domains=table, report=report)


def _has_edges(domain_id: int, *parent_arrays: np.ndarray) -> bool:
    return domain_id >= 0 and any(bool((a == domain_id).any()) for a in parent_arrays)


def _domain_rows(
    titles: pa.Array, labels: np.ndarray, depth: np.ndarray, domains: tuple[str, ...]
) -> pa.Table:
    """One row per (title, domain bit set), sorted by title then configured domain order.

    Built in slices of labelled titles (in title order) with a small title x domain bit matrix,
    so memory stays proportional to a slice, not to the 10M+ rows of a full run.
    """
    labelled = np.flatnonzero(labels)
    by_title = labelled[pc.sort_indices(titles.take(pa.array(labelled))).to_numpy()]
    shifts = np.arange(len(domains), dtype=np.uint64)
    dictionary = pa.array(list(domains), pa.string())
    batches = []
    for lo in range(0, len(by_title), _ROWS_SLICE):
        ids = by_title[lo : lo + _ROWS_SLICE]
        bits = np.empty((len(ids), len(domains)), dtype=bool)
        masks = labels[ids]
        for bit, shift in enumerate(shifts):
            bits[:, bit] = (masks >> shift) & np.uint64(1)
        row, domain = np.nonzero(bits)  # row-major: by title, then domain order
        t = ids[row]
        batches.append(
            pa.record_batch(
                [
                    titles.take(pa.array(t)),
                    pa.DictionaryArray.from_arrays(pa.array(domain, pa.int32()), dictionary).cast(
                        pa.string()
                    ),
                    pa.array(depth[t].astype(np.int32), pa.int32()),
                ],
                schema=DOMAINS_SCHEMA,
            )
        )
    return pa.Table.from_batches(batches, schema=DOMAINS_SCHEMA)
