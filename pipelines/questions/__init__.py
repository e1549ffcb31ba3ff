"""Question datasets: template questions from Wikidata/T-REx facts, PAQ samples, QA imports.

Pure steps (no Prefect, no workspace): each takes files or Arrow tables and returns Arrow
tables or records. See triples.py / sparql.py (facts), templates.py and splits.py (questions
and the thesis' splits), positives.py (gold passages), paq.py (PAQ sampling, flipped variant),
imports.py (standard QA formats) and specs.py (multi-set training lists).
"""
