"""The SQL the demo runs and prints, to show users what they can ask the catalog with `odqa sql`."""

from __future__ import annotations

DEMO_QUERIES = [
    (
        "Questions per DESIRE-ME domain (labels from the category graph)",
        "SELECT domain, count(*) AS questions FROM (SELECT unnest(domains) AS domain FROM questions) "
        "GROUP BY domain ORDER BY questions DESC, domain LIMIT 8",
    ),
    (
        "Articles per top-level domain and how far up the category graph it was found",
        "SELECT domain, count(*) AS articles, round(avg(depth), 2) AS mean_depth FROM domains "
        "GROUP BY domain ORDER BY articles DESC, domain LIMIT 8",
    ),
    (
        "R@5 per relation on the T-REx test split: BM25 vs TASER",
        "SELECT \"group\" AS relation, round(max(value) FILTER (WHERE run = 'bm25-trex-test'), 3) AS bm25, "
        "round(max(value) FILTER (WHERE run = 'taser-trex-test'), 3) AS taser FROM metrics "
        "WHERE metric = 'R@5' AND \"group\" <> '' AND run IN ('bm25-trex-test', 'taser-trex-test') "
        "GROUP BY relation ORDER BY relation",
    ),
]
