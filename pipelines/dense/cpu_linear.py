"""fp32 linear layers on oneDNN with prepacked weights, where this CPU runs them faster.

PyTorch's CPU wheels run ``nn.Linear`` on MKL's sgemm. The linear layers are about three
quarters of a BERT forward on CPU, and on some CPUs MKL is far from the chip's best: on this
project's AMD EPYC (Zen 4) machine oneDNN's matrix product, with the weight reordered once into
its blocked layout, ran 1.3-1.4x faster than MKL on every MiniLM shape (1.28x on the whole
forward). On Intel CPUs, MKL's home ground, the two can be even or MKL ahead, so the choice is
measured, once per process and weight shape, not assumed. The vectors match plain PyTorch's to fp32 rounding
(about 5e-6 absolute on MiniLM's hidden states); `benchmarks/RESULTS.md`, issue 38.

The prepacked weight is an opaque oneDNN tensor: it cannot be trained, pickled or deep-copied,
so only encoding copies hold these layers (`inference_weights`), never the model itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache

import torch
from torch import nn

PROBE_ROWS = 2048  # tokens in the probe's product: one CPU encode batch (CPU_BATCH_TOKENS)
PROBE_ROUNDS = 4  # interleaved rounds of one call each, after the check's warm-up; the best counts
PROBE_SECONDS = 0.2  # ...and more rounds, up to MAX_ROUNDS, while the probe has run shorter than this
MAX_ROUNDS = 50
MIN_GAIN = 0.95  # oneDNN is taken when its best call takes under 95% of MKL's (here: 65-87%)
_PROBING = threading.Lock()  # one probe at a time: two at once would time each other's load


def _onednn_ops_available() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and ops is not None
            and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise"))  # fmt: skip


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _seconds(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


@cache
def onednn_is_faster(in_features: int, out_features: int, threads: int) -> bool:
    """Whether oneDNN's prepacked product beats ``nn.Linear`` on this CPU for this weight shape
    at ``threads`` threads, measured now: the best of interleaved calls, as many as fit in
    ``PROBE_SECONDS`` (a small shape's product takes milliseconds, and one jittery call must not
    decide), so MiniLM's three shapes take ~0.6 s in all, BERT-base's ~2 s. Its result must also
    equal MKL's."""
    if not _onednn_ops_available():
        return False
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_ROWS, in_features, generator=generator)
    weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
    bias = torch.zeros(out_features)
    try:
        with _PROBING, torch.inference_mode():
            packed = _pack(weight)

            def plain() -> torch.Tensor:
                return nn.functional.linear(x, weight, bias)

            def prepacked() -> torch.Tensor:
                return _packed_product(x, packed, bias)

            if not torch.allclose(prepacked(), plain(), rtol=1e-4, atol=1e-5):
                return False
            times: list[tuple[float, float]] = []
            started = time.perf_counter()
            while len(times) < PROBE_ROUNDS or (len(times) < MAX_ROUNDS and time.perf_counter() - started < PROBE_SECONDS):
                times.append((_seconds(plain), _seconds(prepacked)))
    except RuntimeError:  # an op this build or CPU does not run
        return False
    return min(t[1] for t in times) < MIN_GAIN * min(t[0] for t in times)


class PackedLinear(nn.Module):
    """An fp32 ``nn.Linear`` for inference on CPU, its weight prepacked for oneDNN.

    ``weight`` and ``bias`` stay the original parameters (shared, not copied) for code that
    reads them; anything but an fp32 CPU input without gradients or autocast falls back to
    ``F.linear``.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._packed = _pack(linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dtype != torch.float32 or x.device.type != "cpu" or torch.is_grad_enabled()
                or torch.is_autocast_enabled("cpu")):
            return nn.functional.linear(x, self.weight, self.bias)
        return _packed_product(x, self._packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, onednn"


def _packable(module: nn.Module) -> bool:
    return (type(module) is nn.Linear and module.weight.dtype == torch.float32
            and module.weight.device.type == "cpu")  # fmt: skip


def has_packable_linears(model: nn.Module) -> bool:
    """Whether ``with_packed_linears`` would change ``model`` on this CPU (probes each shape)."""
    threads = torch.get_num_threads()
    return any(_packable(m) and onednn_is_faster(m.in_features, m.out_features, threads) for m in model.modules())


def with_packed_linears(model: nn.Module) -> nn.Module:
    """``model`` with each fp32 CPU ``nn.Linear`` whose shape runs faster on oneDNN replaced by
    a ``PackedLinear``. The caller passes a copy: modules are replaced in place, and a linear
    layer used in two places (shared towers) is replaced by one shared ``PackedLinear``."""
    threads = torch.get_num_threads()
    replaced: dict[int, PackedLinear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if _packable(child) and onednn_is_faster(child.in_features, child.out_features, threads):
                if id(child) not in replaced:
                    replaced[id(child)] = PackedLinear(child)  # type: ignore[arg-type]
                setattr(parent, name, replaced[id(child)])
    return model
