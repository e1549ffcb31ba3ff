"""t-SNE probe of a dual encoder's two towers (dual-encoder architectures paper, section 4.3).

The paper projects question and answer embeddings of a model into 2-D with t-SNE: towers that
do not share a projection layer (ADE, ADE-STE, ADE-FTE) put questions and passages into two
disjoint clusters, while SDE and ADE-SPL mix them. Besides the picture we report a number, the
accuracy with which the tower of each point is predicted from its nearest neighbours in the
2-D map (leave-one-out k-NN): about 0.5 means one shared space, near 1.0 two separate ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...storage.atomic import atomic_write


@dataclass(frozen=True)
class TowerProjection:
    points: np.ndarray  # (nq + np, 2) t-SNE coordinates, questions first
    is_question: np.ndarray  # bool per point
    tower_separation: float  # leave-one-out k-NN accuracy of the tower label in 2-D


def project_towers(
    question_vectors: np.ndarray,
    passage_vectors: np.ndarray,
    *,
    perplexity: float = 30.0,
    seed: int = 0,
    neighbours: int = 10,
    threads: int | None = None,
) -> TowerProjection:
    """Joint t-SNE of both towers' embeddings (one fit, so distances are comparable).

    ``threads`` caps OpenMP/BLAS threads: sklearn's Barnes-Hut t-SNE slows down by an order of
    magnitude when its threads compete for a few busy cores.
    """
    from sklearn.manifold import TSNE
    from sklearn.neighbors import NearestNeighbors
    from threadpoolctl import threadpool_limits

    q = np.asarray(question_vectors, dtype=np.float32)
    p = np.asarray(passage_vectors, dtype=np.float32)
    if q.ndim != 2 or p.ndim != 2 or q.shape[1] != p.shape[1]:
        raise ValueError(f"need two (n, d) arrays of one dimension, got {q.shape} and {p.shape}")
    data = np.vstack([q, p])
    if len(data) < 5:
        raise ValueError(f"t-SNE needs at least 5 points, got {len(data)}")
    perplexity = min(perplexity, (len(data) - 1) / 3)
    with threadpool_limits(threads):
        points = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(data)
    labels = np.r_[np.ones(len(q), bool), np.zeros(len(p), bool)]
    k = min(neighbours, len(data) - 1)
    _, nn = NearestNeighbors(n_neighbors=k + 1).fit(points).kneighbors(points)
    votes = labels[nn[:, 1:]].mean(axis=1)  # column 0 is the point itself
    accuracy = float(np.mean((votes > 0.5) == labels))
    return TowerProjection(points.astype(np.float32), labels, accuracy)


def plot_towers(projection: TowerProjection, out_png: Path | str, title: str) -> Path:
    """Scatter plot coloured by tower, written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_png = Path(out_png)
    fig, ax = plt.subplots(figsize=(6, 6), dpi=120)
    for mask, label, color in ((projection.is_question, "questions", "tab:blue"),
                               (~projection.is_question, "passages", "tab:orange")):
        ax.scatter(projection.points[mask, 0], projection.points[mask, 1], s=6, alpha=0.6, c=color, label=label)
    ax.set_title(f"{title}\ntower separation (k-NN acc.) {projection.tower_separation:.2f}", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(loc="best", markerscale=3)
    fig.tight_layout()
    try:
        atomic_write(out_png, lambda handle: fig.savefig(handle, format="png"))
    finally:
        plt.close(fig)
    return out_png
