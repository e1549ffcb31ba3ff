"""A literal per-article breadth-first walk: the definition the fast labeller must reproduce."""

from __future__ import annotations

from collections.abc import Iterable


def naive_labels(
    article_categories: dict[str, Iterable[str]],
    parents: dict[str, Iterable[str]],
    domains: Iterable[str],
    hidden: set[str],
    max_depth: int,
) -> dict[str, tuple[int, set[str]]]:
    """article -> (depth, domains) for labelled articles, walking one article at a time.

    Level 1 = the article's own (non-hidden) categories; each next level = the unvisited,
    non-hidden parents of the previous one; stop at the first level holding a domain.
    """
    domain_set = set(domains)
    out: dict[str, tuple[int, set[str]]] = {}
    for article, cats in article_categories.items():
        level = {c for c in cats if c not in hidden or c in domain_set}
        visited = set(level)
        depth = 1
        while level and depth <= max_depth:
            found = level & domain_set
            if found:
                out[article] = (depth, found)
                break
            nxt = set()
            for c in level:
                for p in parents.get(c, ()):
                    if p not in visited and (p not in hidden or p in domain_set):
                        visited.add(p)
                        nxt.add(p)
            level = nxt
            depth += 1
    return out
