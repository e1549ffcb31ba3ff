"""oneDNN prepacked linear layers for CPU encoding: same vectors, the model itself untouched,
and the faster backend chosen by measuring it."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

from odqa.pipelines.dense import cpu_linear
from odqa.pipelines.dense.cpu_linear import PackedLinear, onednn_is_faster, with_packed_linears
from odqa.pipelines.dense.sharded_encoding import encode_tokenized, inference_weights, tokenize_shard
from tests.experiments.tiny_encoder import minilm_dir

pytestmark = pytest.mark.skipif(not cpu_linear._onednn_ops_available(), reason="this torch build has no oneDNN")

PASSAGES = [
    ("Aristotle", "Aristotle was an Ancient Greek philosopher and polymath. His writings cover a broad "
                  "range of subjects spanning the natural sciences, philosophy, linguistics, economics, "
                  "politics, psychology and the arts."),
    ("Nile", "The Nile is a major north-flowing river in northeastern Africa."),
    ("Kraków", "Kraków is the second-largest and one of the oldest cities in Poland. Situated on the "
               "Vistula River in Lesser Poland, the city dates back to the seventh century."),
    ("", "A passage without a title."),
]


@pytest.fixture
def probe_says(monkeypatch):
    """Fix the probe's verdict for every weight shape (the choice itself is tested below)."""

    def set_verdict(faster: bool) -> None:
        monkeypatch.setattr(cpu_linear, "onednn_is_faster", lambda *shape: faster)

    return set_verdict


def test_packed_linear_computes_what_nn_linear_computes():
    torch.manual_seed(0)
    for bias in (True, False):
        linear = nn.Linear(48, 80, bias=bias)
        packed = PackedLinear(linear)
        x = torch.randn(3, 17, 96)[..., ::2]  # 3-D and not contiguous, as a model's activations can be
        with torch.inference_mode():
            torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
        assert packed.weight is linear.weight and packed.bias is linear.bias


def test_packed_linear_falls_back_to_torch_for_gradients_and_autocast():
    linear = nn.Linear(8, 4)
    packed = PackedLinear(linear)
    x = torch.randn(5, 8, requires_grad=True)
    packed(x).sum().backward()  # oneDNN's prepacked product has no backward: F.linear runs
    assert linear.weight.grad is not None and x.grad is not None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert packed(x.detach()).dtype == linear(x.detach()).dtype == torch.bfloat16


def test_with_packed_linears_keeps_a_shared_layer_shared(probe_says):
    probe_says(True)
    shared = nn.Linear(8, 8)
    model = nn.ModuleDict({"a": nn.Sequential(shared, nn.ReLU()), "b": nn.Sequential(shared), "c": nn.LayerNorm(8)})
    with_packed_linears(model)
    assert isinstance(model["a"][0], PackedLinear) and model["a"][0] is model["b"][0]
    assert isinstance(model["c"], nn.LayerNorm)


def test_encoding_copy_shares_weights_and_gives_the_models_vectors(probe_says):
    """On CPU in fp32 the encoder runs on a copy whose linear layers are prepacked: the model
    keeps its ``nn.Linear`` layers and the copy shares its parameters (no second set of
    weights); the vectors equal plain PyTorch's to fp32 rounding."""
    from odqa.models.retriever import load_retriever

    model = load_retriever(minilm_dir())
    tokens = tokenize_shard(model, [t for t, _ in PASSAGES], [x for _, x in PASSAGES])
    probe_says(False)
    assert inference_weights(model, "fp32") is model
    plain = encode_tokenized(model, tokens, batch_size=2, device=None, precision="fp32")
    probe_says(True)
    fast = inference_weights(model, "fp32")
    assert fast is not model and fast.tokenizer is model.tokenizer
    packed = [m for m in fast.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == 6 * 6  # MiniLM: six layers of q, k, v, output, intermediate, output
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    assert {id(p) for p in fast.parameters()} == {id(p) for p in model.parameters()}
    assert inference_weights(fast, "fp32") is fast
    assert inference_weights(model, "fp32", "cuda:0") is model  # a GPU runs the model's own layers
    vectors = encode_tokenized(model, tokens, batch_size=2, device=None, precision="fp32")
    np.testing.assert_allclose(vectors, plain, rtol=0, atol=2e-6)
    assert np.sum(vectors * plain, axis=1).min() >= 0.999999


def test_probe_chooses_the_faster_backend_and_remembers_it(monkeypatch):
    """The verdict follows the measured times: oneDNN is chosen only when it is clearly faster,
    and each weight shape is measured once per thread count."""
    real = cpu_linear._packed_product
    real_linear = nn.functional.linear

    def slowed(function, seconds):
        def run(*args, **kwargs):
            time.sleep(seconds)
            return function(*args, **kwargs)

        return run

    monkeypatch.setattr(cpu_linear, "PROBE_ROWS", 16)
    onednn_is_faster.cache_clear()
    monkeypatch.setattr(cpu_linear, "_packed_product", slowed(real, 0.02))
    assert onednn_is_faster(8, 8, 1) is False
    monkeypatch.setattr(cpu_linear, "_packed_product", real)
    assert onednn_is_faster(8, 8, 1) is False  # remembered
    monkeypatch.setattr(nn.functional, "linear", slowed(real_linear, 0.02))
    assert onednn_is_faster(8, 8, 2) is True
    monkeypatch.setattr(nn.functional, "linear", real_linear)
    monkeypatch.setattr(cpu_linear, "_packed_product", lambda x, packed, bias: real(x, packed, bias) + 1.0)
    assert onednn_is_faster(8, 16, 1) is False  # a wrong result is never chosen, however fast
    onednn_is_faster.cache_clear()


def test_no_onednn_means_the_models_own_layers(monkeypatch):
    onednn_is_faster.cache_clear()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert onednn_is_faster(8, 8, 1) is False
    model = nn.Sequential(nn.Linear(8, 8))
    assert inference_weights(model, "fp32") is model
    onednn_is_faster.cache_clear()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> str:
    from tests.experiments.tiny_encoder import write_tiny_encoder

    return write_tiny_encoder(tmp_path_factory.mktemp("tiny"), layers=2, hidden=32)


@pytest.mark.parametrize("arch", ["dpr", "sde", "ade-ste", "ade-fte", "ade-spl", "taser", "desire-me"])
def test_every_architecture_encodes_the_same_through_prepacked_layers(arch, tiny_checkpoint, probe_says):
    """Every retriever kind (two towers, one, shared embedder or projection, TASER's experts,
    DESIRE-ME's mixture over a base) gives its own vectors through the prepacked copy."""
    from odqa.models.retriever import create_retriever

    torch.manual_seed(0)
    extra = {"domains": ["Culture", "Science"]} if arch == "desire-me" else {}
    model = create_retriever(arch, tiny_checkpoint, **extra).eval()
    tokens = tokenize_shard(model, [t for t, _ in PASSAGES], [x for _, x in PASSAGES])
    probe_says(False)
    plain = encode_tokenized(model, tokens, batch_size=3, device=None, precision="fp32")
    probe_says(True)
    fast = inference_weights(model, "fp32")
    assert any(isinstance(m, PackedLinear) for m in fast.modules())
    np.testing.assert_allclose(encode_tokenized(fast, tokens, batch_size=3, device=None, precision="fp32"),
                               plain, rtol=1e-5, atol=1e-6)  # fmt: skip
