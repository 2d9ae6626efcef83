"""`--quantize int4|int8` of checkpoint export: RTN weights on each exported graph, and the
validation rule for them.

Each graph is exported in float, then `onnxport.quantize.quantize_weights` rewrites the
constant weights of its MatMul/Gemm nodes (every Linear of the decoder and the LM head, as the
GenAI builder's `-p int4`; embeddings stay float) before it is saved. Under the ONNX Runtime
target the target's weight passes then run on the quantized graph (MatMulNBits for 4 bits,
the 8-bit form for int8), with the target's accuracy level and block size.

Validation (docs/cli.md, "Quantized export"): RTN's error is no float noise, so each output
is compared twice, with `e_q` the largest difference between eager PyTorch with the float
weights and eager PyTorch with the RTN-dequantized weights on the same inputs (what the
quantization alone changes):

* against the eager model carrying the RTN-dequantized weights, within `e_q + atol`: the graph
  computes the quantized model; the runtime's own approximation (activations quantized to
  int8 per block at accuracy level 4) may add at most as much again as the weights' rounding;
* against the float eager model, within `2 e_q + atol`: what the user gets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport.tasks.errors import TaskError

__all__ = ["QUANTIZE_CHOICES", "QuantizeSpec", "quantization_error", "quantize_program",
           "rtn_weights"]

QUANTIZE_CHOICES = ("int4", "int8")
QUANTIZE_OPSET = 21  # INT4 and blocked DequantizeLinear


@dataclasses.dataclass(frozen=True)
class QuantizeSpec:
    """What `--quantize` asks for: bits, the block along K (0: per output channel) and
    whether values are signed without zero points (the builder's default)."""

    bits: int
    block_size: int = 32
    symmetric: bool = True

    @classmethod
    def parse(cls, quantize: str | None, *, block_size: int | None = None,
              symmetric: bool = True) -> QuantizeSpec | None:
        if quantize is None:
            if block_size is not None:
                raise TaskError("block_size is an option of quantize='int4' / 'int8' "
                                "(--quantize)")
            return None
        if quantize not in QUANTIZE_CHOICES:
            raise TaskError(f"unknown quantize={quantize!r}; choose int4 or int8")
        bits = int(quantize[3:])
        block = 32 if block_size is None else int(block_size)
        if bits == 4 and block == 0:
            raise TaskError("int4 weights need blocks (block_size >= 16); per-channel "
                            "(block_size 0) is for int8")
        return cls(bits, block, symmetric)

    def opset(self, requested: int | None) -> int | None:
        """The opset to export at: 21 when none was given and the weights need it."""
        needs = self.bits == 4 or self.block_size > 0
        if not needs:
            return requested
        if requested is None:
            return QUANTIZE_OPSET
        if requested < QUANTIZE_OPSET:
            what = "int4 weights" if self.bits == 4 else "blocked int8 weights"
            raise TaskError(f"--quantize int{self.bits} writes {what} (DequantizeLinear with "
                            f"block_size), which need opset {QUANTIZE_OPSET} or newer; "
                            f"--opset {requested} was given (leave --opset out, or "
                            + ("use --quantize int8 --block-size 0)" if self.bits == 4
                               else "use --block-size 0 for per-channel int8)"))
        return requested


def _weight_passes(target: str) -> list[Any]:
    """The ONNX Runtime target's passes that rewrite dequantized weights (MatMulNBits, uint8
    weights), configured as the target is (accuracy level, block size)."""
    from onnxport.options import OnnxRuntimeTarget
    from onnxport.passes.onnxruntime import onnxruntime_passes
    from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass
    from onnxport.passes.onnxruntime.uint8_weights import Uint8WeightsPass

    passes = onnxruntime_passes(target if isinstance(target, OnnxRuntimeTarget) else None)
    return [p for p in passes if isinstance(p, (FuseMatMulNBitsPass, Uint8WeightsPass))]


def quantize_program(program: Any, spec: QuantizeSpec, target: str) -> Any:
    """RTN-quantize `program`'s weights in place (and run the target's weight passes)."""
    from onnxport.passes import cleanup_passes, run_passes
    from onnxport.quantize import quantize_weights

    done = quantize_weights(program.model, bits=spec.bits, block_size=spec.block_size,
                            symmetric=spec.symmetric)
    if target == "onnxruntime" and done.nodes:
        # The weight passes write the packed weights as Constant nodes; as initializers they
        # go to external data like any weight (a protobuf holds at most 2 GB).
        run_passes(program.model, [*_weight_passes(target), *cleanup_passes(),
                                   ir.passes.common.LiftConstantsToInitializersPass(
                                       size_limit=1024)])
    return done


def _rtn(weight: torch.Tensor, layout: str, spec: QuantizeSpec) -> torch.Tensor:
    """`weight` as the graph holds it after RTN: quantized along K ([K, N] layout "kn", a
    Linear's [N, K] "nk"), scales rounded to the weight's dtype, dequantized."""
    from onnxport.quantize import dequantize_blocks, quantize_blocks

    w = weight.detach().float().numpy()
    kn = w.T if layout == "nk" else w
    q, scale, zero = quantize_blocks(kn, bits=spec.bits, block_size=spec.block_size,
                                     symmetric=spec.symmetric)
    scale = torch.from_numpy(np.ascontiguousarray(scale)).to(weight.dtype).float().numpy()
    deq = dequantize_blocks(q, scale, zero, spec.block_size)
    deq = deq.T if layout == "nk" else deq
    return torch.from_numpy(np.ascontiguousarray(deq)).to(weight.dtype)


@contextlib.contextmanager
def rtn_weights(model: torch.nn.Module, layouts: dict[str, str], spec: QuantizeSpec
                ) -> Iterator[None]:
    """Within the block, `model`'s weights named in `layouts` (state_dict keys -> "kn"/"nk")
    hold their RTN-dequantized values; a weight tied to another (an LM head sharing the
    embedding) is untied for the while, as the graph keeps the embedding float."""
    params = model.state_dict(keep_vars=True)
    saved: list[tuple[torch.nn.Module, str, Any]] = []
    try:
        for name, layout in layouts.items():
            if name not in params:
                continue
            path, _, leaf = name.rpartition(".")
            module = model.get_submodule(path) if path else model
            old = getattr(module, leaf)
            saved.append((module, leaf, old))
            new = _rtn(old, layout, spec)
            if isinstance(old, torch.nn.Parameter):
                setattr(module, leaf, torch.nn.Parameter(new, requires_grad=False))
            else:
                setattr(module, leaf, new)
        yield
    finally:
        for module, leaf, old in reversed(saved):
            setattr(module, leaf, old)


def quantization_error(spec_graph: Any, model: torch.nn.Module, layouts: dict[str, str],
                       qspec: QuantizeSpec, shapes: list[dict[str, int]], seed: int = 0
                       ) -> float:
    """e_q: the largest |eager(RTN weights) - eager(float weights)| over `spec_graph`'s
    outputs at `shapes`, on the inputs validation feeds (same seed)."""
    worst = 0.0
    for shape in shapes:
        torch.manual_seed(seed)
        feeds = spec_graph.make_inputs(shape)
        with torch.no_grad():
            plain = spec_graph.eager(feeds)
            with rtn_weights(model, layouts, qspec):
                quant = spec_graph.eager(feeds)
        for name in spec_graph.output_names:
            if name in plain and name in quant:
                a = plain[name].detach().float()
                b = quant[name].detach().float()
                if a.shape == b.shape and a.numel():
                    d = float((a - b).abs().max())
                    worst = max(worst, d if math.isfinite(d) else 0.0)
    return worst
