"""Control flow: torch.cond -> ONNX If, while_loop -> ONNX Loop.

Branch and body graph modules are translated through the same op library, by the translator's
`inline` into a nested builder (`g.subgraph`). If branches read their operands from the outer
scope; Loop bodies take (iteration, condition, carried...) as ONNX requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, register

higher_order = torch.ops.higher_order


def _owned(sub: GraphBuilder, value: Any) -> ir.Value:
    """`value` as an output of `sub`'s graph: an Identity when another graph produced it."""
    if not isinstance(value, ir.Value):
        return sub.const(value)
    producer = value.producer()
    if producer is not None and producer.graph is sub.graph:
        return value
    out = sub.op("Identity", value)
    out.dtype, out.shape = value.dtype, value.shape
    return out


def _body(g: GraphBuilder, name: str, graph_module: torch.fx.GraphModule,
          inputs: Sequence[Any]) -> tuple[ir.Graph, int]:
    sub = g.subgraph([], name)
    outputs = g.translator.inline(sub, graph_module, list(inputs))
    sub.graph.outputs.extend(_owned(sub, o) for o in outputs)
    return sub.graph, len(outputs)


@register(higher_order.cond)
def higher_order_cond(g: GraphBuilder, pred: Any, true_fn: torch.fx.GraphModule,
                      false_fn: torch.fx.GraphModule, operands: Sequence[Any]) -> Any:
    """cond(pred, true_fn, false_fn, operands) -> outputs of the branch taken"""
    if not isinstance(pred, ir.Value):
        # torch.export specialised the predicate: only one branch can run.
        return tuple(g.translator.inline(g, true_fn if pred else false_fn, list(operands)))
    then_graph, num_outputs = _body(g, "then_branch", true_fn, operands)
    else_graph, _ = _body(g, "else_branch", false_fn, operands)
    outs = g.op("If", cast(g, pred, ir.DataType.BOOL), then_branch=then_graph,
                else_branch=else_graph, outputs=num_outputs)
    return outs if isinstance(outs, tuple) else (outs,)


@register(higher_order.while_loop)
def higher_order_while_loop(g: GraphBuilder, cond_fn: torch.fx.GraphModule,
                            body_fn: torch.fx.GraphModule, carried_inputs: Sequence[Tensor],
                            additional_inputs: Sequence[Tensor]) -> Any:
    """while_loop(cond_fn, body_fn, carried_inputs, additional_inputs) -> final carried values"""
    carried = list(carried_inputs)
    extra = list(additional_inputs)
    first = g.translator.inline(g, cond_fn, carried + extra)[0]
    sub = g.subgraph([], "loop_body")
    iteration = ir.Value(name=g.unique_name("loop_iteration"), type=ir.TensorType(ir.DataType.INT64),
                         shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("loop_condition"), type=ir.TensorType(ir.DataType.BOOL),
                         shape=ir.Shape([]))
    carried_in = []
    for value in carried:
        if not isinstance(value, ir.Value):
            value = g.const(value)
        carried_in.append(ir.Value(name=g.unique_name(f"{value.name}_in"),
                                   type=ir.TensorType(value.dtype), shape=value.shape))
    sub.graph.inputs.extend([iteration, condition, *carried_in])
    updated = g.translator.inline(sub, body_fn, carried_in + extra)
    again = g.translator.inline(sub, cond_fn, list(updated) + extra)[0]
    sub.graph.outputs.append(_owned(sub, cast(sub, again, ir.DataType.BOOL)))
    sub.graph.outputs.extend(_owned(sub, v) for v in updated)
    outs = g.op("Loop", None, cast(g, first, ir.DataType.BOOL), *carried, body=sub.graph,
                outputs=len(carried))
    return outs if isinstance(outs, tuple) else (outs,)


@register(higher_order.wrap_with_set_grad_enabled)
def higher_order_wrap_with_set_grad_enabled(g: GraphBuilder, enable_grad: bool,
                                            wrapped: torch.fx.GraphModule, *args: Any) -> Any:
    """wrap_with_set_grad_enabled(enable_grad, wrapped, *args): grad mode does not exist in ONNX"""
    return tuple(g.translator.inline(g, wrapped, list(args)))


@register(higher_order.wrap_with_autocast)
def higher_order_wrap_with_autocast(g: GraphBuilder, device_type: str, dtype: Any, enabled: bool,
                                    cache_enabled: Any, wrapped: torch.fx.GraphModule,
                                    *args: Any) -> Any:
    """wrap_with_autocast(device_type, dtype, enabled, cache_enabled, wrapped, *args)"""
    # The wrapped graph's metadata already carries the autocast dtypes; the translator casts.
    return tuple(g.translator.inline(g, wrapped, list(args)))


@register(higher_order.scan)
def higher_order_scan(g: GraphBuilder, combine_fn: torch.fx.GraphModule, init: Sequence[Tensor],
                      xs: Sequence[Tensor], additional_inputs: Sequence[Tensor]) -> Any:
    """scan(combine_fn, init, xs, additional_inputs) -> (final carries..., stacked outputs...)"""
    sub = g.subgraph([], "scan_body")
    state_in = [ir.Value(name=g.unique_name(f"{v.name}_state"), type=ir.TensorType(v.dtype),
                         shape=v.shape) for v in init]
    slices_in = [ir.Value(name=g.unique_name(f"{v.name}_slice"), type=ir.TensorType(v.dtype),
                          shape=ir.Shape(list(v.shape)[1:]) if v.shape is not None else None)
                 for v in xs]
    sub.graph.inputs.extend([*state_in, *slices_in])
    outputs = g.translator.inline(sub, combine_fn, [*state_in, *slices_in, *additional_inputs])
    sub.graph.outputs.extend(_owned(sub, o) for o in outputs)
    outs = g.op("Scan", *init, *xs, body=sub.graph, num_scan_inputs=len(xs), outputs=len(outputs))
    return outs if isinstance(outs, tuple) else (outs,)
