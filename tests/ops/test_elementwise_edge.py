"""Edge cases of elementwise, activation and conversion translations that OpInfo samples miss."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from onnxport.translate import aten
from tests.helpers import Fn, count, export_and_compare

NAN, INF = math.nan, math.inf


def targets(program: Any) -> set[Any]:
    return {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}


INTS = torch.tensor([-7, -6, -1, 0, 1, 5, 7, 9])
INT_DIVISORS = torch.tensor([2, -2, 3, -3, 4, -4, 5, 7])
SPECIAL = torch.tensor([-INF, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, INF, NAN])


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_integer_division_negative_operands(mode: str | None) -> None:
    export_and_compare(Fn(lambda a, b: torch.div(a, b, rounding_mode=mode)), (INTS, INT_DIVISORS))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_float_division_rounding_special_values(mode: str | None) -> None:
    a = torch.tensor([1.0, -1.0, 7.5, -7.5, 0.0, -0.0, INF, NAN, 1.0, 5.0, -5.0])
    b = torch.tensor([0.1, 0.1, -2.0, 2.0, 3.0, 3.0, 2.0, 1.0, 0.0, -0.0, 0.0])
    export_and_compare(Fn(lambda x, y: torch.div(x, y, rounding_mode=mode)), (a, b))


def test_floor_divide_and_remainder_match_python_signs() -> None:
    model = Fn(lambda a, b: (a // b, a % b, torch.fmod(a, b)))
    export_and_compare(model, (INTS, INT_DIVISORS))
    export_and_compare(model, (INTS.float() + 0.25, INT_DIVISORS.float()))


def test_scalar_overloads_and_promotion() -> None:
    x = torch.arange(-4, 4)
    # int tensor with float scalars is float; int / int is float; // and % keep int.
    export_and_compare(Fn(lambda t: (t + 1.5, t * 0.5, t / 2, t // 3, t % 3, 2 - t, t ** 2,
                                     2 ** t.abs(), t - 1.5)), (x,))


def test_rsub_and_sub_with_alpha() -> None:
    a, b = torch.randn(3, 4), torch.randn(4)
    export_and_compare(Fn(lambda x, y: (torch.rsub(x, y, alpha=2), torch.sub(x, y, alpha=0.5),
                                        torch.add(x, y, alpha=-3), torch.rsub(x, 2.0))), (a, b))


def test_bool_arithmetic() -> None:
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    export_and_compare(Fn(lambda x, y: (x + y, x * y, x & y, x | y, x ^ y, ~x, x.sum(), x / y)),
                       (a, b))


def test_comparisons_mix_int_and_float() -> None:
    i = torch.tensor([1, 2, 3, -4])
    f = torch.tensor([1.0, 2.5, NAN, -4.0])
    export_and_compare(Fn(lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b, a == 2.5,
                                        a < 2.5, b != 1)), (i, f))


def test_bool_comparisons() -> None:
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    export_and_compare(Fn(lambda x, y: (x < y, x >= y, x == y, torch.maximum(x, y),
                                        torch.minimum(x, y))), (a, b))


def test_clamp_nan_propagation_and_none_bounds() -> None:
    x = torch.tensor([NAN, -2.0, 0.5, 3.0])
    lo = torch.tensor([0.0, NAN, 0.0, 0.0])
    hi = torch.tensor([1.0, 1.0, NAN, 1.0])
    export_and_compare(Fn(lambda t, a, b: (t.clamp(min=0), t.clamp(max=1), t.clamp(0, 1),
                                           t.clamp(min=a, max=b), t.clamp(min=2, max=1),
                                           torch.clamp_min(t, a), torch.clamp_max(t, b))),
                       (x, lo, hi))


def test_clamp_bool_is_or_and() -> None:
    # ONNX Max/Min have no bool kernels: clamp_min is Or, clamp_max is And on bools.
    x = torch.tensor([[True, False], [False, True]])
    bound = torch.tensor([True, False])
    # (Eager has only the tensor-bound bool kernels.)
    export_and_compare(Fn(lambda t, b: (torch.clamp_min(t, b), torch.clamp_max(t, b),
                                        t.clamp(min=b))), (x, bound))


def test_clamp_int_with_float_bound_promotes() -> None:
    export_and_compare(Fn(lambda t: t.clamp(min=0.5)), (torch.arange(-3, 3),))


def test_minimum_maximum_fmin_fmax_nan() -> None:
    a = torch.tensor([NAN, 1.0, NAN, -1.0])
    b = torch.tensor([0.0, NAN, NAN, 2.0])
    export_and_compare(Fn(lambda x, y: (torch.minimum(x, y), torch.maximum(x, y),
                                        torch.fmin(x, y), torch.fmax(x, y))), (a, b))


def test_rounding_special_values() -> None:
    export_and_compare(Fn(lambda t: (torch.round(t), torch.floor(t), torch.ceil(t), torch.trunc(t),
                                     torch.frac(t), torch.sign(t), torch.signbit(t),
                                     torch.round(t * 1.2345, decimals=2),
                                     torch.round(t * 1234.5, decimals=-2))), (SPECIAL,))


def test_integer_rounding_is_identity() -> None:
    export_and_compare(Fn(lambda t: (torch.round(t), torch.floor(t), torch.ceil(t), torch.trunc(t),
                                     torch.sign(t), torch.abs(t))), (INTS,))


def test_predicates_and_nan_to_num() -> None:
    export_and_compare(Fn(lambda t: (torch.isnan(t), torch.isinf(t), torch.isfinite(t),
                                     torch.nan_to_num(t), torch.nan_to_num(t, 1.0, 2.0, -3.0))),
                       (SPECIAL,))
    export_and_compare(Fn(lambda t: (torch.isnan(t), torch.isinf(t), torch.isfinite(t))), (INTS,),
                       )


def test_float16_predicates() -> None:
    export_and_compare(Fn(lambda t: (torch.isinf(t), torch.nan_to_num(t))), (SPECIAL.half(),))


def test_atan2_signed_zeros_and_infinities() -> None:
    y = torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 1.0, INF, -INF, INF, 2.0, NAN])
    x = torch.tensor([0.0, 0.0, -0.0, -0.0, -0.0, -0.0, -INF, INF, -INF, 3.0, -3.0, 1.0])
    export_and_compare(Fn(torch.atan2), (y, x))


def test_pow_integer_edge_cases() -> None:
    base = torch.tensor([0, 0, 1, -1, 2, -2, 3])
    exp = torch.tensor([0, -1, -3, -3, -1, 3, 2])
    export_and_compare(Fn(torch.pow), (base, exp))


def test_xlogy_and_logit() -> None:
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, NAN])
    y = torch.tensor([0.0, NAN, 0.0, 3.0, 1.0])
    p = torch.tensor([0.0, 0.25, 0.5, 1.0, 1.5])
    export_and_compare(Fn(lambda a, b, q: (torch.xlogy(a, b), torch.xlogy(2.0, b), torch.logit(q),
                                           torch.logit(q, eps=0.1))), (x, y, p))


def test_erfinv_poles_and_range() -> None:
    y = torch.tensor([-1.0, -0.999, -0.5, 0.0, 0.3, 0.9999, 1.0, 1.5, NAN])
    export_and_compare(Fn(torch.erfinv), (y,))


def test_expm1_log1p_small_values() -> None:
    x = torch.tensor([1e-10, -1e-8, 1e-5, 0.0, 3.0])
    export_and_compare(Fn(lambda t: (torch.expm1(t), torch.log1p(t))), (x,))


def test_where_scalar_overloads_and_bool() -> None:
    c = torch.tensor([True, False, True])
    x = torch.tensor([1.0, 2.0, 3.0])
    program = export_and_compare(
        Fn(lambda m, t: (torch.where(m, t, 0.0), torch.where(m, 1.0, t), torch.where(m, 1.0, 0.0),
                         torch.where(m, m, ~m))), (c, x))
    assert {aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar} <= targets(program)


def test_masked_fill_broadcast_and_tensor_value() -> None:
    x = torch.randn(2, 3)
    mask = torch.tensor([True, False, True])
    export_and_compare(Fn(lambda t, m: (t.masked_fill(m, -1.0), t.masked_fill(m, torch.tensor(5.0)),
                                        t.int().masked_fill(m, 7))), (x, mask))


def test_broadcasting_and_empty_tensors() -> None:
    a, b = torch.randn(0, 3), torch.randn(3)
    export_and_compare(Fn(lambda x, y: (x + y, x * y, x < y, torch.where(x > 0, x, y), F.relu(x),
                                        torch.softmax(x, -1))), (a, b))


def test_zero_dim_tensor_does_not_widen() -> None:
    # A 0-d float64 tensor does not widen a float32 tensor; a 0-d float one widens an int one.
    x, s = torch.randn(3), torch.tensor(2.0, dtype=torch.float64)
    export_and_compare(Fn(lambda t, z: (t * z, t > z, torch.arange(3) * z)), (x, s))


def test_softmax_negative_dim_dtype_and_scalar() -> None:
    x = torch.randn(2, 3, 4)
    export_and_compare(Fn(lambda t: (torch.softmax(t, -2), torch.log_softmax(t, dim=0),
                                     torch.softmax(t, -1, dtype=torch.float64),
                                     torch.softmax(t[0, 0, 0], 0))), (x,))
    export_and_compare(Fn(lambda t: torch.softmax(t, -1)), (x.half(),))


def test_gelu_opsets() -> None:
    x = torch.randn(4, 5)
    for approximate in ("none", "tanh"):
        model = Fn(lambda t, a=approximate: F.gelu(t, approximate=a))
        assert count(export_and_compare(model, (x,), opset_version=18), "Gelu") == 0
        assert count(export_and_compare(model, (x,), opset_version=20), "Gelu") == 1
        assert count(export_and_compare(model, (x,)), "Gelu") == 1    # the default, 20


def test_activation_parameters() -> None:
    x = torch.tensor([-30.0, -3.0, -1.0, -0.2, 0.0, 0.2, 1.0, 3.0, 30.0, NAN])
    export_and_compare(Fn(lambda t: (F.elu(t, alpha=0.5), torch.ops.aten.elu(t, 1.5, 2.0, 0.5),
                                     F.celu(t, alpha=2.0), F.softplus(t, beta=2, threshold=5),
                                     F.hardtanh(t, -2.0, 0.5), F.leaky_relu(t, 0.2), F.relu6(t),
                                     F.hardshrink(t, 1.0), F.softshrink(t, 1.0),
                                     F.threshold(t, 0.1, 20.0), F.logsigmoid(t), F.selu(t),
                                     F.silu(t), F.mish(t), F.hardswish(t), F.hardsigmoid(t))), (x,))


def test_relu_family_on_integers() -> None:
    x = torch.arange(-4, 9)
    export_and_compare(Fn(lambda t: (F.relu(t), F.relu6(t), F.hardtanh(t, -2, 2),
                                     F.threshold(t, 1, -5))), (x,))


def test_prelu_and_glu_dims() -> None:
    x = torch.randn(2, 4, 3, 6)
    w = torch.rand(4)
    export_and_compare(Fn(lambda t, a: (F.prelu(t, a), F.glu(t, -1), F.glu(t, 1), F.glu(t, -4))),
                       (x, w))
    export_and_compare(torch.nn.PReLU(), (torch.randn(5),))


def test_conversions() -> None:
    x = torch.tensor([-2.7, -0.5, 0.0, 0.5, 2.7, 300.0])
    export_and_compare(Fn(lambda t: (t.to(torch.int64), t.int(), t.bool(), t.half(), t.double(),
                                     t.to(torch.int32).float(), t.type_as(torch.arange(2)),
                                     t.to(t.new_zeros((), dtype=torch.int16)))), (x,))


def test_contiguous_clone_detach_and_copy() -> None:
    x = torch.randn(3, 4)
    program = export_and_compare(Fn(lambda t: (t.t().contiguous(), t.clone(), t.detach(),
                                               torch.zeros(4, 3).copy_(t.t()) + 0,
                                               torch.zeros(2, 3, 4, dtype=torch.int64).copy_(t))),
                                 (x,))
    assert aten.contiguous.default in targets(program) or aten.clone.default in targets(program)


def test_dropout_in_eval_is_identity() -> None:
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Dropout2d(0.3),
                                torch.nn.AlphaDropout(0.2), torch.nn.ReLU())
    program = export_and_compare(model, (torch.randn(2, 3, 4, 4),))
    assert count(program, "Relu") == 1


def test_inplace_ops_are_functionalized() -> None:
    def fn(t: torch.Tensor) -> Any:
        y = t.clone()
        y.add_(1).mul_(2).clamp_(max=3).sigmoid_()
        z = t.clone().div_(2, rounding_mode="floor")
        return y, z, F.relu(t.clone(), inplace=True), F.softmax(t, -1), F.log_softmax(t, -1)

    export_and_compare(Fn(fn), (torch.randn(3, 4) * 4,))


def test_lerp_addcmul_addcdiv_hypot() -> None:
    a, b, w = torch.randn(3, 4), torch.randn(4), torch.rand(3, 4) * 2 - 0.5
    export_and_compare(Fn(lambda x, y, t: (torch.lerp(x, y, 0.3), torch.lerp(x, y, 0.8),
                                           torch.lerp(x, y, t), torch.addcmul(x, y, t, value=-2),
                                           torch.addcdiv(x, y, t + 2, value=0.5),
                                           torch.hypot(x * 1e20, y * 1e20))), (a, b, w))


def test_explicit_overloads_are_dispatched() -> None:
    a = aten
    x = torch.tensor([[-3.5, -1.0, 0.0], [0.5, 2.0, 7.25]])
    i = torch.tensor([[-7, -2, 0], [3, 5, 9]])
    calls: list[tuple[Any, Callable[[Any, Any, Any], Any]]] = [
        (a.add.Scalar, lambda op, t, n: op(t, 2, 3)),
        (a.sub.Scalar, lambda op, t, n: op(t, 1.5, 2)),
        (a.rsub.Scalar, lambda op, t, n: op(t, 1.5, 2)),
        (a.mul.Scalar, lambda op, t, n: op(n, 0.5)),
        (a.div.Scalar, lambda op, t, n: op(n, 2)),
        (a.div.Scalar_mode, lambda op, t, n: op(n, -2, rounding_mode="floor")),
        (a.div.Scalar_mode, lambda op, t, n: op(t, -2.0, rounding_mode="trunc")),
        (a.true_divide.Scalar, lambda op, t, n: op(n, 4)),
        (a.floor_divide.Scalar, lambda op, t, n: op(n, -3)),
        (a.remainder.Scalar, lambda op, t, n: op(t, -1.5)),
        (a.remainder.Scalar_Tensor, lambda op, t, n: op(7, n + 10)),
        (a.fmod.Scalar, lambda op, t, n: op(n, -4)),
        (a.pow.Scalar, lambda op, t, n: op(2.0, t)),
        (a.pow.Tensor_Scalar, lambda op, t, n: op(n, 3)),
        (a.bitwise_and.Scalar_Tensor, lambda op, t, n: op(6, n)),
        (a.bitwise_xor.Scalar, lambda op, t, n: op(n, 5)),
        (a.xlogy.Scalar_Self, lambda op, t, n: op(3, t.abs())),
        (a.xlogy.Scalar_Other, lambda op, t, n: op(t, 2.0)),
        (a.eq.Scalar, lambda op, t, n: op(n, 3.0)),
        (a.clamp.Tensor, lambda op, t, n: op(t, None, t * 0)),
        (a.clamp_min.Tensor, lambda op, t, n: op(n, n * 0)),
        (a.where.Scalar, lambda op, t, n: op(t > 0, 1, 0)),
        (a._to_copy.default, lambda op, t, n: op(t, dtype=torch.int32)),
        (a.to.dtype_layout, lambda op, t, n: op(t, dtype=torch.float16)),
        (a.to.other, lambda op, t, n: op(t, n)),
        (a.alias.default, lambda op, t, n: op(t) + 0),
        (a.copy.default, lambda op, t, n: op(t, n)),
        (a.native_dropout.default, lambda op, t, n: op(t, 0.5, False)),
        (a.log_sigmoid_forward.default, lambda op, t, n: op(t)),
        (a._softmax.default, lambda op, t, n: op(t, 1, False)),
        (a._log_softmax.default, lambda op, t, n: op(t, 0, False)),
        (a.round.decimals, lambda op, t, n: op(t, decimals=1)),
        (a.signbit.default, lambda op, t, n: op(t)),
    ]
    for target, call in calls:
        program = export_and_compare(Fn(lambda t, n, op=target, f=call: f(op, t, n)), (x, i))
        assert target in targets(program), target


def test_dynamic_shapes() -> None:
    batch = torch.export.Dim("batch", min=2)
    model = Fn(lambda t, w: (F.prelu(t, w), F.glu(t, -1), torch.softmax(t, 1), t.clamp(0, 1),
                             torch.where(t > 0, t, 0.0), torch.zeros_like(t).copy_(t[0]),
                             torch.div(t, 2.0, rounding_mode="floor"), t.to(torch.int32)))
    x = torch.randn(3, 4, 6)
    program = export_and_compare(model, (x, torch.rand(4)),
                                 dynamic_shapes=(({0: batch}, None),))
    actual = program(torch.randn(5, 4, 6), torch.rand(4))
    assert actual[0].shape == (5, 4, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_addr_beta_zero_ignores_self_and_broadcasts(dtype: torch.dtype) -> None:
    vec1, vec2 = torch.arange(1, 4).to(dtype), torch.arange(-2, 2).to(dtype)
    if dtype.is_floating_point:
        self_ = torch.tensor([NAN, 1.0, 2.0, 3.0], dtype=dtype)  # broadcast over rows
        beta, alpha = 0.5, 1.5
    else:
        self_ = torch.tensor([1, 0, 1, 0]).to(dtype)
        beta, alpha = (True, True) if dtype == torch.bool else (3, 2)
    export_and_compare(Fn(lambda s, a, b: (torch.addr(s, a, b, beta=0, alpha=alpha),
                                           torch.addr(s, a, b, beta=beta, alpha=alpha))),
                       (self_, vec1, vec2))


def test_float16_chain_keeps_atens_per_op_rounding() -> None:
    # ATen rounds erf(x / sqrt(2)) to float16 (-1 here), so ndtr(-3.97) is exactly 0; ORT would
    # keep the chain in float32 unless each op casts its float32 result back explicitly.
    x = torch.tensor([-3.97265625, -3.89453125, -1.765625, 0.5], dtype=torch.float16)
    export_and_compare(Fn(lambda t: (torch.special.ndtr(t), torch.logit(t.abs() / 4),
                                     torch.add(t, t, alpha=0.3))), (x,))
