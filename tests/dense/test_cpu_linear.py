"""oneDNN prepacked linear layers for CPU encoding: same vectors, the model itself untouched,
and the backend chosen by a fixed rule (the CPU's vendor), so the bytes do not vary by run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from odqa.pipelines.dense import cpu_linear
from odqa.pipelines.dense.cpu_linear import PackedLinear, onednn_runs_linears, with_packed_linears
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
def onednn_chosen(monkeypatch):
    """Fix the choice of backend (the rule itself is tested below)."""

    def set_verdict(onednn: bool) -> None:
        monkeypatch.setattr(cpu_linear, "onednn_runs_linears", lambda: onednn)

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


def test_with_packed_linears_keeps_a_shared_layer_shared(onednn_chosen):
    onednn_chosen(True)
    shared = nn.Linear(8, 8)
    model = nn.ModuleDict({"a": nn.Sequential(shared, nn.ReLU()), "b": nn.Sequential(shared), "c": nn.LayerNorm(8)})
    with_packed_linears(model)
    assert isinstance(model["a"][0], PackedLinear) and model["a"][0] is model["b"][0]
    assert isinstance(model["c"], nn.LayerNorm)


def test_encoding_copy_shares_weights_and_gives_the_models_vectors(onednn_chosen):
    """On CPU in fp32 the encoder runs on a copy whose linear layers are prepacked: the model
    keeps its ``nn.Linear`` layers and the copy shares its parameters (no second set of
    weights); the vectors equal plain PyTorch's to fp32 rounding."""
    from odqa.models.retriever import load_retriever

    model = load_retriever(minilm_dir())
    tokens = tokenize_shard(model, [t for t, _ in PASSAGES], [x for _, x in PASSAGES])
    onednn_chosen(False)
    assert inference_weights(model, "fp32") is model
    plain = encode_tokenized(model, tokens, batch_size=2, device=None, precision="fp32")
    onednn_chosen(True)
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


@pytest.mark.parametrize(("vendor", "onednn"), [("AuthenticAMD", True), ("HygonGenuine", True),
                                               ("GenuineIntel", False), (None, False)])  # fmt: skip
def test_the_cpu_vendor_chooses_the_backend(monkeypatch, vendor, onednn):
    """oneDNN on x86 CPUs not made by Intel (where MKL does not take its fastest kernels),
    PyTorch's own layers on Intel's and on CPUs that report no x86 vendor."""
    monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda: vendor)
    onednn_runs_linears.cache_clear()
    try:
        assert onednn_runs_linears() is onednn
        model = nn.Sequential(nn.Linear(8, 8))
        assert (inference_weights(model, "fp32") is not model) is onednn
    finally:
        onednn_runs_linears.cache_clear()


def test_a_product_that_disagrees_with_torch_or_no_onednn_means_the_models_own_layers(monkeypatch):
    monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda: "AuthenticAMD")
    real = cpu_linear._packed_product
    try:
        onednn_runs_linears.cache_clear()
        monkeypatch.setattr(cpu_linear, "_packed_product", lambda x, packed, bias: real(x, packed, bias) + 1e-3)
        assert onednn_runs_linears() is False
        monkeypatch.setattr(cpu_linear, "_packed_product", real)
        onednn_runs_linears.cache_clear()
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
        assert onednn_runs_linears() is False
    finally:
        onednn_runs_linears.cache_clear()


def test_cpuinfo_vendor_is_read_from_the_x86_vendor_line():
    from odqa.pipelines.cpu_features import vendor_id

    assert vendor_id("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2\n") == "AuthenticAMD"
    assert vendor_id("processor\t: 0\nFeatures\t: fp asimd bf16\n") is None  # Arm: no vendor_id line


def test_vectors_do_not_depend_on_the_thread_count(onednn_chosen):
    """A mapped encode's workers may run other thread counts than the parent: each passage's
    vector comes out byte for byte the same."""
    from odqa.models.retriever import load_retriever

    onednn_chosen(True)
    model = load_retriever(minilm_dir())
    tokens = tokenize_shard(model, [t for t, _ in PASSAGES], [x for _, x in PASSAGES])
    threads = torch.get_num_threads()
    try:
        runs = []
        for count in (1, 2):
            torch.set_num_threads(count)
            runs.append(encode_tokenized(model, tokens, batch_size=4, device=None, precision="fp32").tobytes())
    finally:
        torch.set_num_threads(threads)
    assert runs[0] == runs[1]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> str:
    from tests.experiments.tiny_encoder import write_tiny_encoder

    return write_tiny_encoder(tmp_path_factory.mktemp("tiny"), layers=2, hidden=32)


@pytest.mark.parametrize("arch", ["dpr", "sde", "ade-ste", "ade-fte", "ade-spl", "taser", "desire-me"])
def test_every_architecture_encodes_the_same_through_prepacked_layers(arch, tiny_checkpoint, onednn_chosen):
    """Every retriever kind (two towers, one, shared embedder or projection, TASER's experts,
    DESIRE-ME's mixture over a base) gives its own vectors through the prepacked copy."""
    from odqa.models.retriever import create_retriever

    torch.manual_seed(0)
    extra = {"domains": ["Culture", "Science"]} if arch == "desire-me" else {}
    model = create_retriever(arch, tiny_checkpoint, **extra).eval()
    tokens = tokenize_shard(model, [t for t, _ in PASSAGES], [x for _, x in PASSAGES])
    onednn_chosen(False)
    plain = encode_tokenized(model, tokens, batch_size=3, device=None, precision="fp32")
    onednn_chosen(True)
    fast = inference_weights(model, "fp32")
    assert any(isinstance(m, PackedLinear) for m in fast.modules())
    np.testing.assert_allclose(encode_tokenized(fast, tokens, batch_size=3, device=None, precision="fp32"),
                               plain, rtol=1e-5, atol=1e-6)  # fmt: skip
