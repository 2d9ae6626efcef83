"""Translations of nodes that read or write complex tensors, carried as real (..., 2) pairs.

See `onnxport/translate/complex.py` for the representation. Three kinds live here:
* conversions and constructors: view_as_real/view_as_complex, complex, polar, to/_to_copy;
* arithmetic on pairs: conj, neg, add, sub, mul, div, abs, angle, where, sum, mean;
* gather, index_put and index_add, whose indices pick whole pairs;
* layout ops, which run their ordinary translation with the arguments moved past the pair
  axis: dims made non-negative (so -1 never names the pair axis), sizes and permutations
  extended by the pair axis, pads given none on it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list
from onnxport.ops.elementwise import aten_atan2
from onnxport.translate import GraphBuilder, Tensor, aten, register
from onnxport.translate.binding import bind
from onnxport.translate.complex import complex_rank, is_complex, mark_complex, register_complex

# -- building blocks ---------------------------------------------------------------------


def real_dtype_of(g: GraphBuilder, index: int = 0) -> ir.DataType:
    """The dtype of the real pairs of output `index` (complex64 -> FLOAT)."""
    return g.out_dtype(index)


def to_pairs(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Tensor:
    """`x` (a complex or real value, or a Python number) as complex pairs of `dtype`."""
    if isinstance(x, ir.Value):
        if is_complex(x):
            return cast(g, x, dtype)
        # A real tensor is the real part; its imaginary part is zero.
        real = g.op("Unsqueeze", cast(g, x, dtype), g.const([-1], ir.DataType.INT64))
        return mark_complex(g.op("Pad", real, g.const([0, 1], ir.DataType.INT64), None,
                                 g.const([-1], ir.DataType.INT64)))
    number = complex(x)
    return g.const([number.real, number.imag], dtype)


def real_part(g: GraphBuilder, x: Tensor) -> Tensor:
    """The real part of complex pairs."""
    return g.op("Gather", x, g.const(0, ir.DataType.INT64), axis=-1)


def imag_part(g: GraphBuilder, x: Tensor) -> Tensor:
    """The imaginary part of complex pairs."""
    return g.op("Gather", x, g.const(1, ir.DataType.INT64), axis=-1)


def make_pairs(g: GraphBuilder, real: Tensor, imag: Tensor, *, broadcast: bool = False) -> Tensor:
    """Complex pairs from real and imaginary parts of one shape (or any, with `broadcast`)."""
    if broadcast and (real.shape is None or imag.shape is None or real.shape != imag.shape):
        shape = g.op("Shape", g.op("Add", real, imag))
        real, imag = g.op("Expand", real, shape), g.op("Expand", imag, shape)
    axis = g.const([-1], ir.DataType.INT64)
    return mark_complex(g.op("Concat", g.op("Unsqueeze", real, axis),
                             g.op("Unsqueeze", imag, axis), axis=-1))


def conjugate(g: GraphBuilder, x: Tensor) -> Tensor:
    """The complex conjugate of pairs: the imaginary part negated."""
    return mark_complex(g.op("Mul", x, g.const([1, -1], x.dtype)))


def _as_real_operand(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Any:
    """A real operand broadcast against pairs: a trailing axis of 1 for a tensor."""
    if isinstance(x, ir.Value):
        return g.op("Unsqueeze", cast(g, x, dtype), g.const([-1], ir.DataType.INT64))
    return g.const(float(x.real if isinstance(x, complex) else x), dtype)


def _is_real(x: Any) -> bool:
    if isinstance(x, ir.Value):
        return not is_complex(x)
    return not isinstance(x, complex) or x.imag == 0


def _complex_mul(g: GraphBuilder, a: Tensor, b: Tensor) -> Tensor:
    # (ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br)
    ar, ai, br, bi = real_part(g, a), imag_part(g, a), real_part(g, b), imag_part(g, b)
    real = g.op("Sub", g.op("Mul", ar, br), g.op("Mul", ai, bi))
    imag = g.op("Add", g.op("Mul", ar, bi), g.op("Mul", ai, br))
    return make_pairs(g, real, imag)


# -- conversions and constructors -------------------------------------------------------


@register(aten.view_as_real.default)
@register_complex(aten.view_as_real.default)
def aten_view_as_real(g: GraphBuilder, self: Tensor) -> Tensor:
    """view_as_real(Tensor(a) self) -> Tensor(a)"""
    # The pairs are the value itself; a new value keeps the complex mark off the result.
    return g.op("Identity", self)


@register(aten.view_as_complex.default)
@register_complex(aten.view_as_complex.default)
def aten_view_as_complex(g: GraphBuilder, self: Tensor) -> Tensor:
    """view_as_complex(Tensor(a) self) -> Tensor(a)"""
    return mark_complex(g.op("Identity", self))


@register(aten.complex.default)
@register_complex(aten.complex.default)
def aten_complex(g: GraphBuilder, real: Tensor, imag: Tensor) -> Tensor:
    """complex(Tensor real, Tensor imag) -> Tensor"""
    dtype = real_dtype_of(g)
    return make_pairs(g, cast(g, real, dtype), cast(g, imag, dtype), broadcast=True)


@register(aten.polar.default)
@register_complex(aten.polar.default)
def aten_polar(g: GraphBuilder, abs: Tensor, angle: Tensor) -> Tensor:
    """polar(Tensor abs, Tensor angle) -> Tensor"""
    dtype = real_dtype_of(g)
    magnitude, phase = cast(g, abs, dtype), cast(g, angle, dtype)
    return make_pairs(g, g.op("Mul", magnitude, g.op("Cos", phase)),
                      g.op("Mul", magnitude, g.op("Sin", phase)))


@register_complex(aten.real.default)
def aten_real(g: GraphBuilder, self: Tensor) -> Tensor:
    """real(Tensor(a) self) -> Tensor(a)"""
    return real_part(g, self)


@register_complex(aten.imag.default)
def aten_imag(g: GraphBuilder, self: Tensor) -> Tensor:
    """imag(Tensor(a) self) -> Tensor(a)"""
    return imag_part(g, self)


def _convert(g: GraphBuilder, self: Tensor) -> Tensor:
    """`self` converted to the node's output dtype, complex or real."""
    dtype = g.out_dtype()
    if g.out_vals[0].dtype.is_complex:
        return to_pairs(g, self, dtype)
    # complex -> real keeps the real part and drops the imaginary one, as ATen does.
    return cast(g, real_part(g, self) if is_complex(self) else self, dtype)


def _conversion(target: Any) -> Callable[..., Tensor]:
    def translate(g: GraphBuilder, self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return _convert(g, self)

    translate.__name__ = f"aten_{target._schema.name.split('::')[-1]}_complex"
    translate.__doc__ = str(target._schema).removeprefix("aten::")
    return translate


for _target in (aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device,
                aten.to.other, aten.type_as.default):
    register_complex(_target)(_conversion(_target))


@register_complex(aten.copy.default)
def aten_copy(g: GraphBuilder, self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor"""
    out = _convert(g, src)
    return g.op("Expand", out, g.op("Shape", self))


# -- arithmetic -------------------------------------------------------------------------


@register(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default,
          aten.resolve_conj.default)
@register_complex(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default,
                  aten.resolve_conj.default)
def aten__conj(g: GraphBuilder, self: Tensor) -> Tensor:
    """_conj(Tensor(a) self) -> Tensor(a)"""
    # The conjugate of a real tensor is the tensor itself.
    return conjugate(g, self) if is_complex(self) else self


@register_complex(aten.resolve_neg.default)
def aten_resolve_neg(g: GraphBuilder, self: Tensor) -> Tensor:
    """resolve_neg(Tensor(a) self) -> Tensor(a)"""
    return self


@register_complex(aten.neg.default)
def aten_neg(g: GraphBuilder, self: Tensor) -> Tensor:
    """neg(Tensor self) -> Tensor"""
    return g.op("Neg", self)


def _add_sub(op_type: str) -> Callable[..., Tensor]:
    def translate(g: GraphBuilder, self: Any, other: Any, alpha: Any = 1) -> Tensor:
        dtype = real_dtype_of(g)
        a = to_pairs(g, self, dtype)
        b = to_pairs(g, other, dtype)
        if alpha != 1:
            b = _mul(g, b, alpha, dtype)
        return g.op(op_type, a, b)

    return translate


def _add_tensor(op_type: str) -> Callable[..., Tensor]:
    inner = _add_sub(op_type)

    def translate(g: GraphBuilder, self: Any, other: Any, *, alpha: Any = 1) -> Tensor:
        return inner(g, self, other, alpha)

    return translate


register_complex(aten.add.Tensor)(_add_tensor("Add"))
register_complex(aten.sub.Tensor)(_add_tensor("Sub"))
register_complex(aten.add.Scalar)(_add_sub("Add"))
register_complex(aten.sub.Scalar)(_add_sub("Sub"))


def _mul(g: GraphBuilder, a: Any, b: Any, dtype: ir.DataType) -> Tensor:
    if _is_real(b):
        return mark_complex(g.op("Mul", to_pairs(g, a, dtype), _as_real_operand(g, b, dtype)))
    if _is_real(a):
        return mark_complex(g.op("Mul", _as_real_operand(g, a, dtype), to_pairs(g, b, dtype)))
    return _complex_mul(g, to_pairs(g, a, dtype), to_pairs(g, b, dtype))


@register_complex(aten.mul.Tensor, aten.mul.Scalar)
def aten_mul(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _mul(g, self, other, real_dtype_of(g))


@register_complex(aten.div.Tensor, aten.div.Scalar)
def aten_div(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """div.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = real_dtype_of(g)
    if _is_real(other):
        return mark_complex(g.op("Div", to_pairs(g, self, dtype), _as_real_operand(g, other, dtype)))
    # a / b = a conj(b) / |b|^2
    b = to_pairs(g, other, dtype)
    numerator = _mul(g, self, conjugate(g, b), dtype)
    norm = g.op("ReduceSumSquare", b, g.const([-1], ir.DataType.INT64), keepdims=1)
    return mark_complex(g.op("Div", numerator, norm))


@register_complex(aten.abs.default)
def aten_abs(g: GraphBuilder, self: Tensor) -> Tensor:
    """abs(Tensor self) -> Tensor"""
    return g.op("ReduceL2", self, g.const([-1], ir.DataType.INT64), keepdims=0)


@register_complex(aten.angle.default)
def aten_angle(g: GraphBuilder, self: Tensor) -> Tensor:
    """angle(Tensor self) -> Tensor"""
    return aten_atan2(g, imag_part(g, self), real_part(g, self))


@register_complex(aten.where.self)
def aten_where(g: GraphBuilder, condition: Tensor, self: Any, other: Any) -> Tensor:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    dtype = real_dtype_of(g)
    cond = g.op("Unsqueeze", condition, g.const([-1], ir.DataType.INT64))
    return mark_complex(g.op("Where", cond, to_pairs(g, self, dtype), to_pairs(g, other, dtype)))


@register_complex(aten.exp.default)
def aten_exp(g: GraphBuilder, self: Tensor) -> Tensor:
    """exp(Tensor self) -> Tensor"""
    # exp(a + ib) = e^a (cos b + i sin b)
    magnitude, phase = g.op("Exp", real_part(g, self)), imag_part(g, self)
    return make_pairs(g, g.op("Mul", magnitude, g.op("Cos", phase)),
                      g.op("Mul", magnitude, g.op("Sin", phase)))


@register_complex(aten.pow.Tensor_Scalar)
def aten_pow(g: GraphBuilder, self: Tensor, exponent: Any) -> Tensor:
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor"""
    dtype = real_dtype_of(g)
    z = to_pairs(g, self, dtype)
    if isinstance(exponent, int) and 1 <= exponent <= 4:
        # Small integer powers by repeated products, as exact as torch's.
        out = z
        for _ in range(exponent - 1):
            out = _complex_mul(g, out, z)
        return out
    if isinstance(exponent, complex) and exponent.imag != 0:
        raise TranslationError(f"complex tensor to the complex power {exponent}")
    # z^p = |z|^p (cos p theta + i sin p theta)
    p = float(exponent.real if isinstance(exponent, complex) else exponent)
    magnitude = g.op("Pow", aten_abs(g, z), g.const(p, dtype))
    phase = g.op("Mul", aten_atan2(g, imag_part(g, z), real_part(g, z)), g.const(p, dtype))
    return make_pairs(g, g.op("Mul", magnitude, g.op("Cos", phase)),
                      g.op("Mul", magnitude, g.op("Sin", phase)))


@register_complex(aten.reciprocal.default)
def aten_reciprocal(g: GraphBuilder, self: Tensor) -> Tensor:
    """reciprocal(Tensor self) -> Tensor"""
    norm = g.op("ReduceSumSquare", self, g.const([-1], ir.DataType.INT64), keepdims=1)
    return mark_complex(g.op("Div", conjugate(g, self), norm))


def _parts(g: GraphBuilder, x: Tensor, dtype: ir.DataType) -> tuple[Tensor, Tensor | None]:
    """Real and imaginary parts of `x` as `dtype`; None for the imaginary part of a real x."""
    if is_complex(x):
        x = cast(g, x, dtype)
        return real_part(g, x), imag_part(g, x)
    return cast(g, x, dtype), None


@register_complex(aten.matmul.default, aten.mm.default, aten.bmm.default)
def aten_matmul(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """matmul(Tensor self, Tensor other) -> Tensor"""
    dtype = real_dtype_of(g)
    a, b = _parts(g, self, dtype)
    c, d = _parts(g, other, dtype)
    # (a + ib)(c + id) = (ac - bd) + i(ad + bc), with b or d zero for a real operand
    real = g.op("MatMul", a, c)
    if b is not None and d is not None:
        real = g.op("Sub", real, g.op("MatMul", b, d))
    imag_terms = [g.op("MatMul", a, d)] if d is not None else []
    if b is not None:
        imag_terms.append(g.op("MatMul", b, c))
    imag = imag_terms[0] if len(imag_terms) == 1 else g.op("Add", *imag_terms)
    return make_pairs(g, real, imag)


def _filled(g: GraphBuilder, shape: Tensor, fill: Any) -> Tensor:
    """Complex pairs of `fill` expanded to `shape` (which includes the pair axis)."""
    return mark_complex(g.op("Expand", to_pairs(g, fill, real_dtype_of(g)), shape))


def _full(fill: Any) -> Callable[..., Tensor]:
    def translate(g: GraphBuilder, size: Any, *args: Any, **kwargs: Any) -> Tensor:
        value = args[0] if args and fill is None else fill
        return _filled(g, int_list(g, [*size, 2]), value)
    return translate


register_complex(aten.full.default)(_full(None))
register_complex(aten.zeros.default, aten.empty.memory_format)(_full(0))


@register_complex(aten.new_zeros.default, aten.new_empty.default)
def aten_new_zeros(g: GraphBuilder, self: Tensor, size: Any, **kwargs: Any) -> Tensor:
    """new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, [*size, 2]), 0)


def _full_like(fill: Any) -> Callable[..., Tensor]:
    def translate(g: GraphBuilder, self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        value = args[0] if args and fill is None else fill
        shape = g.op("Shape", self)
        if not is_complex(self):
            shape = g.op("Concat", shape, g.const([2], ir.DataType.INT64), axis=0)
        return _filled(g, shape, value)
    return translate


register_complex(aten.full_like.default)(_full_like(None))
register_complex(aten.zeros_like.default, aten.empty_like.default)(_full_like(0))
register_complex(aten.ones_like.default)(_full_like(1))


@register_complex(aten.sum.default)
def aten_sum(g: GraphBuilder, self: Tensor, *, dtype: torch.dtype | None = None) -> Tensor:
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    axes = list(range(complex_rank(self)))
    if not axes:
        return cast(g, self, real_dtype_of(g))
    out = g.op("ReduceSum", self, g.const(axes, ir.DataType.INT64), keepdims=0)
    return cast(g, out, real_dtype_of(g))


# -- layout ops: the ordinary translation, with arguments moved past the pair axis -------


def _delegate(g: GraphBuilder, target: Any, values: dict[str, Any]) -> Any:
    """Run `target`'s ordinary translation on schema arguments given by name."""
    translation = g.translator.registry.lookup(target, g.opset)
    if translation is None:
        raise TranslationError(f"no translation of {target} to run on complex pairs")
    if not isinstance(target, torch._ops.OpOverload):
        return translation.function(g, *values["args"])
    ordered = tuple(values[a.name] for a in target._schema.arguments)
    args, kwargs = bind(target, ordered, {}, lambda v: v, translation.function)
    # The ordinary translation may read the output's example value (shapes for Reshape):
    # it sees the pairs' real tensor, not the complex one.
    saved = g.out_vals
    g.out_vals = tuple(_as_pairs_val(v) for v in saved)
    try:
        return translation.function(g, *args, **kwargs)
    finally:
        g.out_vals = saved


def _as_pairs_val(val: Any) -> Any:
    if isinstance(val, torch.Tensor) and val.dtype.is_complex:
        return torch.view_as_real(val)
    return val


def _adapted(target: Any, rewrite: Callable[[dict[str, Any]], None] | None = None
             ) -> Callable[..., Any]:
    if not isinstance(target, torch._ops.OpOverload):
        def plain(g: GraphBuilder, *args: Any) -> Any:
            return _delegate(g, target, {"args": args})

        return plain
    positional = [a.name for a in target._schema.arguments if not a.kwarg_only]

    def translate(g: GraphBuilder, *args: Any, **kwargs: Any) -> Any:
        values = dict(zip(positional, args))
        values.update(kwargs)
        if rewrite is not None:
            rewrite(values)
        return _delegate(g, target, values)

    translate.__name__ = f"aten_{target._schema.name.split('::')[-1]}_complex"
    translate.__doc__ = str(target._schema).removeprefix("aten::")
    return translate


def _pair_rank(values: dict[str, Any]) -> int:
    first = values.get("self", values.get("tensors"))
    if isinstance(first, (list, tuple)):
        first = next((t for t in first if is_complex(t)), first[0])
    if not isinstance(first, ir.Value) or not is_complex(first):
        raise TranslationError("a layout op mixing complex and real tensors")
    return complex_rank(first)


def _dims(*names: str, extra: int = 0) -> Callable[[dict[str, Any]], None]:
    """Make the named dim arguments non-negative within the complex rank (+ `extra`)."""

    def rewrite(values: dict[str, Any]) -> None:
        r = max(_pair_rank(values) + extra, 1)
        for name in names:
            dim = values.get(name)
            if isinstance(dim, int):
                values[name] = dim % r
            elif isinstance(dim, (list, tuple)):
                values[name] = [d % r for d in dim]
    return rewrite


def _reduce_dims(values: dict[str, Any]) -> None:
    r = _pair_rank(values)
    dim = values.get("dim")
    values["dim"] = list(range(r)) if not dim else [d % max(r, 1) for d in dim]


def _sizes(name: str, tail: int) -> Callable[[dict[str, Any]], None]:
    def rewrite(values: dict[str, Any]) -> None:
        values[name] = [*values[name], tail]
    return rewrite


def _permute(values: dict[str, Any]) -> None:
    r = _pair_rank(values)
    values["dims"] = [d % max(r, 1) for d in values["dims"]] + [r]


def _roll(values: dict[str, Any]) -> None:
    if not values["dims"]:
        raise TranslationError("roll without dims on a complex tensor (it flattens the pairs)")
    _dims("dims")(values)


def _pad(values: dict[str, Any]) -> None:
    value = values.get("value")
    if value not in (None, 0):
        raise TranslationError(f"padding a complex tensor with {value!r} (only zero is supported)")
    # Pads run from the last dim backwards: the pair axis gets none.
    values["pad"] = [0, 0, *values["pad"]]


def _joined(extra: int) -> Callable[[dict[str, Any]], None]:
    """cat (extra 0) and stack (extra 1): every tensor complex, the dim past the pair axis."""
    normalize = _dims("dim", extra=extra)

    def rewrite(values: dict[str, Any]) -> None:
        if not all(is_complex(t) for t in values["tensors"]):
            raise TranslationError("joining complex with real tensors")
        normalize(values)
    return rewrite


def _as_strided(values: dict[str, Any]) -> None:
    # Pairs are the memory layout of complex numbers: the same view of the real storage has
    # strides and offset doubled and a unit-stride pair axis.
    stride, offset = values["stride"], values.get("storage_offset") or 0
    if any(isinstance(v, ir.Value) for v in (*stride, offset)):
        raise TranslationError("as_strided of a complex tensor with symbolic strides")
    values["size"] = [*values["size"], 2]
    values["stride"] = [2 * int(st) for st in stride] + [1]
    values["storage_offset"] = 2 * int(offset)


_LAYOUT: dict[Any, Callable[[dict[str, Any]], None] | None] = {
    aten.clone.default: None,
    aten.alias.default: None,
    aten.detach.default: None,
    aten.contiguous.default: None,
    aten.lift_fresh_copy.default: None,
    aten.lift_fresh.default: None,
    aten.positive.default: None,
    aten._assert_tensor_metadata.default: None,
    aten.squeeze.default: None,
    aten.index.Tensor: None,
    operator.getitem: None,
    aten.slice.Tensor: _dims("dim"),
    aten.select.int: _dims("dim"),
    aten.narrow.default: _dims("dim"),
    aten.index_select.default: _dims("dim"),
    aten.transpose.int: _dims("dim0", "dim1"),
    aten.squeeze.dim: _dims("dim"),
    aten.squeeze.dims: _dims("dim"),
    aten.unsqueeze.default: _dims("dim", extra=1),
    aten.flip.default: _dims("dims"),
    aten.roll.default: _roll,
    aten.split.Tensor: _dims("dim"),
    aten.split_with_sizes.default: _dims("dim"),
    aten.unbind.int: _dims("dim"),
    aten.flatten.using_ints: _dims("start_dim", "end_dim"),
    aten.unflatten.int: _dims("dim"),
    aten.cumsum.default: _dims("dim"),
    aten.sum.dim_IntList: _reduce_dims,
    aten.mean.dim: _reduce_dims,
    aten.view.default: _sizes("size", 2),
    aten.reshape.default: _sizes("shape", 2),
    aten._unsafe_view.default: _sizes("size", 2),
    aten.expand.default: _sizes("size", 2),
    aten.repeat.default: _sizes("repeats", 1),
    aten.permute.default: _permute,
    aten.as_strided.default: _as_strided,
    aten.constant_pad_nd.default: _pad,
    aten.pad.default: _pad,
    aten.cat.default: _joined(0),
    aten.stack.default: _joined(1),
}

for _target, _rewrite in _LAYOUT.items():
    register_complex(_target)(_adapted(_target, _rewrite))


@register_complex(aten.gather.default)
def aten_gather(g: GraphBuilder, self: Tensor, dim: int, index: Tensor,
                sparse_grad: bool = False) -> Tensor:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    # Both parts of a pair come from the same element: the index repeated along the pair axis.
    dim %= max(complex_rank(self), 1)
    pair_index = g.op("Unsqueeze", index, g.const([-1], ir.DataType.INT64))
    pair_index = g.op("Concat", pair_index, pair_index, axis=-1)
    return mark_complex(g.op("GatherElements", self, pair_index, axis=dim))


@register_complex(aten.index_put.default)
def aten_index_put(g: GraphBuilder, self: Tensor, indices: Any, values: Any,
                   accumulate: bool = False) -> Tensor:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    # The index tensors pick leading dims; the pairs ride along as one more trailing dim.
    pairs = to_pairs(g, values, real_dtype_of(g))
    return _delegate(g, aten.index_put.default, {"self": self, "indices": indices,
                                                 "values": pairs, "accumulate": accumulate})


@register_complex(aten.index_add.default)
def aten_index_add(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, source: Any, *,
                   alpha: Any = 1) -> Tensor:
    """index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"""
    if not _is_real(alpha):
        raise TranslationError(f"index_add of a complex tensor with complex alpha={alpha}")
    pairs = to_pairs(g, source, real_dtype_of(g))
    return _delegate(g, aten.index_add.default, {
        "self": self, "dim": dim % max(complex_rank(self), 1), "index": index, "source": pairs,
        "alpha": alpha.real if isinstance(alpha, complex) else alpha})


@register_complex(aten.t.default)
def aten_t(g: GraphBuilder, self: Tensor) -> Tensor:
    """t(Tensor(a) self) -> Tensor(a)"""
    if complex_rank(self) < 2:
        return self
    return g.op("Transpose", self, perm=[1, 0, 2])


