"""Random ops: exported draws have the right shape, dtype, support and moments, and differ by run.

Values cannot match torch's generator, so each test checks the distribution instead. Sample
sizes make the moment bounds about 5-8 standard errors wide, so a correct translation fails
with negligible probability while a wrong distribution (wrong range, scale or p) cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import Fn
from onnxport.capture.inplace import effective_target

A = torch.ops.aten
N = 20000


def _targets(program: onnxport.ONNXProgram) -> set[Any]:
    """What the translator dispatched on (in-place ops count as their functional variant)."""
    return {effective_target(n) for n in program.exported_program.graph.nodes
            if n.op == "call_function"}


def _export(fn: Callable[..., Any], args: tuple[Any, ...], target: Any,
            **kwargs: Any) -> onnxport.ONNXProgram:
    program = onnxport.export(Fn(fn), args, **kwargs)
    targets = _targets(program)
    assert target in targets, f"{target} was not dispatched; graph has {targets}"
    return program


def _run_twice(program: onnxport.ONNXProgram, args: tuple[Any, ...]) -> tuple[Any, Any]:
    first, second = program(*args), program(*args)
    return first[0] if len(first) == 1 else first, second[0] if len(second) == 1 else second


def _moments(x: torch.Tensor, mean: float, std: float) -> None:
    x = x.double()
    stderr = std / x.numel() ** 0.5
    assert abs(x.mean().item() - mean) < 8 * stderr + 1e-3, x.mean()
    assert abs(x.std().item() - std) < 0.05 * std, x.std()


# -- rand / randn ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_rand(dtype: torch.dtype) -> None:
    zero = torch.zeros((), dtype=dtype)
    program = _export(lambda x: torch.rand(200, 100, dtype=dtype) + x, (zero,), A.rand.default)
    a, b = _run_twice(program, (zero,))
    assert a.shape == (200, 100) and a.dtype == dtype
    assert a.min() >= 0 and a.max() <= 1
    _moments(a, 0.5, (1 / 12) ** 0.5)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_randn(dtype: torch.dtype) -> None:
    program = _export(lambda x: torch.randn(N, dtype=dtype) + x, (torch.zeros((), dtype=dtype),),
                      A.randn.default)
    a, b = _run_twice(program, (torch.zeros((), dtype=dtype),))
    assert a.shape == (N,) and a.dtype == dtype
    _moments(a, 0.0, 1.0)
    assert not torch.equal(a, b)


def test_rand_and_randn_with_a_dynamic_size() -> None:
    def fn(x: torch.Tensor) -> Any:
        return torch.rand(x.shape[0], 50), torch.randn(x.shape[0], 50)

    x = torch.zeros(300)
    program = _export(fn, (x,), A.rand.default,
                      dynamic_shapes=(({0: torch.export.Dim("n", min=2)},),))
    u, z = program(torch.zeros(400))
    assert u.shape == (400, 50) and z.shape == (400, 50)
    assert u.min() >= 0 and u.max() < 1
    _moments(u, 0.5, (1 / 12) ** 0.5)
    _moments(z, 0.0, 1.0)


def test_rand_like_and_randn_like() -> None:
    x = torch.zeros(100, 200, dtype=torch.float64)
    program = _export(lambda x: (torch.rand_like(x), torch.randn_like(x, dtype=torch.float32)),
                      (x,), A.rand_like.default)
    u, z = program(x)
    assert u.dtype == torch.float64 and z.dtype == torch.float32 and u.shape == z.shape == x.shape
    assert u.min() >= 0 and u.max() < 1
    _moments(u, 0.5, (1 / 12) ** 0.5)
    _moments(z, 0.0, 1.0)
    targets = _targets(program)
    assert A.randn_like.default in targets


def test_rand_draws_are_not_merged() -> None:
    # Two identical draws must stay two nodes through the optimizer (no CSE of random ops).
    program = _export(lambda x: torch.rand(1000) - torch.rand(1000) + x, (torch.zeros(()),),
                      A.rand.default)
    (d,) = program(torch.zeros(()))
    assert d.abs().max() > 0


# -- integers --------------------------------------------------------------------------------
def test_randint_and_randint_low() -> None:
    def fn(x: torch.Tensor) -> Any:
        return torch.randint(7, (N,)) + x, torch.randint(-3, 4, (N,), dtype=torch.int32)

    program = _export(fn, (torch.zeros((), dtype=torch.int64),), A.randint.default)
    a, b = program(torch.zeros((), dtype=torch.int64))
    assert a.dtype == torch.int64 and b.dtype == torch.int32
    assert set(a.unique().tolist()) == set(range(7))
    assert set(b.unique().tolist()) == set(range(-3, 4))
    _moments(a, 3.0, (48 / 12) ** 0.5)
    assert A.randint.low in _targets(program)


def test_randint_like() -> None:
    x = torch.zeros(N)
    program = _export(lambda x: (torch.randint_like(x, 3, 8), torch.randint_like(x, 5)), (x,),
                      A.randint_like.low_dtype)
    a, b = program(x)
    assert a.dtype == torch.float32 and a.shape == x.shape
    assert set(a.unique().tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}
    assert set(b.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    assert A.randint_like.default in _targets(program)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_randperm(dtype: torch.dtype) -> None:
    zero = torch.zeros((), dtype=dtype)
    program = _export(lambda x: torch.randperm(50, dtype=dtype) + x, (zero,), A.randperm.default)
    a, b = _run_twice(program, (zero,))
    assert a.dtype == dtype and a.shape == (50,)
    assert torch.equal(a.sort().values, torch.arange(50, dtype=dtype))
    assert not torch.equal(a, b)


def test_randperm_dynamic_n() -> None:
    program = _export(lambda x: torch.randperm(x.shape[0]), (torch.zeros(10),), A.randperm.default,
                      dynamic_shapes=(({0: torch.export.Dim("n", min=2)},),))
    (a,) = program(torch.zeros(33))
    assert torch.equal(a.sort().values, torch.arange(33))


# -- bernoulli, normal, uniform, exponential -------------------------------------------------
def test_bernoulli_variants() -> None:
    p = torch.full((N,), 0.3)
    q = torch.full((N,), 0.8, dtype=torch.float64)

    def fn(p: torch.Tensor, q: torch.Tensor) -> Any:
        return torch.bernoulli(p), torch.bernoulli(p, 0.6), p.clone().bernoulli_(q)

    program = _export(fn, (p, q), A.bernoulli.default)
    targets = _targets(program)
    assert A.bernoulli.p in targets and A.bernoulli.Tensor in targets
    a, b, c = program(p, q)
    for x, prob in ((a, 0.3), (b, 0.6), (c, 0.8)):
        assert x.dtype == torch.float32 and x.shape == (N,)
        assert set(x.unique().tolist()) <= {0.0, 1.0}
        _moments(x, prob, (prob * (1 - prob)) ** 0.5)


def test_bernoulli_follows_elementwise_probabilities() -> None:
    p = torch.tensor([0.0, 1.0]).repeat(N // 2)
    program = _export(lambda p: torch.bernoulli(p), (p,), A.bernoulli.default)
    (x,) = program(p)
    assert torch.equal(x, p)


def test_normal_variants() -> None:
    mean = torch.full((N,), 2.0)
    std = torch.full((N,), 3.0)

    def fn(mean: torch.Tensor, std: torch.Tensor) -> Any:
        return (torch.normal(mean, 0.5), torch.normal(-1.0, std), torch.normal(mean, std[:1]),
                torch.normal(4.0, 2.0, (N,)), mean.clone().normal_(1.0, 0.25))

    program = _export(fn, (mean, std), A.normal.Tensor_float)
    targets = _targets(program)
    for t in (A.normal.float_Tensor, A.normal.Tensor_Tensor, A.normal.float_float,
              A.normal_functional.default):
        assert t in targets, t
    outs = program(mean, std)
    for x, (m, s) in zip(outs, [(2.0, 0.5), (-1.0, 3.0), (2.0, 3.0), (4.0, 2.0), (1.0, 0.25)]):
        assert x.shape == (N,) and x.dtype == torch.float32
        _moments(x, m, s)


def test_uniform_and_exponential() -> None:
    x = torch.zeros(N, dtype=torch.float16)

    def fn(x: torch.Tensor) -> Any:
        return x.clone().uniform_(-2.0, 3.0), x.clone().float().exponential_(0.5)

    program = _export(fn, (x,), A.uniform.default)
    assert A.exponential.default in _targets(program)
    u, e = program(x)
    assert u.dtype == torch.float16 and u.min() >= -2 and u.max() <= 3
    _moments(u, 0.5, (25 / 12) ** 0.5)
    assert e.min() >= 0
    _moments(e, 2.0, 2.0)


def test_cauchy_log_normal_and_geometric() -> None:
    x = torch.zeros(N)

    def fn(x: torch.Tensor) -> Any:
        return (x.clone().cauchy_(1.0, 2.0), x.clone().log_normal_(0.5, 0.25),
                x.clone().geometric_(0.3))

    program = _export(fn, (x,), A.cauchy.default)
    assert {A.log_normal.default, A.geometric.default} <= _targets(program)
    c, ln, geo = program(x)
    # Cauchy has no moments: its median is 1 and its quartiles are 1 -+ 2.
    q = torch.quantile(c.double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(q, torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.15), q
    assert ln.min() > 0
    _moments(ln.log(), 0.5, 0.25)
    assert geo.min() >= 1 and bool((geo == geo.round()).all())
    _moments(geo, 1 / 0.3, (0.7 ** 0.5) / 0.3)


def test_rrelu_eval_matches_and_training_draws_slopes() -> None:
    x = torch.linspace(-4, 4, N)

    def rrelu(training: bool) -> Fn:
        return Fn(lambda x: torch.nn.functional.rrelu(x, 0.1, 0.3, training=training))

    eval_program = onnxport.export(rrelu(False), (x,))
    torch.testing.assert_close(eval_program(x)[0], rrelu(False)(x))
    train_program = onnxport.export(rrelu(True), (x,))
    y = train_program(x)[0]
    positive = x >= 0
    torch.testing.assert_close(y[positive], x[positive])
    slopes = y[~positive & (x < -0.1)] / x[~positive & (x < -0.1)]
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    _moments(slopes, 0.2, 0.2 / 12 ** 0.5)


# -- dropout in training mode ----------------------------------------------------------------
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_training_mask_and_scale(p: float) -> None:
    x = torch.rand(N) + 1.0
    program = _export(lambda x: torch.nn.functional.dropout(x, p, training=True), (x,),
                      A.dropout.default)
    a, b = _run_twice(program, (x,))
    dropped = a == 0
    _moments(dropped.float(), p, (p * (1 - p)) ** 0.5)
    torch.testing.assert_close(a[~dropped], x[~dropped] / (1 - p))
    assert not torch.equal(a, b)


def test_dropout_training_p_one_and_eval_mode() -> None:
    x = torch.randn(100)

    def fn(x: torch.Tensor) -> Any:
        return (torch.nn.functional.dropout(x, 1.0, training=True),
                torch.nn.functional.dropout(x, 0.5, training=False))

    program = _export(fn, (x,), A.dropout.default)
    zeros, same = program(x)
    assert torch.equal(zeros, torch.zeros(100))
    assert torch.equal(same, x)


def test_native_dropout_training() -> None:
    x = torch.rand(N) + 1.0
    program = _export(lambda x: A.native_dropout(x, 0.25, True), (x,), A.native_dropout.default)
    out, mask = program(x)
    assert mask.dtype == torch.bool and mask.shape == x.shape
    _moments(mask.float(), 0.75, (0.75 * 0.25) ** 0.5)
    torch.testing.assert_close(out, x * mask / 0.75)


def test_feature_dropout_drops_whole_channels() -> None:
    x = torch.rand(40, 50, 6, 7) + 1.0
    program = _export(lambda x: A.feature_dropout(x, 0.4, True), (x,), A.feature_dropout.default)
    (out,) = program(x)
    dropped = (out == 0).flatten(2)
    assert torch.all(dropped.all(-1) | ~dropped.any(-1)), "a channel was partly dropped"
    _moments(dropped[..., 0].float(), 0.4, (0.4 * 0.6) ** 0.5)
    kept = ~dropped.all(-1)
    torch.testing.assert_close(out.flatten(2)[kept], x.flatten(2)[kept] / 0.6)


def test_alpha_dropout_training() -> None:
    p, alpha = 0.3, 1.7580993408473766
    a = 1.0 / ((alpha * alpha * p + 1) * (1 - p)) ** 0.5
    x = torch.randn(N)
    program = _export(lambda x: A.alpha_dropout(x, p, True), (x,), A.alpha_dropout.default)
    (out,) = program(x)
    kept = torch.isclose(out, x * a + alpha * a * p, rtol=1e-5, atol=1e-6)
    dropped = torch.isclose(out, torch.tensor(alpha * a * (p - 1)), rtol=1e-5, atol=1e-6)
    assert torch.all(kept | dropped)
    _moments(dropped.float(), p, (p * (1 - p)) ** 0.5)
    # Alpha dropout keeps a standard normal input's mean and variance.
    _moments(out, 0.0, 1.0)


def test_multinomial_with_replacement() -> None:
    weights = torch.tensor([[1.0, 2.0, 7.0, 0.0], [5.0, 0.0, 0.0, 5.0]])
    program = _export(lambda w: torch.multinomial(w, N, replacement=True), (weights,),
                      A.multinomial.default)
    (samples,) = program(weights)
    assert samples.dtype == torch.int64 and samples.shape == (2, N)
    for row, probs in zip(samples, (weights / weights.sum(-1, keepdim=True))):
        freq = torch.bincount(row, minlength=4).double() / N
        assert torch.all((freq - probs.double()).abs() < 0.02), freq


def test_multinomial_without_replacement() -> None:
    weights = torch.tensor([0.0, 3.0, 1.0, 0.0, 6.0])
    program = _export(lambda w: torch.multinomial(w, 3), (weights,), A.multinomial.default)
    firsts = []
    for _ in range(400):
        (sample,) = program(weights)
        assert sample.shape == (3,) and sorted(sample.tolist()) == [1, 2, 4]
        firsts.append(int(sample[0]))
    # The first draw follows the weights: P(4) = 0.6, P(1) = 0.3, P(2) = 0.1.
    freq = torch.bincount(torch.tensor(firsts), minlength=5).double() / 400
    assert abs(freq[4] - 0.6) < 0.1 and abs(freq[1] - 0.3) < 0.1, freq


def test_dropout_training_with_a_dynamic_batch() -> None:
    x = torch.rand(8, 50) + 1.0
    program = _export(lambda x: (torch.nn.functional.dropout(x, 0.5, training=True),
                                 A.feature_dropout(x[..., None], 0.5, True)), (x,),
                      A.dropout.default, dynamic_shapes=(({0: torch.export.Dim("n", min=2)},),))
    y = torch.rand(400, 50) + 1.0
    out, channels = program(y)
    assert out.shape == y.shape and channels.shape == (400, 50, 1)
    dropped = out == 0
    _moments(dropped.float(), 0.5, 0.5)
    torch.testing.assert_close(out[~dropped], y[~dropped] * 2)
