"""max_pool's output shape in ceil mode, where torch drops a last window that would start in
the right padding (found by the fuzz, seeds in tests/fuzz/test_fuzz.py FIXED).

ONNX's spec drops that window too, but onnx's shape inference does not: a ceil-mode MaxPool
whose declared output shape is torch's fails `check_model(full_check=True)`. Each case runs
the ONNX checker with shape inference and compares ONNX Runtime with eager, in both flavours,
over every (size, kernel, stride, padding, dilation) whose ceil-mode size differs from the
ONNX formula's, in 1, 2 and 3 dims, with and without indices, with static and dynamic batch.
"""

from __future__ import annotations

import io
import itertools
from typing import Any

import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

import onnxport
from tests.helpers import Fn


def export_and_compare(m: torch.nn.Module, args: tuple[torch.Tensor, ...], *, dynamo: bool,
                       others: tuple[torch.Tensor, ...] = (), **kwargs: Any) -> None:
    """Export with either flavour, check with shape inference, and compare ONNX Runtime with
    eager on `args` and on each of `others` (another batch size)."""
    buf = io.BytesIO()
    onnxport.export(m, args, buf, dynamo=dynamo, **kwargs)
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()), full_check=True)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for x in (args[0], *others):
        expected = m(x)
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(torch.from_numpy(a), e)


def _dropped(size: int, k: int, s: int, p: int, d: int) -> bool:
    """torch's ceil mode drops the last window here (ONNX's shape inference keeps it)."""
    span = size + 2 * p - d * (k - 1) - 1
    if span < 0 or p > k // 2:
        return False
    out = -(-span // s) + 1
    return (out - 1) * s >= size + p


_DROPPED = [c for c in itertools.product(range(1, 8), (1, 2, 3), (2, 3), (0, 1), (1, 2))
            if _dropped(*c)]


def test_the_sweep_has_cases() -> None:
    assert len(_DROPPED) >= 20


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("size,k,s,p,d", _DROPPED)
def test_max_pool1d_ceil_mode_dropped_window(size: int, k: int, s: int, p: int, d: int,
                                             dynamo: bool) -> None:
    m = Fn(lambda x: F.max_pool1d(x, k, s, p, d, ceil_mode=True, return_indices=True))
    export_and_compare(m, (torch.randn(2, 3, size),), dynamo=dynamo)


_ND: list[tuple[Any, ...]] = [
    # 2d: one axis drops its last window, the other rounds up (ceil mode needed there).
    (2, (4, 5), (1, 2), (2, 2), (0, 0), (1, 1)),
    (2, (5, 7), (2, 2), (2, 2), (1, 1), (1, 1)),
    (2, (6, 4), (1, 3), (3, 2), (0, 1), (2, 1)),
    # dilation 2: the overhang as end padding would reach the kernel size; ceil mode stays.
    (2, (4, 6), (2, 2), (3, 3), (1, 1), (2, 2)),
    (3, (4, 5, 3), (1, 2, 2), (2, 2, 2), (0, 1, 0), (1, 1, 1)),
    (3, (7, 5, 6), (2, 3, 1), (2, 3, 2), (1, 1, 0), (1, 1, 2)),
]


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("n,sizes,k,s,p,d", _ND)
def test_max_pool_nd_ceil_mode(n: int, sizes: tuple[int, ...], k: Any, s: Any, p: Any, d: Any,
                               dynamo: bool) -> None:
    pool = getattr(F, f"max_pool{n}d")
    m = Fn(lambda x: pool(x, k, s, p, d, ceil_mode=True, return_indices=True))
    export_and_compare(m, (torch.randn(2, 2, *sizes),), dynamo=dynamo)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_max_pool_ceil_mode_dynamic_batch(dynamo: bool) -> None:
    """The fuzz's case: static spatial sizes, dynamic batch (ONNX's inference still sees the
    spatial sizes); the second batch size runs too."""
    class Pool(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.max_pool2d(x, (1, 2), (2, 3), (0, 1), ceil_mode=True)

    m = Pool()
    x = torch.randn(3, 4, 4, 5)
    spec = {"dynamic_shapes": ({0: torch.export.Dim("batch")},)} if dynamo else \
        {"input_names": ["x"], "dynamic_axes": {"x": {0: "batch"}}}
    export_and_compare(m, (x,), dynamo=dynamo, others=(torch.randn(5, 4, 4, 5),), **spec)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_max_pool_ceil_mode_dynamic_spatial_size(dynamo: bool) -> None:
    """Fuzz seed 10654: the last spatial dim dynamic (ceil mode must stay), the first static
    with a dropped window (a Slice cuts it where onnx's shape inference keeps it)."""
    class Pool(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return F.max_pool3d(x, 2, None, (1, 0, 0), ceil_mode=True, return_indices=True)

    x = torch.randn(2, 3, 1, 6, 3)
    spec = {"dynamic_shapes": ({0: torch.export.Dim("batch"), 4: torch.export.Dim("w")},)} \
        if dynamo else {"input_names": ["x"], "dynamic_axes": {"x": {0: "batch", 4: "w"}}}
    export_and_compare(Pool(), (x,), dynamo=dynamo, others=(torch.randn(3, 3, 1, 6, 5),), **spec)
