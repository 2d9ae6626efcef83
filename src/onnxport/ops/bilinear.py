"""Bilinear and trilinear forms: bilinear (nn.Bilinear) and _trilinear, as one Einsum."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnxport.ops._helpers import cast, rank
from onnxport.ops.linalg import _einsum_dtype
from onnxport.translate import GraphBuilder, Tensor, aten, register


def _letters(count: int, skip: str = "") -> str:
    return "".join(c for c in "abcdefghklmnpqrstuvwxyz" if c not in skip)[:count]


@register(aten.bilinear.default)
def aten_bilinear(g: GraphBuilder, input1: Tensor, input2: Tensor, weight: Tensor,
                  bias: Tensor | None = None) -> Tensor:
    """bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _einsum_dtype(out_dtype)
    batch = _letters(rank(input1) - 1, skip="oij")
    # y[..., o] = sum_ij x1[..., i] * W[o, i, j] * x2[..., j] (+ b[o])
    y = g.op("Einsum", cast(g, input1, work), cast(g, weight, work), cast(g, input2, work),
             equation=f"{batch}i,oij,{batch}j->{batch}o")
    if bias is not None:
        y = g.op("Add", y, cast(g, bias, work))
    return cast(g, y, out_dtype)


@register(aten._trilinear.default)
def aten__trilinear(g: GraphBuilder, i1: Tensor, i2: Tensor, i3: Tensor, expand1: Sequence[int],
                    expand2: Sequence[int], expand3: Sequence[int], sumdim: Sequence[int],
                    unroll_dim: int = 1) -> Tensor:
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor"""
    # Each input is unsqueezed at its expand dims to a common rank; the product of the three
    # is summed over sumdim. unroll_dim only chooses torch's loop order.
    out_dtype = g.out_dtype()
    work = _einsum_dtype(out_dtype)
    r = rank(i1) + len(expand1)
    letters = _letters(r)
    terms = []
    for expand in (expand1, expand2, expand3):
        dropped = {d % r for d in expand}
        terms.append("".join(letters[d] for d in range(r) if d not in dropped))
    summed = {d % r for d in sumdim}
    present = set("".join(terms))
    kept = [d for d in range(r) if d not in summed]
    y = g.op("Einsum", cast(g, i1, work), cast(g, i2, work), cast(g, i3, work),
             equation=f"{','.join(terms)}->{''.join(letters[d] for d in kept if letters[d] in present)}")
    # a kept dim that every input expanded has size 1 in torch's result
    missing = [i for i, d in enumerate(kept) if letters[d] not in present]
    if missing:
        y = g.op("Unsqueeze", y, g.const(missing, ir.DataType.INT64))
    return cast(g, y, out_dtype)
