"""t-SNE tower probe: separated towers are detected, a shared space is not, the PNG is real."""

from __future__ import annotations

import numpy as np
import pytest

from odqa.pipelines.dense.tsne_plot import plot_towers, project_towers


def test_disjoint_towers_separate_and_shared_space_mixes(tmp_path):
    rng = np.random.default_rng(0)
    shared = rng.standard_normal((120, 32)).astype(np.float32)
    offset = np.zeros(32, np.float32)
    offset[0] = 12.0
    apart = project_towers(shared[:60], shared[60:] + offset, perplexity=15, threads=1)
    mixed = project_towers(shared[:60], shared[60:], perplexity=15, threads=1)
    assert apart.tower_separation > 0.95
    assert mixed.tower_separation < 0.75
    assert apart.points.shape == (120, 2) and apart.is_question.sum() == 60
    png = plot_towers(apart, tmp_path / "plots" / "towers.png", "offset passages")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "plots").glob("*.tmp"))


def test_shape_errors():
    with pytest.raises(ValueError, match="one dimension"):
        project_towers(np.zeros((5, 3)), np.zeros((5, 4)))
