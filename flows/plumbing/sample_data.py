"""Where the bundled sample lives (the demo and end-to-end tests run on it)."""

from __future__ import annotations

from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample"
SAMPLE_DUMP = SAMPLE_DIR / "wiki" / "enwiki-sample-pages-articles.xml.bz2"
