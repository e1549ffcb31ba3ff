"""fp32 linear layers on oneDNN with prepacked weights, on CPUs where MKL is not at its best.

PyTorch's x86 CPU wheels run ``nn.Linear`` on MKL's sgemm, and the linear layers are about
three quarters of a BERT forward on CPU. MKL chooses its kernels by CPU vendor and does not
take its fastest paths on other vendors' chips; oneDNN chooses by instruction set. On this
project's AMD EPYC (Zen 4) machine oneDNN's matrix product, with the weight reordered once into
its blocked layout, ran 1.3-1.4x faster than MKL on every MiniLM shape (1.28x the whole forward,
1.13-1.16x a real encode; `benchmarks/RESULTS.md`, issue 38). On Intel CPUs, MKL's home
ground, PyTorch's own layers run, as before.

The rule is the vendor, not a timing: a choice made by timing flips between processes for
shapes where the two are close, and then one corpus encoded in process and on a Dask cluster
would differ in its last bits. Both libraries give the same bytes for a row whatever the thread
count or the rest of the batch, so with a fixed rule the vectors do not depend on how an
encode is run. They match plain PyTorch's to fp32 rounding (about 5e-6 absolute on MiniLM's
hidden states).

The prepacked weight is an opaque oneDNN tensor: it cannot be trained, pickled or deep-copied,
so only encoding copies hold these layers (`inference_weights`), never the model itself.
"""

from __future__ import annotations

import logging
from functools import cache

import torch
from torch import nn

from ..cpu_features import cpu_vendor

log = logging.getLogger(__name__)
MKL_VENDOR = "GenuineIntel"  # MKL's own kernels run on Intel CPUs: PyTorch's layers stay there


def _onednn_ops_available() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and ops is not None
            and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise"))  # fmt: skip


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _agrees_with_torch() -> bool:
    """Whether the prepacked product runs here and computes what ``F.linear`` computes."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=generator)
    weight = torch.randn(80, 96, generator=generator) / 96**0.5
    bias = torch.randn(80, generator=generator)
    try:
        with torch.inference_mode():
            return torch.allclose(_packed_product(x, _pack(weight), bias), nn.functional.linear(x, weight, bias),
                                  rtol=1e-4, atol=1e-5)  # fmt: skip
    except RuntimeError:  # an op this build or CPU does not run
        return False


@cache
def onednn_runs_linears() -> bool:
    """Whether fp32 linear layers are encoded with oneDNN here: an x86 CPU not made by Intel,
    and a PyTorch build whose prepacked product runs and agrees with ``F.linear`` (once a process)."""
    vendor = cpu_vendor()
    chosen = vendor is not None and vendor != MKL_VENDOR and _onednn_ops_available() and _agrees_with_torch()
    log.info("fp32 linear layers on this %s CPU: %s", vendor or "non-x86",
             "oneDNN, prepacked weights" if chosen else "PyTorch's own (MKL)")  # fmt: skip
    return chosen


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
                or torch.is_autocast_enabled("cpu")):  # fmt: skip
            return nn.functional.linear(x, self.weight, self.bias)
        return _packed_product(x, self._packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, onednn"


def _packable(module: nn.Module) -> bool:
    return (type(module) is nn.Linear and module.weight.dtype == torch.float32
            and module.weight.device.type == "cpu")  # fmt: skip


def has_packable_linears(model: nn.Module) -> bool:
    """Whether ``with_packed_linears`` would change ``model`` on this machine."""
    return onednn_runs_linears() and any(_packable(m) for m in model.modules())


def with_packed_linears(model: nn.Module) -> nn.Module:
    """``model`` with each fp32 CPU ``nn.Linear`` replaced by a ``PackedLinear`` (when
    ``onednn_runs_linears``). The caller passes a copy: modules are replaced in place, and a
    linear layer used in two places (shared towers) is replaced by one shared ``PackedLinear``."""
    if not onednn_runs_linears():
        return model
    replaced: dict[int, PackedLinear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if _packable(child):
                if id(child) not in replaced:
                    replaced[id(child)] = PackedLinear(child)  # type: ignore[arg-type]
                setattr(parent, name, replaced[id(child)])
    return model
