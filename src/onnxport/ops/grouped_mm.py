"""Grouped matrix products: `aten._grouped_mm` and transformers' `grouped_mm_fallback`.

Mixture-of-experts layers sort their (token, expert) pairs by expert and multiply each row
block by its expert's weight: `offs` holds the cumulative end of every group. ONNX has no
grouped product, so the jagged forms become a Loop over the groups, each iteration one MatMul
of the group's slice, collected in a tensor sequence and concatenated: the work and memory
scale with the rows (tokens x top-k), never with experts x rows. The Loop runs over the
non-empty groups only: an expert no token chose costs nothing (not even the copy of its
weight that ONNX Runtime's Gather makes). bfloat16 products are computed in float32 and rounded once. Rows past `offs[-1]` come out as zeros (transformers' fallback writes zeros
there; `torch._grouped_mm` leaves them unwritten).

The four forms of `_grouped_mm` (torch's meta kernel decides the output shapes):

* 2-D x 3-D with offs: input rows grouped, (S, K) x (G, K, N) -> (S, N), the MoE case;
* 3-D x 2-D with offs: columns of mat2 grouped, (G, M, K) x (K, N) -> (M, N);
* 2-D x 2-D with offs: the contraction dim grouped, (M, K) x (K, N) -> (G, M, N);
* 3-D x 3-D, no offs: a batched MatMul.

`transformers::grouped_mm_fallback(input, weight, offs)` is the first form; transformers
defines it as a custom op whose body loops over `offs.tolist()`, which torch.export cannot
trace, so it reaches the translator as one node. It is registered by qualified name: the op
exists only once transformers is imported, and this module never imports it.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL

GROUPED_MM_FALLBACK = "transformers::grouped_mm_fallback.default"


def _work_dtype(dtype: ir.DataType) -> ir.DataType:
    """bfloat16 products run in float32 (ONNX Runtime's CPU MatMul and tensor sequences have
    no bfloat16; torch accumulates them in float32 too), rounded once by the translator."""
    return ir.DataType.FLOAT if dtype == ir.DataType.BFLOAT16 else dtype


def _scalar_input(g: GraphBuilder, name: str, dtype: ir.DataType) -> ir.Value:
    return ir.Value(name=g.unique_name(name), type=ir.TensorType(dtype), shape=ir.Shape([]))


def _group_loop(g: GraphBuilder, offs: Tensor, axis_length: Tensor, block: Any,
                concat_axis: int | None, pad_axis: int | None, dtype: ir.DataType) -> Tensor:
    """Loop over the groups of `offs`; `block(body, start, end, group)` builds one group's
    result in the body. With `concat_axis`, the results (of varying length along that axis)
    are concatenated along it, then zero-padded along `pad_axis` up to `axis_length`; without,
    they have one shape and are stacked (the Loop's scan output)."""
    ends = cast(g, offs, _I64)
    if concat_axis is not None:
        # Only the groups with rows: an empty group adds nothing to the concatenation, and
        # skipping it spares its weight's copy (a decode step uses k of E experts). The start
        # carried from the last group run is still the group's start: the groups skipped
        # between are empty.
        before = g.op("Concat", g.const([0], _I64),
                      g.op("Slice", ends, g.const([0], _I64), g.const([-1], _I64)), axis=0)
        nonempty = g.op("Reshape", g.op("NonZero", g.op("Greater", ends, before)),
                        g.const([-1], _I64))
        trips = g.op("Squeeze", g.op("Shape", nonempty), g.const([0], _I64))
    else:
        trips = g.op("Squeeze", g.op("Shape", ends), g.const([0], _I64))
    body = g.subgraph([], "grouped_mm_group")
    iteration = _scalar_input(g, "group", _I64)
    condition = _scalar_input(g, "group_condition", _BOOL)
    start = _scalar_input(g, "group_start", _I64)
    inputs: list[ir.Value] = [iteration, condition, start]
    if concat_axis is not None:
        results = ir.Value(name=g.unique_name("group_results"),
                           type=ir.SequenceType(ir.TensorType(dtype)))
        inputs.append(results)
    body.graph.inputs.extend(inputs)
    group = body.op("Gather", nonempty, iteration) if concat_axis is not None else iteration
    end = body.op("Gather", ends, group)
    # Slice clamps to the data; a group that ends before it starts is empty.
    end = body.op("Max", end, start)
    result = block(body, body.op("Unsqueeze", start, body.const([0], _I64)),
                   body.op("Unsqueeze", end, body.const([0], _I64)), group)
    outputs = [body.op("Identity", condition), body.op("Identity", end)]
    if concat_axis is not None:
        inserted = body.op("SequenceInsert", results, result)
        inserted.type = results.type
        outputs.append(inserted)
    else:
        outputs.append(result)
    body.graph.outputs.extend(outputs)
    if concat_axis is not None:
        empty = g.op("SequenceEmpty", dtype=dtype)
        empty.type = results.type
        _, collected = g.op("Loop", trips, g.const(True), g.const(0, _I64), empty,
                            body=body.graph, outputs=2)
        collected.type = results.type
        out = g.op("ConcatFromSequence", collected, axis=concat_axis)
        out.dtype = dtype
        assert pad_axis is not None
        length = g.op("Gather", g.op("Shape", out), g.const([pad_axis], _I64))
        missing = g.op("Sub", axis_length, length)
        r = 2
        zeros = g.const([0] * r, _I64)
        after = g.op("ScatterElements", zeros, g.const([pad_axis], _I64), missing)
        out = g.op("Pad", out, g.op("Concat", zeros, after, axis=0), g.const(0, dtype))
    else:
        _, out = g.op("Loop", trips, g.const(True), g.const(0, _I64), body=body.graph,
                      outputs=2)
    out.dtype = dtype
    return out


def _rows_by_group(g: GraphBuilder, x: Tensor, weight: Tensor, offs: Tensor,
                   dtype: ir.DataType) -> Tensor:
    """(S, K) x (G, K, N) -> (S, N): rows [offs[i-1], offs[i]) times weight[i]."""

    def block(body: GraphBuilder, start: Tensor, end: Tensor, group: Tensor) -> Tensor:
        rows = body.op("Slice", x, start, end, body.const([0], _I64))
        return body.op("MatMul", rows, body.op("Gather", weight, group, axis=0))

    total = g.op("Gather", g.op("Shape", x), g.const([0], _I64))
    return _group_loop(g, offs, total, block, concat_axis=0, pad_axis=0, dtype=dtype)


@register(GROUPED_MM_FALLBACK)
def transformers_grouped_mm_fallback(g: GraphBuilder, input: Tensor, weight: Tensor,
                                     offs: Tensor) -> Tensor:
    """grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor"""
    if rank(input) != 2 or rank(weight) != 3 or rank(offs) != 1:
        raise TranslationError("grouped_mm_fallback takes input (S, K), weight (G, K, N) and "
                               "offs (G,)")
    dtype = _work_dtype(g.out_dtype())
    return _rows_by_group(g, cast(g, input, dtype), cast(g, weight, dtype), offs, dtype)


@register(aten._grouped_mm.default)
def aten_grouped_mm(g: GraphBuilder, self: Tensor, mat2: Tensor, offs: Tensor | None = None,
                    bias: Tensor | None = None, out_dtype: Any = None) -> Tensor:
    """_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"""  # noqa: E501
    dtype = _work_dtype(g.out_dtype())
    a, b = cast(g, self, dtype), cast(g, mat2, dtype)
    ranks = rank(self), rank(mat2)
    if bias is not None and ranks != (3, 3):
        raise TranslationError("_grouped_mm with a bias over jagged groups (torch's CPU kernel "
                               "does not take one either)")
    if ranks == (3, 3):
        out = g.op("MatMul", a, b)
        if bias is not None:
            out = g.op("Add", out, g.op("Unsqueeze", cast(g, bias, dtype), g.const([1], _I64)))
        return out
    if offs is None:
        raise TranslationError(f"_grouped_mm of {ranks[0]}-D and {ranks[1]}-D operands needs offs")
    if ranks == (2, 3):
        return _rows_by_group(g, a, b, offs, dtype)
    if ranks == (3, 2):
        # Columns [offs[i-1], offs[i]) of mat2 times self[i]: (M, n_i) blocks side by side.
        def columns(body: GraphBuilder, start: Tensor, end: Tensor, group: Tensor) -> Tensor:
            cols = body.op("Slice", b, start, end, body.const([1], _I64))
            return body.op("MatMul", body.op("Gather", a, group, axis=0), cols)

        total = g.op("Gather", g.op("Shape", b), g.const([1], _I64))
        return _group_loop(g, offs, total, columns, concat_axis=1, pad_axis=1, dtype=dtype)
    if ranks == (2, 2):
        # The contraction dim in groups: one (M, N) product per group, stacked.
        def contraction(body: GraphBuilder, start: Tensor, end: Tensor, group: Tensor) -> Tensor:
            left = body.op("Slice", a, start, end, body.const([1], _I64))
            right = body.op("Slice", b, start, end, body.const([0], _I64))
            return body.op("MatMul", left, right)

        return _group_loop(g, offs, None, contraction, concat_axis=None, pad_axis=None,
                           dtype=dtype)
    raise TranslationError(f"_grouped_mm of {ranks[0]}-D and {ranks[1]}-D operands (2-D or 3-D "
                           "each)")
