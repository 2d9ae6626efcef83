"""Models, quantization flows and the comparison every quantization test uses.

Tolerances (stated once, used by every test):

* Quantized activations (every QuantizeLinear / DynamicQuantizeLinear output): within one
  quantization step of eager's, and equal in at least 99% of elements. ONNX quantizes
  `round(x / scale)`, eager `round(x * (1 / scale))`; the two can differ in the last float32
  bit, so an element sitting at a rounding tie may move by one step; anything else (a wrong
  zero point, axis, dtype or clamp) moves many elements or many steps.
* A dequantized output (XNNPACK quantizes Linear outputs): one step of its scale, as the
  quantized values themselves are within one step.
* The float output of the final Linear: within `scale_in * max_j sum_i |W_ji|` (+1e-5), the
  most the output can move when every element of its quantized input moves by one step
  (scale_in: that input's quantization scale, W: the dequantized weight). This holds for ONNX
  Runtime's fused integer kernels too (QLinearConv/QGemm requantize each intermediate
  activation to the nearest step of the same scale).
"""

from __future__ import annotations

import collections
import operator
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines quantized_decomposed ops)

import onnxport
from onnxport.passes.fuse_rows import ROWS_OF

warnings.filterwarnings("ignore", module="torchao")

QUANTIZE_TARGETS = ("quantize_per_tensor", "quantize_per_channel")
FUSED_KERNELS = ("QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger",
                 "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "ConvInteger", "QAttention")


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def cnn() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return CNN().eval(), (torch.randn(2, 3, 8, 8),)


def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return MLP().eval(), (torch.randn(4, 16),)


def quantizer(flow: str) -> Any:
    """The PT2E quantizer of a flow name."""
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    if flow == "x86":
        return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    if flow == "x86_dynamic":
        return X86InductorQuantizer().set_global(
            get_default_x86_inductor_quantization_config(is_dynamic=True))
    if flow == "xnnpack_per_tensor":
        return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=False))
    if flow == "xnnpack_per_channel":
        return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    if flow == "xnnpack_dynamic":
        return XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    raise ValueError(flow)


def pt2e(model: torch.nn.Module, example: tuple[Any, ...], flow: str, *,
         kwargs: dict[str, Any] | None = None, calibrate: Callable[[], Sequence[Any]] | None = None,
         fold_quantize: bool = True) -> torch.fx.GraphModule:
    """prepare_pt2e -> calibrate on random inputs like `example` -> convert_pt2e."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    kwargs = kwargs or {}
    captured = torch.export.export(model, example, kwargs).module()
    prepared = prepare_pt2e(captured, quantizer(flow))
    for _ in range(4):
        args = calibrate() if calibrate else [torch.randn_like(t) for t in example]
        prepared(*args, **kwargs)
    return convert_pt2e(prepared, fold_quantize=fold_quantize)


def ort_session(model: onnx.ModelProto | str, *, optimized_path: str | None = None,
                optimize: bool = True, level: ort.GraphOptimizationLevel | None = None
                ) -> ort.InferenceSession:
    """A CPU session: all graph optimizations, none (`optimize=False`) or `level`."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif level is not None:
        options.graph_optimization_level = level
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def optimized_op_counts(model: onnx.ModelProto | str) -> collections.Counter[str]:
    """Node types of the model after ONNX Runtime's graph optimizations (all levels)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        ort_session(model, optimized_path=path)
        return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def run_ort(session: ort.InferenceSession, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
    feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return session.run(None, feed)


class Recorder(torch.fx.Interpreter):
    """Runs a GraphModule, keeping every node's value."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def _is(node: torch.fx.Node, names: Sequence[str]) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.namespace == "quantized_decomposed" \
        and target._schema.name.split("::")[-1] in names


def output_tolerance(gm: torch.fx.GraphModule, values: dict[str, Any]) -> float:
    """scale_in * max_j sum_i |W_ji| of the final Linear (see the module docstring)."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    node = out[0] if isinstance(out, (list, tuple)) else out
    while node.target in (torch.ops.aten.view.default, torch.ops.aten.reshape.default,
                          torch.ops.aten.slice.Tensor, operator.getitem,
                          torch.ops.aten.squeeze.dim, torch.ops.aten.select.int):
        node = node.args[0]
    if _is(node, ("dequantize_per_tensor",)):  # a quantized output: one step of its scale
        return _scale(node, values) + 1e-6
    assert node.target == torch.ops.aten.linear.default, f"final op {node.target} is not Linear"
    dq = node.args[0]
    while not _is(dq, ("dequantize_per_tensor",)):
        dq = dq.args[0]  # views between the dequantize and the Linear
    weight = values[node.args[1].name]
    return _scale(dq, values) * float(weight.abs().sum(-1).max()) + 1e-5


def _scale(dq: torch.fx.Node, values: dict[str, Any]) -> float:
    scale = dq.args[1]
    return float(values[scale.name].reshape(-1)[0]) if isinstance(scale, torch.fx.Node) \
        else float(scale)


def check(quantized: torch.fx.GraphModule, example: tuple[Any, ...], *,
          program: onnxport.ONNXProgram | None = None,
          level: ort.GraphOptimizationLevel | None = None, **export_kwargs: Any) -> dict[str, Any]:
    """Export, then compare with eager: the quantized activations and the output (tolerances in
    the module docstring), in ONNX Runtime with all graph optimizations on (so its fused integer
    kernels run): exported with `target="onnxruntime"` unless given, whose Uint8WeightsPass
    stores int8 weights as uint8 for ORT's exact U8U8 kernels. `level`: another ORT graph
    optimization level (ORT_ENABLE_BASIC: no QDQ fusion, the reference QDQ semantics).

    Returns the program, the ONNX Runtime outputs and the tolerance used."""
    export_kwargs.setdefault("target", "onnxruntime")
    prog = program or onnxport.export(quantized, example, **export_kwargs)
    inputs = [torch.randn_like(t) if t.is_floating_point() else t for t in example]
    gm = prog.exported_program.module()
    recorder = Recorder(gm)
    with torch.no_grad():
        expected = recorder.run(*inputs)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    # 1. every quantized activation, within one step, (almost) all exact
    names = [n.name for n in gm.graph.nodes if _is(n, QUANTIZE_TARGETS)
             and not n.name.startswith("_") and isinstance(recorder.values.get(n.name), torch.Tensor)]
    graph_names = {v.name for node in prog.model.graph for v in node.outputs}
    # values FuseRowsPass carries as rows keep their original name for compute_values
    graph_names |= {v.metadata_props[ROWS_OF].rpartition(":")[0]
                    for node in prog.model.graph for v in node.outputs
                    if ROWS_OF in v.metadata_props}
    names = [n for n in names if n in graph_names]
    if names and level is not None:  # the intermediate values at the same level
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = level
        prog.runtime_options = onnxport.ONNXRuntimeOptions(session_options=options)
    if names:
        got = prog.compute_values(names, inputs)
        for name, value in zip(names, got):
            want = recorder.values[name].to(torch.int32)
            diff = (value.to(torch.int32) - want).abs()
            assert int(diff.max()) <= 1, f"{name}: quantized values differ by {int(diff.max())} steps"
            exact = float((diff == 0).float().mean())
            assert exact >= 0.99, f"{name}: only {exact:.1%} of the quantized values are exact"
    # 2. the output, in ORT with its QDQ fusions
    session = ort_session(prog.model_proto, level=level)
    got_out = run_ort(session, inputs)
    tol = output_tolerance(gm, recorder.values)
    for want, have in zip(expected, got_out):
        err = float(np.abs(want.detach().numpy() - have).max())
        assert err <= tol, f"output differs by {err} > tolerance {tol}"
    return {"program": prog, "outputs": got_out, "tolerance": tol, "checked": names}


def initializer_dtypes(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in model.graph.initializer}


def assert_weights_quantized(model: onnx.ModelProto, *, min_int8: int,
                             allow_float: Sequence[str] = ()) -> None:
    """At least `min_int8` int8/uint8 initializers, and no float initializer of rank >= 2 with
    every dim > 1 (a float weight matrix or kernel left behind, not a [N, 1] scale) except those whose name contains one of
    `allow_float` (embedding tables, which the PT2E quantizers leave in float)."""
    ints = [t for t in model.graph.initializer if t.data_type in (onnx.TensorProto.INT8,
                                                                   onnx.TensorProto.UINT8)]
    assert len(ints) >= min_int8, [t.name for t in model.graph.initializer]
    floats = [t.name for t in model.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2
              and min(t.dims) > 1 and not any(a in t.name for a in allow_float)]
    assert not floats, f"float weights left: {floats}"


_INT_TYPES = (onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.INT8,
              onnx.TensorProto.UINT8)


def integer_weight_readers(model: onnx.ModelProto) -> collections.Counter[str]:
    """The node types reading an integer initializer of rank >= 2 (a quantized weight)."""
    weights = {t.name for t in model.graph.initializer
               if t.data_type in _INT_TYPES and len(t.dims) >= 2}
    return collections.Counter(n.op_type for n in model.graph.node
                               if any(i in weights for i in n.input))


def integer_weight_readers_after_load(model: onnx.ModelProto) -> collections.Counter[str]:
    """`integer_weight_readers` of the model ONNX Runtime runs (after its graph optimizations):
    empty when it folded every weight's dequantization at load."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        ort_session(model, optimized_path=path)
        return integer_weight_readers(onnx.load(path))
