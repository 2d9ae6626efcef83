"""OpInfo cases for elementwise math, comparisons, logic and type conversion."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32, I64, BOOL, F16 = torch.float32, torch.int64, torch.bool, torch.float16
FH = (F32, F16)
FIH = (F32, I64, F16)
ALL = (F32, I64, BOOL, F16)
IB = (I64, BOOL)


def _unary(name: str, target: object, dtypes: tuple[torch.dtype, ...] = ALL) -> OpTest:
    return OpTest(name, covers=(target,), dtypes=dtypes)


_DIV = (aten.div.Tensor, aten.div.Scalar)
_DIV_MODE = (aten.div.Tensor_mode, aten.div.Scalar_mode)

CASES = [
    # arithmetic
    OpTest("add", covers=(aten.add.Tensor, aten.add.Scalar), dtypes=ALL),
    OpTest("__radd__", covers=(aten.add.Tensor,), dtypes=ALL),
    OpTest("sub", covers=(aten.sub.Tensor, aten.sub.Scalar), dtypes=FIH),
    OpTest("rsub", covers=(aten.rsub.Tensor, aten.rsub.Scalar), dtypes=FIH),
    OpTest("__rsub__", covers=(aten.rsub.Tensor, aten.rsub.Scalar), dtypes=FIH),
    OpTest("mul", covers=(aten.mul.Tensor, aten.mul.Scalar), dtypes=ALL),
    OpTest("__rmul__", covers=(aten.mul.Tensor,), dtypes=ALL),
    OpTest("div", variant="no_rounding_mode", covers=_DIV, dtypes=ALL),
    OpTest("true_divide", covers=(*_DIV, aten.true_divide.Tensor), dtypes=ALL),
    OpTest("__rdiv__", covers=(*_DIV, aten.reciprocal.default, aten.mul.Tensor), dtypes=ALL),
    OpTest("div", variant="trunc_rounding", covers=_DIV_MODE, dtypes=FIH),
    OpTest("div", variant="floor_rounding", covers=_DIV_MODE, dtypes=FIH),
    OpTest("floor_divide", covers=(aten.floor_divide.default, aten.floor_divide.Scalar),
           dtypes=FIH),
    OpTest("remainder", covers=(aten.remainder.Tensor, aten.remainder.Scalar), dtypes=FIH),
    OpTest("__rmod__", covers=(aten.remainder.Tensor, aten.remainder.Scalar_Tensor), dtypes=FIH),
    OpTest("fmod", covers=(aten.fmod.Tensor, aten.fmod.Scalar), dtypes=FIH),
    OpTest("pow", covers=(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar), dtypes=FIH),
    OpTest("__rpow__", covers=(aten.pow.Scalar, aten.pow.Tensor_Tensor), dtypes=FIH),
    OpTest("square", covers=(aten.square.default, aten.pow.Tensor_Scalar), dtypes=ALL),
    OpTest("addcmul", covers=(aten.addcmul.default,), dtypes=FIH),
    OpTest("addcdiv", covers=(aten.addcdiv.default,), dtypes=FH),
    OpTest("lerp", covers=(aten.lerp.Scalar, aten.lerp.Tensor), dtypes=FH),
    OpTest("hypot", covers=(aten.hypot.default,), dtypes=FH),
    OpTest("atan2", covers=(aten.atan2.default,), dtypes=ALL),
    OpTest("xlogy", covers=(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other),
           dtypes=ALL),
    # unary math
    _unary("neg", aten.neg.default, FIH),
    _unary("abs", aten.abs.default, FIH),
    _unary("exp", aten.exp.default),
    _unary("exp2", aten.exp2.default),
    _unary("expm1", aten.expm1.default),
    _unary("log", aten.log.default),
    _unary("log2", aten.log2.default),
    _unary("log10", aten.log10.default),
    _unary("log1p", aten.log1p.default),
    _unary("sqrt", aten.sqrt.default),
    _unary("rsqrt", aten.rsqrt.default),
    _unary("reciprocal", aten.reciprocal.default),
    _unary("sin", aten.sin.default),
    _unary("cos", aten.cos.default),
    _unary("tan", aten.tan.default),
    _unary("asin", aten.asin.default),
    _unary("acos", aten.acos.default),
    _unary("atan", aten.atan.default),
    _unary("sinh", aten.sinh.default),
    _unary("cosh", aten.cosh.default),
    _unary("asinh", aten.asinh.default),
    _unary("acosh", aten.acosh.default),
    _unary("atanh", aten.atanh.default),
    _unary("erf", aten.erf.default),
    _unary("erfc", aten.erfc.default),
    _unary("erfinv", aten.erfinv.default),
    _unary("sigmoid", aten.sigmoid.default),
    _unary("tanh", aten.tanh.default),
    _unary("logit", aten.logit.default),
    # torch's ndtr reference: 0.5 * (1 + erf(x / sqrt(2))).
    OpTest("special.ndtr", covers=(aten.erf.default,), dtypes=ALL),
    # rounding and sign
    _unary("floor", aten.floor.default, FIH),
    _unary("ceil", aten.ceil.default, FIH),
    _unary("round", aten.round.default, FIH),
    OpTest("round", variant="decimals_0", covers=(aten.round.decimals,), dtypes=FH),
    OpTest("round", variant="decimals_3", covers=(aten.round.decimals,)),
    OpTest("round", variant="decimals_neg_3", covers=(aten.round.decimals,)),
    _unary("trunc", aten.trunc.default, FIH),
    _unary("frac", aten.frac.default, FH),
    _unary("sign", aten.sign.default),
    _unary("sgn", aten.sgn.default),
    _unary("signbit", aten.signbit.default),
    # min / max / clamp
    OpTest("clamp", covers=(aten.clamp.default, aten.clamp.Tensor), dtypes=FIH),
    OpTest("clamp_min", covers=(aten.clamp_min.default, aten.clamp_min.Tensor), dtypes=ALL),
    OpTest("clamp_max", covers=(aten.clamp_max.default, aten.clamp_max.Tensor), dtypes=ALL),
    OpTest("maximum", covers=(aten.maximum.default,), dtypes=ALL),
    OpTest("minimum", covers=(aten.minimum.default,), dtypes=ALL),
    OpTest("fmax", covers=(aten.fmax.default,), dtypes=ALL),
    OpTest("fmin", covers=(aten.fmin.default,), dtypes=ALL),
    # comparisons and logic
    *(OpTest(name, covers=(getattr(aten, name).Tensor, getattr(aten, name).Scalar), dtypes=ALL)
      for name in ("eq", "ne", "lt", "le", "gt", "ge")),
    OpTest("logical_and", covers=(aten.logical_and.default,), dtypes=ALL),
    OpTest("logical_or", covers=(aten.logical_or.default,), dtypes=ALL),
    OpTest("logical_xor", covers=(aten.logical_xor.default,), dtypes=ALL),
    _unary("logical_not", aten.logical_not.default),
    *(OpTest(f"bitwise_{name}", covers=(getattr(aten, f"bitwise_{name}").Tensor,
                                        getattr(aten, f"bitwise_{name}").Scalar), dtypes=IB)
      for name in ("and", "or", "xor")),
    *(OpTest(f"__r{name}__", covers=(getattr(aten, f"bitwise_{name}").Tensor,
                                     getattr(aten, f"bitwise_{name}").Scalar,
                                     getattr(aten, f"__{name}__").Tensor,
                                     getattr(aten, f"__{name}__").Scalar), dtypes=IB)
      for name in ("and", "or", "xor")),
    _unary("bitwise_not", aten.bitwise_not.default, IB),
    _unary("isnan", aten.isnan.default),
    _unary("isinf", aten.isinf.default),
    _unary("isfinite", aten.isfinite.default),
    _unary("nan_to_num", aten.nan_to_num.default),
    OpTest("addr", covers=(aten.addr.default,), dtypes=ALL),
    # selection
    OpTest("where", covers=(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther),
           dtypes=ALL),
    OpTest("masked_fill", covers=(aten.masked_fill.Scalar, aten.masked_fill.Tensor), dtypes=ALL),
    # conversion and copies
    OpTest("to", covers=(aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten.to.other,
                         aten._to_copy.default), dtypes=ALL),
    OpTest("clone", covers=(aten.clone.default,), dtypes=ALL),
    # torch.export drops contiguous() on the contiguous OpInfo samples, so nothing to cover here;
    # test_elementwise_edge.py covers aten.contiguous on a transposed tensor.
    OpTest("contiguous", dtypes=ALL),
]
