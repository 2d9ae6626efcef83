"""Random sampling: rand/randn/randint/randperm (+ _like), bernoulli, normal, uniform,
exponential, multinomial, and dropout in training mode.

ONNX random ops take no seed here, so every run of the model draws new numbers, as eager
PyTorch does with its global generator; values cannot match torch's, only distributions.
Samples are drawn in float32 (float64 for float64 outputs) and cast: ONNX Runtime's
RandomUniform/RandomNormal kernels exist only for float and double. Shapes known at export
time use RandomUniform/RandomNormal; symbolic shapes use the *Like variants on a
ConstantOfShape. `Bernoulli` is avoided on purpose: onnx-ir's common-subexpression pass
does not know it is random and would merge two identical draws; `RandomUniformLike` < p is
the same distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, rank
from onnxport.ops.shape import shape_of, static_shape
from onnxport.translate import GraphBuilder, Tensor, aten, register

_FLOAT = ir.DataType.FLOAT
_DOUBLE = ir.DataType.DOUBLE


def _sample_dtype(dtype: ir.DataType) -> ir.DataType:
    return _DOUBLE if dtype == _DOUBLE else _FLOAT


def _draw(g: GraphBuilder, kind: str, shape: Sequence[Any] | Tensor, dtype: ir.DataType) -> Tensor:
    """Uniform [0, 1) (`kind="Uniform"`) or standard normal samples of `shape` in `dtype`."""
    sample = _sample_dtype(dtype)
    if not isinstance(shape, ir.Value) and all(not isinstance(s, ir.Value) for s in shape):
        return g.op(f"Random{kind}", dtype=sample, shape=[int(s) for s in shape])
    zeros = g.op("ConstantOfShape", int_list(g, shape), value=ir.tensor([0.0], dtype=sample))
    return g.op(f"Random{kind}Like", zeros, dtype=sample)


def _draw_like(g: GraphBuilder, kind: str, x: Tensor, dtype: ir.DataType) -> Tensor:
    """Samples with the shape of `x`."""
    shape = static_shape(x)
    return _draw(g, kind, shape if shape is not None else g.op("Shape", x), dtype)


# -- rand / randn ----------------------------------------------------------------------------
@register(aten.rand.default)
def aten_rand(g: GraphBuilder, size: Sequence[Any], *, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None) -> Tensor:
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    out = g.out_dtype()
    return cast(g, _draw(g, "Uniform", size, out), out)


@register(aten.randn.default)
def aten_randn(g: GraphBuilder, size: Sequence[Any], *, dtype: Any = None, layout: Any = None,
               device: Any = None, pin_memory: Any = None) -> Tensor:
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    out = g.out_dtype()
    return cast(g, _draw(g, "Normal", size, out), out)


@register(aten.rand_like.default)
def aten_rand_like(g: GraphBuilder, self: Tensor, *, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None, memory_format: Any = None) -> Tensor:
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    out = g.out_dtype()
    return cast(g, _draw_like(g, "Uniform", self, out), out)


@register(aten.randn_like.default)
def aten_randn_like(g: GraphBuilder, self: Tensor, *, dtype: Any = None, layout: Any = None,
                    device: Any = None, pin_memory: Any = None,
                    memory_format: Any = None) -> Tensor:
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    out = g.out_dtype()
    return cast(g, _draw_like(g, "Normal", self, out), out)


# -- integers --------------------------------------------------------------------------------
def _double(g: GraphBuilder, x: Any) -> Tensor:
    return cast(g, x, _DOUBLE) if isinstance(x, ir.Value) else g.const(float(x), _DOUBLE)


def _randint(g: GraphBuilder, uniform: Tensor, low: Any, high: Any, dtype: ir.DataType) -> Tensor:
    """floor(U * (high - low)) + low, computed in float64 so ranges up to 2**53 stay exact."""
    low_d, high_d = _double(g, low), _double(g, high)
    span = g.op("Sub", high_d, low_d)
    value = g.op("Add", g.op("Floor", g.op("Mul", cast(g, uniform, _DOUBLE), span)), low_d)
    # U < 1 but U * span may round up to span; the largest legal value is high - 1.
    value = g.op("Min", value, g.op("Sub", high_d, g.const(1.0, _DOUBLE)))
    return cast(g, value, dtype)  # type: ignore[no-any-return]


@register(aten.randint.default)
def aten_randint(g: GraphBuilder, high: Any, size: Sequence[Any], *, dtype: Any = 4,
                 layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """randint(SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _randint(g, _draw(g, "Uniform", size, _DOUBLE), 0, high, g.out_dtype())


@register(aten.randint.low)
def aten_randint_low(g: GraphBuilder, low: Any, high: Any, size: Sequence[Any], *, dtype: Any = 4,
                     layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _randint(g, _draw(g, "Uniform", size, _DOUBLE), low, high, g.out_dtype())


@register(aten.randint_like.default)
def aten_randint_like(g: GraphBuilder, self: Tensor, high: Any, *, dtype: Any = None,
                      layout: Any = None, device: Any = None, pin_memory: Any = None,
                      memory_format: Any = None) -> Tensor:
    """randint_like(Tensor self, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _randint(g, _draw_like(g, "Uniform", self, _DOUBLE), 0, high, g.out_dtype())


@register(aten.randint_like.Tensor)
def aten_randint_like_tensor(g: GraphBuilder, self: Tensor, high: Tensor, *, dtype: Any = None,
                             layout: Any = None, device: Any = None, pin_memory: Any = None,
                             memory_format: Any = None) -> Tensor:
    """randint_like.Tensor(Tensor self, Tensor high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    high_scalar = g.op("Reshape", high, g.const([], ir.DataType.INT64))
    return _randint(g, _draw_like(g, "Uniform", self, _DOUBLE), 0, high_scalar, g.out_dtype())


@register(aten.randint_like.low_dtype)
def aten_randint_like_low_dtype(g: GraphBuilder, self: Tensor, low: Any, high: Any, *,
                                dtype: Any = None, layout: Any = None, device: Any = None,
                                pin_memory: Any = None, memory_format: Any = None) -> Tensor:
    """randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _randint(g, _draw_like(g, "Uniform", self, _DOUBLE), low, high, g.out_dtype())


@register(aten.randperm.default)
def aten_randperm(g: GraphBuilder, n: Any, *, dtype: Any = 4, layout: Any = None,
                  device: Any = None, pin_memory: Any = None) -> Tensor:
    """randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    # The ranks of n i.i.d. uniform keys are a uniformly random permutation.
    keys = _draw(g, "Uniform", [n], _FLOAT)
    k = int_list(g, [n])
    _, order = g.op("TopK", keys, k, axis=0, largest=1, sorted=1, outputs=2)
    return cast(g, order, g.out_dtype())


# -- distributions parameterised by tensors --------------------------------------------------
def _compute(dtype: ir.DataType) -> ir.DataType:
    """The dtype arithmetic on samples runs in (ORT lacks float16 kernels for some ops)."""
    return dtype if dtype in (_FLOAT, _DOUBLE) else _FLOAT


def _below(g: GraphBuilder, x: Tensor, p: Any) -> Tensor:
    """A bool mask with the shape of `x`, True with probability `p` (float or tensor)."""
    uniform = _draw_like(g, "Uniform", x, _FLOAT)
    threshold = cast(g, p, _FLOAT) if isinstance(p, ir.Value) else g.const(float(p), _FLOAT)
    return g.op("Less", uniform, threshold)


@register(aten.bernoulli.default)
def aten_bernoulli(g: GraphBuilder, self: Tensor, *, generator: Any = None) -> Tensor:
    """bernoulli(Tensor self, *, Generator? generator=None) -> Tensor"""
    return cast(g, _below(g, self, self), g.out_dtype())


@register(aten.bernoulli.p)
def aten_bernoulli_p(g: GraphBuilder, self: Tensor, p: float, *, generator: Any = None) -> Tensor:
    """bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    return cast(g, _below(g, self, p), g.out_dtype())


@register(aten.bernoulli.Tensor)
def aten_bernoulli_tensor(g: GraphBuilder, self: Tensor, p: Tensor, *,
                          generator: Any = None) -> Tensor:
    """bernoulli.Tensor(Tensor self, Tensor p, *, Generator? generator=None) -> Tensor"""
    return cast(g, _below(g, self, p), g.out_dtype())


def _scaled_normal(g: GraphBuilder, like: Tensor, mean: Any, std: Any) -> Tensor:
    """mean + std * N(0, 1) with the shape of `like`, in the node's output dtype."""
    out = g.out_dtype()
    dtype = _compute(out)
    noise = cast(g, _draw_like(g, "Normal", like, dtype), dtype)
    std_v = cast(g, std, dtype) if isinstance(std, ir.Value) else g.const(float(std), dtype)
    mean_v = cast(g, mean, dtype) if isinstance(mean, ir.Value) else g.const(float(mean), dtype)
    return cast(g, g.op("Add", g.op("Mul", noise, std_v), mean_v), out)


@register(aten.normal.Tensor_float)
def aten_normal_tensor_float(g: GraphBuilder, mean: Tensor, std: float = 1.0, *,
                             generator: Any = None) -> Tensor:
    """normal.Tensor_float(Tensor mean, float std=1., *, Generator? generator=None) -> Tensor"""
    return _scaled_normal(g, mean, mean, std)


@register(aten.normal.float_Tensor)
def aten_normal_float_tensor(g: GraphBuilder, mean: float, std: Tensor, *,
                             generator: Any = None) -> Tensor:
    """normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    return _scaled_normal(g, std, mean, std)


@register(aten.normal.Tensor_Tensor)
def aten_normal_tensor_tensor(g: GraphBuilder, mean: Tensor, std: Tensor, *,
                              generator: Any = None) -> Tensor:
    """normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    # The samples take the broadcast shape of mean and std.
    both = g.op("Add", cast(g, mean, _FLOAT), cast(g, std, _FLOAT))
    return _scaled_normal(g, both, mean, std)


@register(aten.normal.float_float)
def aten_normal_float_float(g: GraphBuilder, mean: float, std: float, size: Sequence[Any], *,
                            generator: Any = None, dtype: Any = None, layout: Any = None,
                            device: Any = None, pin_memory: Any = None) -> Tensor:
    """normal.float_float(float mean, float std, SymInt[] size, *, Generator? generator=None, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    out = g.out_dtype()
    dtype_c = _compute(out)
    noise = cast(g, _draw(g, "Normal", size, dtype_c), dtype_c)
    scaled = g.op("Add", g.op("Mul", noise, g.const(float(std), dtype_c)),
                  g.const(float(mean), dtype_c))
    return cast(g, scaled, out)


@register(aten.normal_functional.default)
def aten_normal_functional(g: GraphBuilder, self: Tensor, mean: float = 0.0, std: float = 1.0, *,
                           generator: Any = None) -> Tensor:
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor"""  # noqa: E501
    return _scaled_normal(g, self, mean, std)


@register(aten.uniform.default)
def aten_uniform(g: GraphBuilder, self: Tensor, from_: float = 0.0, to: float = 1.0, *,
                 generator: Any = None) -> Tensor:
    """uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor"""
    out = g.out_dtype()
    dtype = _compute(out)
    sample = cast(g, _draw_like(g, "Uniform", self, dtype), dtype)
    scaled = g.op("Add", g.op("Mul", sample, g.const(float(to) - float(from_), dtype)),
                  g.const(float(from_), dtype))
    return cast(g, scaled, out)


@register(aten.exponential.default)
def aten_exponential(g: GraphBuilder, self: Tensor, lambd: float = 1.0, *,
                     generator: Any = None) -> Tensor:
    """exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor"""
    out = g.out_dtype()
    dtype = _compute(out)
    sample = cast(g, _draw_like(g, "Uniform", self, dtype), dtype)
    # Inverse CDF; 1 - U lies in (0, 1], so the log is finite.
    neg_log = g.op("Neg", g.op("Log", g.op("Sub", g.const(1.0, dtype), sample)))
    return cast(g, g.op("Div", neg_log, g.const(float(lambd), dtype)), out)


def _uniform_open(g: GraphBuilder, like: Tensor, dtype: ir.DataType) -> Tensor:
    """U(0, 1) samples shaped like `like`, excluding 0 (1 - U for U in [0, 1))."""
    return g.op("Sub", g.const(1.0, dtype), cast(g, _draw_like(g, "Uniform", like, dtype), dtype))


@register(aten.cauchy.default)
def aten_cauchy(g: GraphBuilder, self: Tensor, median: float = 0.0, sigma: float = 1.0, *,
                generator: Any = None) -> Tensor:
    """cauchy(Tensor self, float median=0., float sigma=1., *, Generator? generator=None) -> Tensor"""
    out = g.out_dtype()
    dtype = _compute(out)
    # Inverse CDF: median + sigma * tan(pi * (U - 1/2)).
    centred = g.op("Sub", _uniform_open(g, self, dtype), g.const(0.5, dtype))
    tan = g.op("Tan", g.op("Mul", centred, g.const(math.pi, dtype)))
    return cast(g, g.op("Add", g.op("Mul", tan, g.const(float(sigma), dtype)),
                        g.const(float(median), dtype)), out)


@register(aten.log_normal.default)
def aten_log_normal(g: GraphBuilder, self: Tensor, mean: float = 1.0, std: float = 2.0, *,
                    generator: Any = None) -> Tensor:
    """log_normal(Tensor self, float mean=1., float std=2., *, Generator? generator=None) -> Tensor"""
    out = g.out_dtype()
    dtype = _compute(out)
    noise = cast(g, _draw_like(g, "Normal", self, dtype), dtype)
    normal = g.op("Add", g.op("Mul", noise, g.const(float(std), dtype)), g.const(float(mean), dtype))
    return cast(g, g.op("Exp", normal), out)


@register(aten.geometric.default)
def aten_geometric(g: GraphBuilder, self: Tensor, p: float, *, generator: Any = None) -> Tensor:
    """geometric(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    out = g.out_dtype()
    dtype = _compute(out)
    # Trials until the first success, support {1, 2, ...}: ceil(log(U) / log(1 - p)).
    log_u = g.op("Log", _uniform_open(g, self, dtype))
    trials = g.op("Ceil", g.op("Div", log_u, g.const(math.log1p(-float(p)), dtype)))
    return cast(g, g.op("Max", trials, g.const(1.0, dtype)), out)


@register(aten.rrelu_with_noise_functional.default)
def aten_rrelu_with_noise_functional(g: GraphBuilder, self: Tensor, noise: Tensor,
                                     lower: float = 0.125, upper: float = 1.0 / 3.0,
                                     training: bool = False,
                                     generator: Any = None) -> tuple[Tensor, Tensor]:
    """rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)"""  # noqa: E501
    dtype = _compute(self.dtype)
    x = cast(g, self, dtype)
    positive = g.op("GreaterOrEqual", x, g.const(0.0, dtype))
    if not training:
        slope = g.const((float(lower) + float(upper)) / 2, dtype)
        return cast(g, g.op("Where", positive, x, g.op("Mul", x, slope)), self.dtype), noise
    # Training: a slope drawn from U(lower, upper) per negative element; noise records it.
    sample = cast(g, _draw_like(g, "Uniform", self, dtype), dtype)
    slope = g.op("Add", g.op("Mul", sample, g.const(float(upper) - float(lower), dtype)),
                 g.const(float(lower), dtype))
    slope = g.op("Where", positive, g.const(1.0, dtype), slope)
    return (cast(g, g.op("Mul", x, slope), self.dtype), cast(g, slope, noise.dtype))


@register(aten.multinomial.default)
def aten_multinomial(g: GraphBuilder, self: Tensor, num_samples: Any, replacement: bool = False, *,
                     generator: Any = None) -> Tensor:
    """multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor"""  # noqa: E501
    if isinstance(num_samples, ir.Value):
        raise TranslationError("multinomial with a symbolic num_samples")
    is_vector = rank(self) == 1
    weights = self if not is_vector else g.op("Unsqueeze", self, g.const([0], ir.DataType.INT64))
    # torch takes unnormalized probabilities; both ONNX paths work on their logs.
    logits = g.op("Log", cast(g, weights, _FLOAT))
    if replacement:
        samples = g.op("Multinomial", logits, sample_size=int(num_samples),
                       dtype=ir.DataType.INT64)
    else:
        # Gumbel-top-k: the k largest of log(p) + Gumbel noise, in order, are distributed as
        # k draws without replacement in draw order.
        uniform = _draw_like(g, "Uniform", weights, _FLOAT)
        gumbel = g.op("Neg", g.op("Log", g.op("Neg", g.op("Log", uniform))))
        keys = g.op("Add", logits, gumbel)
        _, samples = g.op("TopK", keys, g.const([int(num_samples)], ir.DataType.INT64), axis=-1,
                          largest=1, sorted=1, outputs=2)
    if is_vector:
        samples = g.op("Squeeze", samples, g.const([0], ir.DataType.INT64))
    return cast(g, samples, g.out_dtype())


# -- dropout in training mode ----------------------------------------------------------------
_SELU_ALPHA = 1.7580993408473766  # torch's alpha_dropout constant (-SELU scale * alpha)


def dropout_train(g: GraphBuilder, input: Tensor, p: float, *, is_feature: bool = False,
                  is_alpha: bool = False) -> tuple[Tensor, Tensor]:
    """Training-mode dropout as torch computes it: (output, keep mask as bool).

    Each element (each channel for feature dropout) is kept with probability 1 - p and
    scaled by 1 / (1 - p); alpha dropout instead maps dropped elements to SELU's negative
    saturation and applies the affine correction that keeps mean and variance.
    """
    dtype = input.dtype
    assert dtype is not None
    compute = _compute(dtype)
    if p >= 1:
        # torch multiplies by zeros, so NaN/inf inputs stay NaN.
        zeros = g.op("Mul", input, g.const(0, dtype))
        keep = g.op("ConstantOfShape", shape_of(g, input),
                    value=ir.tensor([False], dtype=ir.DataType.BOOL))
        return zeros, keep
    if is_feature and rank(input) >= 2:
        # One draw per (batch, channel): the rest of the dims broadcast.
        shape = static_shape(input)
        r = rank(input)
        if shape is not None:
            noise_shape: Any = [*shape[:2], *([1] * (r - 2))]
        else:
            noise_shape = g.op("Concat", g.op("Shape", input, start=0, end=2),
                               g.const([1] * (r - 2), ir.DataType.INT64), axis=0)
        uniform = _draw(g, "Uniform", noise_shape, _FLOAT)
        keep = g.op("Less", uniform, g.const(1.0 - p, _FLOAT))
        keep_full = g.op("Expand", keep, shape_of(g, input))
    else:
        keep = _below(g, input, 1.0 - p)
        keep_full = keep
    x = cast(g, input, compute)
    noise = cast(g, keep, compute)
    if is_alpha:
        a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p))
        b = g.op("Add", g.op("Mul", g.op("Sub", noise, g.const(1.0, compute)),
                             g.const(_SELU_ALPHA * a, compute)),
                 g.const(_SELU_ALPHA * a * p, compute))
        out = g.op("Add", g.op("Mul", x, g.op("Mul", noise, g.const(a, compute))), b)
    else:
        out = g.op("Mul", x, g.op("Mul", noise, g.const(1.0 / (1.0 - p), compute)))
    return cast(g, out, dtype), keep_full
