"""Python numbers an elementwise op converts to another dtype, made explicit as tensors.

`c - 1` on a float tensor is captured as `aten.sub.Tensor(c, 1)`: inside the op the int 1
becomes a float. As torch.onnx does, the exported program gets that conversion as a node of
its own, `aten.scalar_tensor(1, dtype=torch.float32)`, right before the op. Its value is the
constant the ONNX graph uses (the translation names that constant after the node), so
`verify_onnx_program(compare_intermediates=True)` and the localizer compare it too, and the
program run in torch computes with the constant rounded as in ONNX.

The op's translation still receives the number (`SCALAR_KEY`), so the ONNX graph is the same
as without the node. Only literal numbers in Tensor arguments of pointwise ATen ops are made
explicit, and only where their own dtype (bool, int64, float32, as torch.onnx reads Python
numbers) differs from the dtype of the op's tensor operands.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

SCALAR_KEY = "onnxport_scalar"
"""node.meta key of an inserted `scalar_tensor` node: the number it was made from."""

SCALAR_TENSOR = torch.ops.aten.scalar_tensor.default

_NUMBER_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float32}
_COPIED_META = ("stack_trace", "nn_module_stack", "source_fn_stack")
_tensor_slots: dict[Any, tuple[int, ...]] = {}


def _slots(target: Any) -> tuple[int, ...]:
    """Positions of the Tensor arguments of a pointwise ATen op (empty for other targets)."""
    slots = _tensor_slots.get(target)
    if slots is None:
        slots = ()
        if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
            slots = tuple(i for i, a in enumerate(target._schema.arguments)
                          if not a.kwarg_only and isinstance(a.type, torch.TensorType))
        _tensor_slots[target] = slots
    return slots


def make_scalars_explicit(graph_module: torch.fx.GraphModule) -> int:
    """Insert the `scalar_tensor` nodes (module docstring) in place; returns how many."""
    inserted = 0
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        count = _make_explicit(module.graph)
        if count:
            module.recompile()
            inserted += count
    return inserted


def _make_explicit(graph: torch.fx.Graph) -> int:
    inserted = 0
    vals: dict[torch.dtype, torch.Tensor] = {}  # one 0-d fake value per dtype, shared
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        slots = _slots(node.target)
        if not slots:
            continue
        args = node.args
        numbers = [i for i in slots if i < len(args) and type(args[i]) in _NUMBER_DTYPES]
        if not numbers:
            continue
        tensors = [a.meta.get("val") for i in slots if i < len(args)
                   for a in (args[i],) if isinstance(a, torch.fx.Node)]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        if not tensors or any(t.is_complex() for t in tensors):
            continue
        operands = [*tensors, *(args[i] for i in numbers)]
        try:
            _, common = elementwise_dtypes(
                *operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        except (TypeError, ValueError, RuntimeError):
            continue  # dtypes torch's promotion rules do not cover: the number stays an argument
        new_args = list(args)
        for i in numbers:
            number = args[i]
            if _NUMBER_DTYPES[type(number)] == common:
                continue
            with graph.inserting_before(node):
                scalar = graph.call_function(SCALAR_TENSOR, (number,), {"dtype": common})
            for key in _COPIED_META:
                if key in node.meta:
                    scalar.meta[key] = node.meta[key]
            if common not in vals:
                mode = getattr(tensors[0], "fake_mode", None)
                with mode if mode is not None else contextlib.nullcontext():
                    vals[common] = torch.empty((), dtype=common)
            scalar.meta["val"] = vals[common]
            scalar.meta[SCALAR_KEY] = number
            new_args[i] = scalar
            inserted += 1
        node.args = tuple(new_args)
    return inserted

