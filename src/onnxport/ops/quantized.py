"""Quantization: PT2E's `quantized_decomposed.*` ops and torchao's affine ops as ONNX Q/DQ.

* `quantize_per_tensor` / `quantize_per_channel` -> QuantizeLinear (axis for per channel);
  `dequantize_*` -> DequantizeLinear. The zero point is a constant of the quantized dtype and
  the scale a float32 constant, as ONNX Runtime's QDQ fusions (QLinearConv, QLinearMatMul,
  MatMulInteger) require; nothing is decomposed into Mul/Round/Add.
* A quantize of a constant (a float weight with `fold_quantize=False`, a fake-quantized
  weight) is computed here, by the eager kernel itself, and becomes an integer initializer
  `<weight>_quantized`: the model stores int8 weights, never the float ones.
* `quant_min`/`quant_max` narrower than the dtype's range clamp the quantized values (a Clip
  on the integers, which ONNX Runtime runs in int8/uint8); the full range adds nothing.
* Dynamic quantization: `choose_qparams.tensor` for an 8-bit affine range (uint8 0..255 or
  int8 -128..127) becomes one DynamicQuantizeLinear. The quantize and dequantize that use
  its scale and zero point reuse its outputs, so the graph holds the
  DynamicQuantizeLinear -> DequantizeLinear -> MatMul pattern ONNX Runtime turns into
  MatMulInteger. The int8 range is the uint8 one shifted by 128 (same scale, zero point and
  values minus 128), so its dequantized values are the uint8 ones exactly. Other ranges and
  the symmetric scheme compute the parameters with Reduce ops, as `determine_qparams` does.
* torchao QAT: `torchao.choose_qparams_affine` of a constant weight runs eagerly here; of a
  computed float32 tensor (per-token activations) it is torchao's formula op for op, so the
  scales and zero points are eager's bit for bit. The fake quantization that follows is plain
  arithmetic, which FuseFakeQuantPass (passes/fuse_fake_quant.py) rewrites as Q/DQ.

Semantics (torch.ao.quantization.fx._decomposed): quantize is
`clamp(round(x * (1 / scale)) + zero_point, quant_min, quant_max)`, ONNX's is
`saturate(round(x / scale) + zero_point)`: both round half to even, and `x * (1/scale)` and
`x / scale` can differ in the last float32 bit, so a value at a rounding tie may land one
quantization step away. Dequantize is `(q - zero_point) * scale` in float32 in both, exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.translate import GraphBuilder, Tensor, register
from onnxport.translate.folding import constant_data

_F32 = ir.DataType.FLOAT
_I64 = ir.DataType.INT64

# Quantized dtypes ONNX's QuantizeLinear/DequantizeLinear take, and the opset that added them.
_Q_DTYPES: dict[torch.dtype, tuple[ir.DataType, int]] = {
    torch.int8: (ir.DataType.INT8, 13),
    torch.uint8: (ir.DataType.UINT8, 13),
    torch.int16: (ir.DataType.INT16, 21),
    torch.uint16: (ir.DataType.UINT16, 21),
}

# Marks a scale/zero point/quantized value that comes from a DynamicQuantizeLinear node:
# value.meta[_DYNAMIC] = (input, uint8 values, scale, uint8 zero point, shift).
_DYNAMIC = "onnxport.dynamic_quant"

QD = "quantized_decomposed::"


# -- helpers ---------------------------------------------------------------------------------
def _qdtype(g: GraphBuilder, dtype: torch.dtype) -> ir.DataType:
    entry = _Q_DTYPES.get(dtype)
    if entry is None:
        raise TranslationError(f"quantized dtype {dtype} has no ONNX QuantizeLinear form "
                               f"(int8, uint8, int16, uint16)")
    if g.opset < entry[1]:
        raise TranslationError(f"quantized dtype {dtype} needs opset {entry[1]} "
                               f"(QuantizeLinear/DequantizeLinear), got opset {g.opset}")
    return entry[0]


def _dtype_range(dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


def _constant(value: Any) -> np.ndarray | None:
    """The data of a constant value (Python number, Constant node, initializer with data)."""
    if isinstance(value, (int, float, bool)):
        return np.asarray(value)
    return constant_data(value) if isinstance(value, ir.Value) else None


def _param(g: GraphBuilder, value: Any, dtype: ir.DataType, *, per_tensor: bool) -> Tensor:
    """A scale or zero point as `dtype`: a constant when known (so ONNX Runtime's QDQ fusions
    see an initializer), else a Cast (and, per tensor, a reshape to a scalar)."""
    data = _constant(value)
    if data is not None:
        if per_tensor:
            if data.size != 1:
                raise TranslationError(f"per-tensor quantization parameter has {data.size} "
                                       f"elements, expected 1")
            data = data.reshape(())
        if dtype.is_integer():
            data = np.rint(data)
        return g.const(data.astype(dtype.numpy()), dtype)
    assert isinstance(value, ir.Value)
    out = value if value.dtype == dtype else g.op("Cast", value, to=dtype)
    if per_tensor and (value.shape is None or len(value.shape) != 0):
        out = g.op("Reshape", out, g.const(np.zeros((0,), np.int64)))
    return out


def _float_input(g: GraphBuilder, x: Tensor) -> Tensor:
    """The eager kernels quantize float32 (float16/bfloat16 inputs are converted first)."""
    return x if x.dtype == _F32 else g.op("Cast", x, to=_F32)


def _clamp(g: GraphBuilder, q: Tensor, quant_min: Any, quant_max: Any, dtype: torch.dtype,
           qtype: ir.DataType) -> Tensor:
    """Clip the quantized values to [quant_min, quant_max] when that is narrower than the
    dtype's range (QuantizeLinear saturates to the full range only)."""
    lo, hi = _dtype_range(dtype)
    qmin, qmax = _constant(quant_min), _constant(quant_max)
    if qmin is not None and qmax is not None:
        qmin_i, qmax_i = int(qmin.reshape(())), int(qmax.reshape(()))
        if qmin_i <= lo and qmax_i >= hi:
            return q
        bounds = [g.const(np.asarray(max(qmin_i, lo)).astype(qtype.numpy()), qtype),
                  g.const(np.asarray(min(qmax_i, hi)).astype(qtype.numpy()), qtype)]
    else:
        bounds = [_param(g, quant_min, qtype, per_tensor=True),
                  _param(g, quant_max, qtype, per_tensor=True)]
    return g.op("Clip", q, *bounds)


def _root(g: GraphBuilder) -> GraphBuilder:
    while g.parent is not None:
        g = g.parent
    return g


def _quantized_initializer(g: GraphBuilder, x: Tensor, quantized: torch.Tensor) -> Tensor:
    """An integer initializer holding `x` quantized at export time."""
    root = _root(g)
    name = root.unique_name(f"{x.name or 'weight'}_quantized")
    array = quantized.detach().cpu().numpy()
    tensor = ir.tensor(array, name=name)
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                     const_value=tensor)
    root.graph.initializers[name] = value
    return value


def _fold_quantize(g: GraphBuilder, x: Tensor, compute: Any) -> Tensor | None:
    """Quantize a constant now with the eager kernel (`compute(tensor)`), else None."""
    if not isinstance(x, ir.Value) or x.is_graph_input() or x.const_value is None:
        return None
    data = _constant(x)
    if data is None:
        return None
    return _quantized_initializer(g, x, compute(torch.from_numpy(np.array(data))))


def _dequantize(g: GraphBuilder, q: Tensor, scale: Tensor, zero_point: Tensor | None,
                out_dtype: torch.dtype | None, axis: int | None = None) -> Tensor:
    attrs = {} if axis is None else {"axis": axis}
    y = g.op("DequantizeLinear", q, scale, zero_point, **attrs)
    y.dtype = _F32
    if out_dtype is not None and out_dtype != torch.float32:
        y = g.op("Cast", y, to=_dtypes.to_ir(out_dtype))
    return y


def _through_casts(value: Any) -> Any:
    """The value before any Cast/Reshape/Identity the translator or a translation inserted."""
    while isinstance(value, ir.Value) and _DYNAMIC not in value.meta:
        node = value.producer()
        if node is None or node.domain or node.op_type not in ("Cast", "Reshape", "Identity"):
            break
        value = node.inputs[0]
    return value


def _dynamic_source(x: Tensor, scale: Any, zero_point: Any) -> tuple[Any, ...] | None:
    """The DynamicQuantizeLinear record when `scale` and `zero_point` are its outputs for `x`."""
    s, z = _through_casts(scale), _through_casts(zero_point)
    if not isinstance(s, ir.Value) or not isinstance(z, ir.Value):
        return None
    rec_s, rec_z = s.meta.get(_DYNAMIC), z.meta.get(_DYNAMIC)
    if rec_s is None or rec_s is not rec_z:
        return None
    if x is not None and _through_casts(x) is not _through_casts(rec_s[0]):
        return None
    return rec_s


# -- quantize --------------------------------------------------------------------------------
def _quantize(g: GraphBuilder, x: Tensor, scale: Any, zero_point: Any, quant_min: Any,
              quant_max: Any, dtype: torch.dtype, axis: int | None, eager: Any) -> Tensor:
    qtype = _qdtype(g, dtype)
    folded = _fold_quantize(g, x, eager) if _constant(scale) is not None \
        and _constant(zero_point) is not None and _constant(quant_min) is not None \
        and _constant(quant_max) is not None else None
    if folded is not None:
        return folded
    per_tensor = axis is None
    s = _param(g, scale, _F32, per_tensor=per_tensor)
    z = _param(g, zero_point, qtype, per_tensor=per_tensor)
    attrs = {} if axis is None else {"axis": axis}
    q = g.op("QuantizeLinear", _float_input(g, x), s, z, **attrs)
    q.dtype = qtype
    return _clamp(g, q, quant_min, quant_max, dtype, qtype)


@register(f"{QD}quantize_per_tensor.default")
def quantize_per_tensor(g: GraphBuilder, input: Tensor, scale: float, zero_point: int,
                        quant_min: int, quant_max: int, dtype: torch.dtype) -> Tensor:
    """quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor"""
    return _quantize(g, input, scale, zero_point, quant_min, quant_max, dtype, None,
                     lambda t: torch.ops.quantized_decomposed.quantize_per_tensor(
                         t, scale, zero_point, quant_min, quant_max, dtype))


@register(f"{QD}quantize_per_tensor.tensor", f"{QD}quantize_per_tensor.tensor2")
def quantize_per_tensor_tensor(g: GraphBuilder, input: Tensor, scale: Tensor, zero_point: Tensor,
                               quant_min: Any, quant_max: Any, dtype: torch.dtype) -> Tensor:
    """quantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor"""
    record = _dynamic_source(input, scale, zero_point)
    if record is not None:
        _, q_u8, _, _, shift = record
        qtype = _qdtype(g, dtype)
        return _shift(g, q_u8, shift, qtype)

    def eager(t: torch.Tensor) -> torch.Tensor:
        s, z = (torch.from_numpy(np.array(_constant(v))) for v in (scale, zero_point))
        lo, hi = (int(_constant(v).reshape(())) for v in (quant_min, quant_max))  # type: ignore[union-attr]
        return torch.ops.quantized_decomposed.quantize_per_tensor(
            t, float(s.reshape(())), int(z.reshape(())), lo, hi, dtype)

    return _quantize(g, input, scale, zero_point, quant_min, quant_max, dtype, None, eager)


@register(f"{QD}quantize_per_channel.default")
def quantize_per_channel(g: GraphBuilder, input: Tensor, scales: Tensor, zero_points: Tensor,
                         axis: int, quant_min: int, quant_max: int, dtype: torch.dtype) -> Tensor:
    """quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype) -> Tensor"""

    def eager(t: torch.Tensor) -> torch.Tensor:
        s, z = (torch.from_numpy(np.array(_constant(v))) for v in (scales, zero_points))
        return torch.ops.quantized_decomposed.quantize_per_channel(
            t, s, z, axis, quant_min, quant_max, dtype)

    return _quantize(g, input, scales, zero_points, quant_min, quant_max, dtype, axis, eager)


# -- dequantize ------------------------------------------------------------------------------
@register(f"{QD}dequantize_per_tensor.default")
def dequantize_per_tensor(g: GraphBuilder, input: Tensor, scale: float, zero_point: int,
                          quant_min: int, quant_max: int, dtype: torch.dtype, *,
                          out_dtype: torch.dtype | None = None) -> Tensor:
    """dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    qtype = _qdtype(g, dtype)
    return _dequantize(g, input, _param(g, scale, _F32, per_tensor=True),
                       _param(g, zero_point, qtype, per_tensor=True), out_dtype)


@register(f"{QD}dequantize_per_tensor.tensor", f"{QD}dequantize_per_tensor.tensor2")
def dequantize_per_tensor_tensor(g: GraphBuilder, input: Tensor, scale: Tensor,
                                 zero_point: Tensor, quant_min: Any, quant_max: Any,
                                 dtype: torch.dtype, *,
                                 out_dtype: torch.dtype | None = None) -> Tensor:
    """dequantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    record = _dynamic_source(None, scale, zero_point)
    if record is not None:
        _, q_u8, s, z_u8, shift = record
        q = _through_casts(input)
        if q is q_u8 or q.meta.get(_DYNAMIC) is record:
            # The int8 values are the uint8 ones minus 128, as is the zero point: the uint8
            # pair dequantizes to the same floats, in the pattern ORT fuses.
            return _dequantize(g, q_u8, s, z_u8, out_dtype)
        return _dequantize(g, input, s, _shift(g, z_u8, shift, _qdtype(g, dtype)), out_dtype)
    qtype = _qdtype(g, dtype)
    return _dequantize(g, input, _param(g, scale, _F32, per_tensor=True),
                       _param(g, zero_point, qtype, per_tensor=True), out_dtype)


@register(f"{QD}dequantize_per_channel.default")
def dequantize_per_channel(g: GraphBuilder, input: Tensor, scales: Tensor,
                           zero_points: Tensor | None, axis: int, quant_min: int, quant_max: int,
                           dtype: torch.dtype, *, out_dtype: torch.dtype | None = None) -> Tensor:
    """dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    qtype = _qdtype(g, dtype)
    s = _param(g, scales, _F32, per_tensor=False)
    z = None if zero_points is None else _param(g, zero_points, qtype, per_tensor=False)
    return _dequantize(g, input, s, z, out_dtype, axis)


# -- dynamic quantization parameters ---------------------------------------------------------
def _shift(g: GraphBuilder, u8: Tensor, shift: int, qtype: ir.DataType) -> Tensor:
    """uint8 values as `qtype` minus `shift` (0: unchanged)."""
    if shift == 0 and qtype == ir.DataType.UINT8:
        return u8
    wide = g.op("Cast", u8, to=ir.DataType.INT32)
    out = g.op("Cast", g.op("Sub", wide, g.const(np.int32(shift), ir.DataType.INT32)), to=qtype)
    out.meta[_DYNAMIC] = u8.meta.get(_DYNAMIC)
    return out


def _as_param_output(g: GraphBuilder, value: Tensor, index: int) -> Tensor:
    """A scale/zero point shaped [1] as `choose_qparams` returns it (dtype by the translator)."""
    out = g.op("Reshape", value, g.const(np.asarray([1], np.int64)))
    out.dtype = value.dtype
    return out


def _minmax(g: GraphBuilder, x: Tensor) -> tuple[Tensor, Tensor]:
    """min(min(x), 0) and max(max(x), 0), float32 scalars."""
    x = _float_input(g, x)
    zero = g.const(np.float32(0), _F32)
    lo = g.op("Min", g.op("ReduceMin", x, keepdims=0), zero)
    hi = g.op("Max", g.op("ReduceMax", x, keepdims=0), zero)
    return lo, hi


@register(f"{QD}choose_qparams.tensor")
def choose_qparams(g: GraphBuilder, input: Tensor, quant_min: int, quant_max: int, eps: float,
                   dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) -> (Tensor, Tensor)"""
    if (dtype, quant_min, quant_max) in ((torch.uint8, 0, 255), (torch.int8, -128, 127)):
        # DynamicQuantizeLinear's scale is (max(0, max x) - min(0, min x)) / 255 and its zero
        # point round(0 - min/scale), saturated: determine_qparams' affine formulas for a
        # 256-value range. It has no eps: a range below 255 * eps quantizes finer than eager,
        # and an all-zero input gets scale 1 (eager: eps), which dequantize to the same zeros.
        q, s, z = g.op("DynamicQuantizeLinear", _float_input(g, input), outputs=3)
        q.dtype, s.dtype, z.dtype = ir.DataType.UINT8, _F32, ir.DataType.UINT8
        shift = 0 if dtype == torch.uint8 else 128
        record = (input, q, s, z, shift)
        for v in (q, s, z):
            v.meta[_DYNAMIC] = record
        zero_point = z if shift == 0 else _shift(g, z, shift, ir.DataType.INT8)
        zero_point.meta[_DYNAMIC] = record
        scale_out = _as_param_output(g, s, 0)
        zp_out = _as_param_output(g, zero_point, 1)
        scale_out.meta[_DYNAMIC] = record
        zp_out.meta[_DYNAMIC] = record
        return scale_out, zp_out
    lo, hi = _minmax(g, input)
    scale = g.op("Div", g.op("Sub", hi, lo), g.const(np.float32(quant_max - quant_min), _F32))
    scale = g.op("Max", scale, g.const(np.float32(eps), _F32))
    zp = g.op("Sub", g.const(np.float32(quant_min), _F32), g.op("Round", g.op("Div", lo, scale)))
    zp = g.op("Clip", zp, g.const(np.float32(quant_min), _F32), g.const(np.float32(quant_max), _F32))
    return (_as_param_output(g, scale, 0),
            _as_param_output(g, g.op("Cast", zp, to=_I64), 1))


@register(f"{QD}choose_qparams_symmetric.tensor")
def choose_qparams_symmetric(g: GraphBuilder, input: Tensor, quant_min: int, quant_max: int,
                             eps: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """choose_qparams_symmetric.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) -> (Tensor, Tensor)"""
    lo, hi = _minmax(g, input)
    bound = g.op("Max", g.op("Neg", lo), hi)
    scale = g.op("Div", bound, g.const(np.float32((quant_max - quant_min) / 2), _F32))
    scale = g.op("Max", scale, g.const(np.float32(eps), _F32))
    zero = 128 if dtype == torch.uint8 else 0
    return (_as_param_output(g, scale, 0),
            _as_param_output(g, g.const(np.int64(zero), _I64), 1))


# -- torchao: tensor subclass weights and affine (de)quantization ----------------------------
@register("export::access_subclass_inner_tensor.default")
def access_subclass_inner_tensor(g: GraphBuilder, src_subclass_tensor: Tensor, attr: str) -> Tensor:
    """access_subclass_inner_tensor(Tensor src_subclass_tensor, str attr) -> Tensor

    A torchao weight (IntxUnpackedToInt8Tensor, ...) is a tensor subclass parameter; torch.export
    reads its inner tensors (`qdata`, `scale`, `zero_point`) with this op. Each becomes an
    initializer `<weight>.<attr>` holding the inner tensor (the subclass itself is dropped as
    unused)."""
    src = src_subclass_tensor
    tensor = src.const_value if isinstance(src, ir.Value) else None
    raw = getattr(tensor, "raw", None)
    inner = getattr(raw, attr, None) if raw is not None else None
    if not isinstance(inner, torch.Tensor) or isinstance(inner, torch._subclasses.FakeTensor):
        raise TranslationError(f"the inner tensor '{attr}' of weight {src.name} has no data "
                               f"(fake mode?): torchao weights need real data to export")
    root = _root(g)
    name = root.unique_name(f"{src.name}.{attr}")
    data = inner.detach().cpu().contiguous()
    if data.dtype == torch.bfloat16:
        tensor_out: Any = ir.tensor(data, name=name)
    else:
        tensor_out = ir.tensor(data.numpy(), name=name)
    value = ir.Value(name=name, type=ir.TensorType(tensor_out.dtype),
                     shape=ir.Shape(list(data.shape)), const_value=tensor_out)
    root.graph.initializers[name] = value
    return value


_SCALAR_TYPES = {5: torch.float16, 6: torch.float32, 7: torch.float64, 15: torch.bfloat16}


def _granularity(shape: list[int], block_size: list[int]) -> tuple[str, int, int]:
    """('tensor'|'axis'|'block', axis, block) of a torchao block size, or ('other', 0, 0)."""
    if list(block_size) == list(shape):
        return "tensor", 0, 0
    partial = [i for i, (b, n) in enumerate(zip(block_size, shape)) if b != n]
    if len(partial) == 1 and block_size[partial[0]] == 1:
        return "axis", partial[0], 0
    blocked = [i for i, (b, n) in enumerate(zip(block_size, shape)) if b not in (1, n)]
    if len(blocked) == 1 and all(b == 1 or i == blocked[0] for i, b in enumerate(block_size)):
        return "block", blocked[0], int(block_size[blocked[0]])
    return "other", 0, 0


@register("torchao::dequantize_affine.default")
def dequantize_affine(g: GraphBuilder, input: Tensor, block_size: list[int], scale: Tensor,
                      zero_point: Tensor | None, input_dtype: torch.dtype,
                      quant_min: Any = None, quant_max: Any = None,
                      output_dtype: torch.dtype = torch.float32) -> Tensor:
    """dequantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, ScalarType input_dtype, Scalar? quant_min=None, Scalar? quant_max=None, ScalarType output_dtype=6) -> Tensor

    `(input - zero_point) * scale` with one scale per block: DequantizeLinear per tensor, per
    axis, or blocked (`block_size`, opset 21). Values within [-8, 7] (torchao's int4 weights
    are int8 tensors holding them) become an INT4 initializer at opset 21, which ONNX Runtime
    fuses with the following MatMul into MatMulNBits."""
    if isinstance(output_dtype, int):  # the schema's default arrives as a ScalarType number
        output_dtype = _SCALAR_TYPES[output_dtype]
    if input.shape is None or not input.shape.is_static():
        raise TranslationError("dequantize_affine needs a static input shape")
    shape = [int(d) for d in input.shape]
    kind, axis, block = _granularity(shape, list(block_size))
    if kind == "other" or (kind == "block" and g.opset < 21):
        raise TranslationError(f"dequantize_affine with block_size {list(block_size)} on shape "
                               f"{shape} needs blocked DequantizeLinear on one axis (opset 21); "
                               f"opset {g.opset}")
    qtype = _qdtype(g, input_dtype) if input_dtype in _Q_DTYPES else None
    lo = None if quant_min is None else int(quant_min)
    hi = None if quant_max is None else int(quant_max)
    data = _constant(input)
    zp_data = _constant(zero_point) if zero_point is not None else None
    if zero_point is not None and zp_data is not None and not np.all(np.rint(zp_data) == zp_data):
        raise TranslationError("dequantize_affine with a non-integer zero point (float zero "
                               "point domain) has no DequantizeLinear form")
    if g.opset >= 21 and data is not None and lo is not None and hi is not None \
            and lo >= -8 and hi <= 7 and data.min() >= -8 and data.max() <= 7:
        qtype = ir.DataType.INT4
        input = _int4_initializer(g, input, data)
    if qtype is None:
        raise TranslationError(f"dequantize_affine of {input_dtype}: no DequantizeLinear dtype")
    if kind == "tensor":
        s = _param(g, scale, _F32, per_tensor=True)
        z = None if zero_point is None else _param(g, zero_point, qtype, per_tensor=True)
        return _dequantize(g, input, s, z, output_dtype)
    if kind == "axis":
        scale_shape = [shape[axis]]
    else:
        scale_shape = [n if i != axis else -(-n // block) for i, n in enumerate(shape)]
    scale_data = _constant(scale)
    if scale_data is not None:  # a constant, as ORT's weight fusions (MatMulNBits) need
        s = g.const(scale_data.reshape(scale_shape).astype(np.float32), _F32)
    else:
        s = g.op("Reshape", _param(g, scale, _F32, per_tensor=False),
                 g.const(np.asarray(scale_shape)))
        s.dtype = _F32
    z = None
    if zero_point is not None:
        z = _param(g, zero_point, qtype, per_tensor=False) if zp_data is None else \
            g.const(np.rint(zp_data).reshape(scale_shape).astype(np.int8 if qtype == ir.DataType.INT4
                                                                 else qtype.numpy()), qtype)
    attrs: dict[str, Any] = {"axis": axis}
    if kind == "block":
        attrs["block_size"] = block
    y = g.op("DequantizeLinear", input, s, z, **attrs)
    y.dtype = _F32
    if output_dtype != torch.float32:
        y = g.op("Cast", y, to=_dtypes.to_ir(output_dtype))
    return y


def _int4_initializer(g: GraphBuilder, x: Tensor, data: np.ndarray) -> Tensor:
    """`data` (int8 holding [-8, 7]) as an INT4 initializer: two values per byte on disk."""
    import ml_dtypes  # onnx_ir's representation of INT4

    root = _root(g)
    name = root.unique_name(f"{x.name or 'weight'}_int4")
    tensor = ir.Tensor(data.astype(np.int8).astype(ml_dtypes.int4), dtype=ir.DataType.INT4,
                       name=name)
    value = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT4),
                     shape=ir.Shape(list(data.shape)), const_value=tensor)
    root.graph.initializers[name] = value
    return value


# -- fake quantization (QAT, torch.ao FakeQuantize modules in eval mode) ---------------------
def _fake_qdtype(g: GraphBuilder, quant_min: int, quant_max: int) -> torch.dtype:
    """The narrowest ONNX quantized dtype holding [quant_min, quant_max] (a Clip narrows it)."""
    for dtype in (torch.uint8, torch.int8, torch.uint16, torch.int16):
        lo, hi = _dtype_range(dtype)
        if lo <= quant_min and quant_max <= hi:
            return dtype
    raise TranslationError(f"fake quantization range [{quant_min}, {quant_max}] does not fit "
                           f"a 16-bit integer: no QuantizeLinear form")


def _fake_quantize(g: GraphBuilder, x: Tensor, scale: Any, zero_point: Any, quant_min: int,
                   quant_max: int, axis: int | None) -> Tensor:
    """`(clamp(round(x / scale) + zp, qmin, qmax) - zp) * scale` as QuantizeLinear [+ Clip] +
    DequantizeLinear: the Q/DQ pair ONNX Runtime fuses. A constant input (a fake-quantized
    weight) is quantized now by the eager kernel into an integer initializer."""
    quant_min, quant_max = int(quant_min), int(quant_max)
    dtype = _fake_qdtype(g, quant_min, quant_max)
    qtype = _qdtype(g, dtype)
    zp_data = _constant(zero_point)
    if zp_data is not None:  # zero points arrive as int32/int64/float tensors or ints
        lo, hi = _dtype_range(dtype)
        if np.any(np.rint(zp_data) < lo) or np.any(np.rint(zp_data) > hi):
            raise TranslationError(f"fake quantization zero point outside the {dtype} range of "
                                   f"[{quant_min}, {quant_max}]")
    if axis is not None:
        axis = axis + len(x.shape) if axis < 0 and x.shape is not None else axis

    def eager(t: torch.Tensor) -> torch.Tensor:
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines the ops)

        s = torch.from_numpy(np.array(_constant(scale), np.float32)).reshape(-1)
        z = torch.from_numpy(np.rint(np.array(_constant(zero_point))).astype(np.int64)).reshape(-1)
        if axis is None:
            return torch.ops.quantized_decomposed.quantize_per_tensor(
                t.float(), float(s[0]), int(z[0]), quant_min, quant_max, dtype)
        return torch.ops.quantized_decomposed.quantize_per_channel(
            t.float(), s, z, axis, quant_min, quant_max, dtype)

    q = _quantize(g, x, scale, zero_point, quant_min, quant_max, dtype, axis, eager)
    per_tensor = axis is None
    s = _param(g, scale, _F32, per_tensor=per_tensor)
    z = _param(g, zero_point, qtype, per_tensor=per_tensor)
    out_dtype = _dtypes.to_torch(x.dtype) if x.dtype is not None and x.dtype != _F32 else None
    return _dequantize(g, q, s, z, out_dtype, axis)


def _fake_quant_mask(g: GraphBuilder, x: Tensor, scale: Any, zero_point: Any, quant_min: int,
                     quant_max: int, axis: int | None) -> Tensor:
    """The cachemask output: whether round(x / scale) + zero_point lies in [qmin, qmax]."""
    per_tensor = axis is None
    s = _param(g, scale, _F32, per_tensor=per_tensor)
    z = _param(g, zero_point, _F32, per_tensor=per_tensor)
    if axis is not None and x.shape is not None:
        shape = [1] * len(x.shape)
        shape[axis] = -1
        s = g.op("Reshape", s, g.const(np.asarray(shape, np.int64)))
        z = g.op("Reshape", z, g.const(np.asarray(shape, np.int64)))
    r = g.op("Add", g.op("Round", g.op("Div", _float_input(g, x), s)), z)
    return g.op("And", g.op("GreaterOrEqual", r, g.const(np.float32(quant_min), _F32)),
                g.op("LessOrEqual", r, g.const(np.float32(quant_max), _F32)))


@register("aten::fake_quantize_per_tensor_affine.default",
          "aten::fake_quantize_per_tensor_affine.tensor_qparams",
          "aten::_fake_quantize_learnable_per_tensor_affine.default")
def fake_quantize_per_tensor_affine(g: GraphBuilder, self: Tensor, scale: Any, zero_point: Any,
                                    quant_min: int, quant_max: int,
                                    grad_factor: float = 1.0) -> Tensor:
    """fake_quantize_per_tensor_affine(Tensor self, float scale, int zero_point, int quant_min, int quant_max) -> Tensor"""
    return _fake_quantize(g, self, scale, zero_point, quant_min, quant_max, None)


@register("aten::fake_quantize_per_channel_affine.default",
          "aten::_fake_quantize_learnable_per_channel_affine.default")
def fake_quantize_per_channel_affine(g: GraphBuilder, self: Tensor, scale: Tensor,
                                     zero_point: Tensor, axis: int, quant_min: int,
                                     quant_max: int, grad_factor: float = 1.0) -> Tensor:
    """fake_quantize_per_channel_affine(Tensor self, Tensor scale, Tensor zero_point, int axis, int quant_min, int quant_max) -> Tensor"""
    return _fake_quantize(g, self, scale, zero_point, quant_min, quant_max, axis)


@register("aten::fake_quantize_per_tensor_affine_cachemask.default")
def fake_quantize_per_tensor_affine_cachemask(g: GraphBuilder, self: Tensor, scale: float,
                                              zero_point: int, quant_min: int,
                                              quant_max: int) -> tuple[Tensor, Tensor]:
    """fake_quantize_per_tensor_affine_cachemask(Tensor self, float scale, int zero_point, int quant_min, int quant_max) -> (Tensor output, Tensor mask)"""
    return _fake_quant_with_mask(g, self, scale, zero_point, quant_min, quant_max, None)


@register("aten::fake_quantize_per_channel_affine_cachemask.default")
def fake_quantize_per_channel_affine_cachemask(g: GraphBuilder, self: Tensor, scale: Tensor,
                                               zero_point: Tensor, axis: int, quant_min: int,
                                               quant_max: int) -> tuple[Tensor, Tensor]:
    """fake_quantize_per_channel_affine_cachemask(Tensor self, Tensor scale, Tensor zero_point, int axis, int quant_min, int quant_max) -> (Tensor output, Tensor mask)"""
    return _fake_quant_with_mask(g, self, scale, zero_point, quant_min, quant_max, axis)


def _flag(value: Any, name: str, op: str) -> bool:
    data = _constant(value)
    if data is None or data.size != 1:
        raise TranslationError(f"{op}: '{name}' must be a constant (a module buffer) to export; "
                               f"got a computed value")
    return bool(data.reshape(()))


def _fake_quant_with_mask(g: GraphBuilder, x: Tensor, scale: Tensor, zero_point: Tensor,
                          quant_min: int, quant_max: int, axis: int | None,
                          enabled: bool = True) -> tuple[Tensor, Tensor]:
    """(fake-quantized x, mask of the values inside the range); disabled: (x, all True)."""
    if not enabled:
        return g.op("Identity", x), g.op("ConstantOfShape", g.op("Shape", x),
                                         value=ir.tensor([True]))
    return (_fake_quantize(g, x, scale, zero_point, quant_min, quant_max, axis),
            _fake_quant_mask(g, x, scale, zero_point, quant_min, quant_max, axis))


@register("aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default")
def fake_quantize_cachemask_tensor_qparams(g: GraphBuilder, self: Tensor, scale: Tensor,
                                           zero_point: Tensor, fake_quant_enabled: Tensor,
                                           quant_min: int, quant_max: int
                                           ) -> tuple[Tensor, Tensor]:
    """_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(Tensor self, Tensor scale, Tensor zero_point, Tensor fake_quant_enabled, int quant_min, int quant_max) -> (Tensor output, Tensor mask)"""
    return _fake_quant_with_mask(g, self, scale, zero_point, quant_min, quant_max, None,
                                 _flag(fake_quant_enabled, "fake_quant_enabled", "fake_quantize"))


@register("aten::_fused_moving_avg_obs_fq_helper_functional.default")
def fused_moving_avg_obs_fq_helper(g: GraphBuilder, self: Tensor, observer_on: Tensor,
                                   fake_quant_on: Tensor, running_min: Tensor,
                                   running_max: Tensor, scale: Tensor, zero_point: Tensor,
                                   averaging_const: float, quant_min: int, quant_max: int,
                                   ch_axis: int, per_row_fake_quant: bool = False,
                                   symmetric_quant: bool = False) -> tuple[Tensor, ...]:
    """_fused_moving_avg_obs_fq_helper_functional(Tensor self, Tensor observer_on, Tensor fake_quant_on, Tensor running_min, Tensor running_max, Tensor scale, Tensor zero_point, float averaging_const, int quant_min, int quant_max, int ch_axis, bool per_row_fake_quant=False, bool symmetric_quant=False) -> (Tensor output, Tensor mask, Tensor running_min_out, Tensor running_max_out, Tensor scale_out, Tensor zero_point_out)

    FusedMovingAvgObsFakeQuantize in inference: with its observer disabled
    (`model.apply(torch.ao.quantization.disable_observer)`) the statistics and qparams pass
    through and the input is fake-quantized with the stored scale and zero point. An enabled
    observer updates them on every call (training behaviour): refused, naming the fix."""
    op = "FusedMovingAvgObsFakeQuantize"
    if _flag(observer_on, "observer_enabled", op):
        raise TranslationError(f"{op} with its observer enabled updates its scale on every call; "
                               f"call model.apply(torch.ao.quantization.disable_observer) (or "
                               f"torchao.quantization.pt2e.disable_observer) before exporting")
    axis = ch_axis if per_row_fake_quant else None
    out, mask = _fake_quant_with_mask(g, self, scale, zero_point, quant_min, quant_max, axis,
                                      _flag(fake_quant_on, "fake_quant_enabled", op))
    return (out, mask, g.op("Identity", running_min), g.op("Identity", running_max),
            g.op("Identity", scale), g.op("Identity", zero_point))


def _output_only(translation: Callable[..., tuple[Tensor, ...]], doc: str) -> Callable[..., Tensor]:
    """`translation` for an op with the same arguments that returns only its first output."""
    @functools.wraps(translation)
    def translate(g: GraphBuilder, *args: Any) -> Tensor:
        return translation(g, *args)[0]

    translate.__doc__ = doc
    return translate


register("aten::fused_moving_avg_obs_fake_quant.default")(_output_only(
    fused_moving_avg_obs_fq_helper,
    """fused_moving_avg_obs_fake_quant(Tensor self, Tensor observer_on, Tensor fake_quant_on, Tensor(a!) running_min, Tensor(b!) running_max, Tensor(c!) scale, Tensor(d!) zero_point, float averaging_const, int quant_min, int quant_max, int ch_axis, bool per_row_fake_quant=False, bool symmetric_quant=False) -> Tensor

    The TorchScript (jit.trace) form of FusedMovingAvgObsFakeQuantize: the output only."""))


@register("torchao::choose_qparams_affine.default")
def choose_qparams_affine(g: GraphBuilder, input: Tensor, mapping_type: str,
                          block_size: list[int], target_dtype: torch.dtype,
                          quant_min: Any = None, quant_max: Any = None, eps: Any = None,
                          scale_dtype: Any = None, zero_point_dtype: Any = None,
                          keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """choose_qparams_affine(Tensor? input, str mapping_type, SymInt[] block_size, ScalarType target_dtype, Scalar? quant_min=None, Scalar? quant_max=None, float? eps=None, ScalarType? scale_dtype=None, ScalarType? zero_point_dtype=None, bool keepdim=False) -> (Tensor, Tensor)

    torchao's QAT fake quantizers (IntxFakeQuantizeConfig) choose their scale on every call.
    For a constant (a weight) the eager op runs here and its scale and zero point become
    constants. For a computed tensor (per-token activations) the graph computes them with
    torchao's formula, op for op (`_choose_qparams_graph`)."""
    data = _constant(input)
    if data is None or not isinstance(input, ir.Value) or input.is_graph_input():
        return _choose_qparams_graph(g, input, mapping_type, list(block_size), target_dtype,
                                     quant_min, quant_max, eps, keepdim)
    from torchao.quantization.quant_primitives import choose_qparams_affine as eager

    from torchao.quantization.quant_primitives import MappingType

    tensor = torch.from_numpy(np.array(data))
    if isinstance(scale_dtype, int):
        scale_dtype = _SCALAR_TYPES.get(scale_dtype, scale_dtype)
    if isinstance(zero_point_dtype, int):
        zero_point_dtype = _SCALAR_TYPES.get(zero_point_dtype, zero_point_dtype)
    scale, zero_point = eager(tensor, MappingType[mapping_type], list(block_size), target_dtype,
                              quant_min, quant_max, eps, scale_dtype, zero_point_dtype,
                              keepdim=keepdim)
    return (g.const(scale.detach().numpy(), _dtypes.to_ir(scale.dtype)),
            g.const(zero_point.detach().numpy(), _dtypes.to_ir(zero_point.dtype)))


def _qvalue_bounds(dtype: torch.dtype, quant_min: Any, quant_max: Any) -> tuple[int, int]:
    """torchao's default [quant_min, quant_max] of `dtype` (int1..int7 and uint1..uint7 too)."""
    name = str(dtype).rsplit(".", 1)[-1]
    bits = name.lstrip("uint")
    if name.startswith(("int", "uint")) and bits.isdigit() and int(bits) < 8:
        b = int(bits)
        lo, hi = (0, 2 ** b - 1) if name.startswith("uint") else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)
    elif not dtype.is_floating_point and dtype != torch.bool:
        lo, hi = _dtype_range(dtype)
    else:
        raise TranslationError(f"choose_qparams_affine of a computed tensor to {dtype}: only "
                               f"integer target dtypes have a translation")
    lo = lo if quant_min is None else int(quant_min)
    hi = hi if quant_max is None else int(quant_max)
    return lo, hi


def _reduction_layout(shape: list[Any], block_size: list[int]
                      ) -> tuple[list[int] | None, list[int]]:
    """torchao's `_get_reduction_params`: (the shape to view the input as, None when no block
    splits an axis; the axes reduced in that view)."""
    view: list[int] = []
    axes: list[int] = []
    split = False
    for n, b in zip(shape, block_size):
        b = int(b)
        if b != 1 and not isinstance(n, int):
            raise TranslationError(f"choose_qparams_affine with block size {b} on a dynamic "
                                   f"axis: the blocks need a static size")
        if b not in (1, n):
            if n % b:
                raise TranslationError(f"choose_qparams_affine: axis of size {n} is not a "
                                       f"multiple of its block size {b}")
            view += [n // b, b]
            axes.append(len(view) - 1)
            split = True
        else:
            if b != 1:
                axes.append(len(view))
            view.append(n if isinstance(n, int) else -1)
    return (view if split else None), axes


def _choose_qparams_graph(g: GraphBuilder, x: Tensor, mapping_type: str, block_size: list[int],
                          target_dtype: torch.dtype, quant_min: Any, quant_max: Any, eps: Any,
                          keepdim: bool) -> tuple[Tensor, Tensor]:
    """torchao's `_choose_qparams_affine` on a computed float32 tensor, in eager's order of
    float32 ops (min/max against 0, the division by the float range, the eps floor,
    `qmin - round(min / scale)`, the clamp), so the scale and zero point are eager's bit for
    bit. float16/bfloat16 inputs are refused: eager divides them by a scalar through its
    reciprocal in float32, which this does not reproduce."""
    if x.dtype != _F32 or x.shape is None:
        raise TranslationError(f"choose_qparams_affine of a computed {x.dtype} tensor: only "
                               f"float32 inputs of known rank have a translation")
    if len(block_size) != len(x.shape):
        raise TranslationError(f"choose_qparams_affine: block_size {block_size} does not match "
                               f"the input's rank {len(x.shape)}")
    qmin, qmax = _qvalue_bounds(target_dtype, quant_min, quant_max)
    if eps is None:
        eps = float(torch.finfo(torch.float32).smallest_normal)

    def f32(value: float) -> Tensor:
        return g.const(np.float32(value), _F32)

    view, axes = _reduction_layout(list(x.shape), block_size)
    xv = x if view is None else g.op("Reshape", x, g.const(np.asarray(view, np.int64)))
    keep = 1 if keepdim or view is not None else 0
    # torch.amin(x, dim=[]) reduces every axis (blocks of one element included)
    reduce_args = [g.const(np.asarray(axes, np.int64))] if axes else []
    lo = g.op("Min", g.op("ReduceMin", xv, *reduce_args, keepdims=keep), f32(0))
    hi = g.op("Max", g.op("ReduceMax", xv, *reduce_args, keepdims=keep), f32(0))
    if mapping_type in ("SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR"):
        if mapping_type == "SYMMETRIC":
            scale = g.op("Div", g.op("Max", g.op("Neg", lo), hi), f32((qmax - qmin) / 2))
        else:
            smin, smax = g.op("Div", lo, f32(qmin)), g.op("Div", hi, f32(qmax))
            scale = g.op("Where", g.op("Greater", smin, smax), smin, smax)
        zp = g.op("ConstantOfShape", g.op("Shape", scale),
                  value=ir.tensor(np.asarray([int((qmax + qmin + 1) / 2)], np.float32)))
        scale = g.op("Max", scale, f32(eps))
    elif mapping_type == "ASYMMETRIC":
        scale = g.op("Max", g.op("Div", g.op("Sub", hi, lo), f32(qmax - qmin)), f32(eps))
        zp = g.op("Sub", f32(qmin), g.op("Round", g.op("Div", lo, scale)))
        zp = g.op("Clip", zp, f32(qmin), f32(qmax))
    else:
        raise TranslationError(f"choose_qparams_affine with mapping type {mapping_type!r}: "
                               f"SYMMETRIC, SYMMETRIC_NO_CLIPPING_ERR or ASYMMETRIC only")
    if view is not None:  # back to the [n_i // b_i] layout (keepdim) or the reduced one
        out_shape = [int(n) // int(b) for n, b in zip(x.shape, block_size)] if keepdim else \
            [d for i, d in enumerate(view) if i not in axes]
        shape_c = g.const(np.asarray(out_shape, np.int64))
        scale, zp = g.op("Reshape", scale, shape_c), g.op("Reshape", zp, shape_c)
    return g.op("Cast", scale, to=g.out_dtype(0)), g.op("Cast", zp, to=g.out_dtype(1))
