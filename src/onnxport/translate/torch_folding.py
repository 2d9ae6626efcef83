"""Input-independent floating-point values computed by torch at export time.

A model often computes constants in its forward: the frequencies of a sinusoidal embedding,
`exp(-log(10000) * arange(half) / half)`, then multiplies them by its input. Translated, the
constant becomes Range, Mul, Div and Exp nodes that ONNX Runtime evaluates, and ORT's `Exp`
may round the last bit otherwise than torch's. That bit is harmless until the model
amplifies it: diffusion models multiply the frequencies by timesteps of ~1e6 before `sin`
(Flux, AuraFlow), where one ulp of the argument moves the output by 1e-2.

So a node that reads nothing the user feeds or may replace (no input, parameter or buffer;
only literals, `arange`/`full`-like creations and lifted constant tensors, through any
deterministic op) is evaluated here, with torch's own CPU kernels, which are eager's. Only
values whose computation went through an op that rounds differently across libraries
(`INEXACT`: exp, log, trigonometry, pow, ...) are emitted as constants, because elsewhere
(+, *, /, comparisons, casts, reshapes) ONNX Runtime's results are bit-identical and the
graph keeps its readable form. Values above `MAX_ELEMENTS` are not kept (a large table is
better computed at run time than stored).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["INEXACT", "MAX_ELEMENTS", "TorchFolder"]

MAX_ELEMENTS = 1 << 16

_aten = torch.ops.aten
# Ops whose float results may differ in the last bit between torch and ONNX Runtime.
INEXACT = frozenset({
    _aten.exp.default, _aten.exp2.default, _aten.expm1.default, _aten.log.default,
    _aten.log2.default, _aten.log10.default, _aten.log1p.default, _aten.sin.default,
    _aten.cos.default, _aten.tan.default, _aten.asin.default, _aten.acos.default,
    _aten.atan.default, _aten.atan2.default, _aten.sinh.default, _aten.cosh.default,
    _aten.tanh.default, _aten.sigmoid.default, _aten.erf.default, _aten.erfc.default,
    _aten.erfinv.default, _aten.pow.Tensor_Scalar, _aten.pow.Tensor_Tensor,
    _aten.pow.Scalar, _aten.rsqrt.default, _aten._softmax.default,
    _aten._log_softmax.default, _aten.logsumexp.default, _aten.lgamma.default,
    _aten.digamma.default,
})


class TorchFolder:
    """Tracks the FX nodes whose values are known without any input; evaluates them."""

    def __init__(self) -> None:
        self.known: dict[torch.fx.Node, torch.Tensor] = {}
        self.inexact: set[torch.fx.Node] = set()

    def add_constant(self, node: torch.fx.Node, tensor: Any) -> None:
        """A lifted constant tensor (not a parameter or buffer, which the user may replace)."""
        if _usable(tensor):
            self.known[node] = tensor

    def evaluate(self, node: torch.fx.Node, target: Any) -> torch.Tensor | None:
        """The node's value if it is input-independent and small, computed by torch; it is
        remembered for the nodes that read it."""
        if not isinstance(target, torch._ops.OpOverload) or not _foldable(target):
            return None
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape) \
                or val.numel() > MAX_ELEMENTS:
            return None   # (checked before running: `full` of a large size would allocate it)
        missing = False

        def real(a: Any) -> Any:
            nonlocal missing
            if isinstance(a, torch.fx.Node):
                if a not in self.known:
                    missing = True
                    return None
                return self.known[a]
            if isinstance(a, (list, tuple)):
                return type(a)(real(x) for x in a)
            if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
                missing = True
            return a

        args, kwargs = real(node.args), {k: real(v) for k, v in node.kwargs.items()}
        if missing:
            return None
        try:
            with torch.no_grad(), torch._subclasses.fake_tensor.unset_fake_temporarily():
                value = target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the translation computes it instead
            return None
        if not _usable(value):
            return None
        self.known[node] = value
        if target in INEXACT or any(isinstance(a, torch.fx.Node) and a in self.inexact
                                    for a in node.all_input_nodes):
            self.inexact.add(node)
        return value

    def constant_for(self, node: torch.fx.Node) -> torch.Tensor | None:
        """The value to emit instead of translating `node`: known, floating point, and
        computed through an op ONNX Runtime may round otherwise."""
        value = self.known.get(node)
        if value is None or node not in self.inexact or value.dtype not in _EMITTED:
            return None
        return value


def _usable(value: Any) -> bool:
    return (isinstance(value, torch.Tensor) and type(value) is torch.Tensor
            and value.device.type == "cpu" and not value.is_complex()
            and value.numel() <= MAX_ELEMENTS)


_EMITTED = (torch.float16, torch.float32, torch.float64)


def _foldable(target: torch._ops.OpOverload) -> bool:
    """Deterministic and pure: no random draws, no writes into its arguments."""
    return not (torch.Tag.nondeterministic_seeded in target.tags
                or torch.Tag.nondeterministic_bitwise in target.tags
                or target._schema.is_mutable)
