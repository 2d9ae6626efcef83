"""quantized_decomposed ops one by one: dtypes, schemes, axes, overloads, narrow ranges.

Integers are compared with eager within one step, >= 99% exact (`_helpers`: x / scale vs
x * (1 / scale) at rounding ties); dequantized floats within 1e-6 relative (same float32
formula)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import onnxport
from tests.quantization import _helpers as h

qd = torch.ops.quantized_decomposed


class Fn(torch.nn.Module):
    def __init__(self, fn, **buffers: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, *args):
        return self.fn(self, *args)


def _compare(module: torch.nn.Module, args: tuple[torch.Tensor, ...], **kw) -> collections.Counter:
    prog = onnxport.export(module, args, **kw)
    fresh = tuple(torch.randn_like(a) * 3 for a in args)
    want = module(*fresh)
    want = want if isinstance(want, tuple) else (want,)
    got = h.run_ort(h.ort_session(prog.model_proto), fresh)
    for w, g in zip(want, got):
        assert str(w.dtype).split(".")[-1] == str(g.dtype) or w.dtype == torch.float32
        if w.dtype.is_floating_point:
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)
        else:
            diff = np.abs(g.astype(np.int64) - w.numpy().astype(np.int64))
            assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, diff.max()
    return collections.Counter(n.op_type for n in prog.model_proto.graph.node)


@pytest.mark.parametrize("dtype,zp,qmin,qmax", [
    (torch.uint8, 128, 0, 255), (torch.int8, 0, -128, 127), (torch.int8, 5, -127, 127),
    (torch.uint8, 3, 10, 200), (torch.int8, -4, -8, 7)])
def test_quantize_dequantize_per_tensor(dtype, zp, qmin, qmax) -> None:
    def fn(self, x):
        q = qd.quantize_per_tensor(x, 0.05, zp, qmin, qmax, dtype)
        return q, qd.dequantize_per_tensor(q, 0.05, zp, qmin, qmax, dtype)

    ops = _compare(Fn(fn), (torch.randn(3, 50),))
    narrow = (qmin, qmax) != (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 1
    assert ops["Clip"] == int(narrow)  # the clamp only where the range is narrower


@pytest.mark.parametrize("overload", ["tensor", "tensor2"])
def test_tensor_overloads(overload) -> None:
    def fn(self, x):
        if overload == "tensor":
            q = qd.quantize_per_tensor.tensor(x, self.s, self.z, -100, 100, torch.int8)
            return qd.dequantize_per_tensor.tensor(q, self.s, self.z, -100, 100, torch.int8)
        q = qd.quantize_per_tensor.tensor2(x, self.s, self.z, self.lo, self.hi, torch.int8)
        return qd.dequantize_per_tensor.tensor2(q, self.s, self.z, self.lo, self.hi, torch.int8)

    module = Fn(fn, s=torch.tensor([0.02], dtype=torch.float64), z=torch.tensor([-3]),
                lo=torch.tensor(-100), hi=torch.tensor(100))
    ops = _compare(module, (torch.randn(4, 40),))
    assert ops["Clip"] == 1


def test_dequantize_out_dtype() -> None:
    def fn(self, x):
        q = qd.quantize_per_tensor(x, 0.1, 0, -128, 127, torch.int8)
        return qd.dequantize_per_tensor(q, 0.1, 0, -128, 127, torch.int8,
                                        out_dtype=torch.float16).float()

    _compare(Fn(fn), (torch.randn(2, 30),))


@pytest.mark.parametrize("axis", [0, 1, 3])
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_per_channel(axis, dtype) -> None:
    n = (2, 5, 3, 4)[axis]
    zp = torch.arange(n) % 3 + (0 if dtype == torch.int8 else 120)
    lo, hi = (-127, 127) if dtype == torch.int8 else (0, 255)

    def fn(self, x):
        q = qd.quantize_per_channel(x, self.s, self.z, axis, lo, hi, dtype)
        return q, qd.dequantize_per_channel(q, self.s, self.z, axis, lo, hi, dtype)

    module = Fn(fn, s=torch.rand(n) * 0.05 + 0.01, z=zp)
    ops = _compare(module, (torch.randn(2, 5, 3, 4),))
    assert ops["QuantizeLinear"] == 1 and ops["Clip"] == int(dtype == torch.int8)


def test_dequantize_per_channel_without_zero_point() -> None:
    def fn(self, x):
        q = qd.quantize_per_channel(x, self.s, self.z, 1, -128, 127, torch.int8)
        return qd.dequantize_per_channel(q, self.s, None, 1, -128, 127, torch.int8)

    _compare(Fn(fn, s=torch.rand(6) * 0.05 + 0.01, z=torch.zeros(6, dtype=torch.int64)),
             (torch.randn(3, 6),))


@pytest.mark.parametrize("dtype,qmin,qmax", [(torch.uint8, 0, 255), (torch.int8, -128, 127),
                                              (torch.uint8, 0, 127), (torch.int8, -127, 127)])
def test_choose_qparams(dtype, qmin, qmax) -> None:
    eps = torch.finfo(torch.float32).eps

    def fn(self, x):
        s, z = qd.choose_qparams.tensor(x, qmin, qmax, eps, dtype)
        q = qd.quantize_per_tensor.tensor(x, s, z, qmin, qmax, dtype)
        return s.float(), z, qd.dequantize_per_tensor.tensor(q, s, z, qmin, qmax, dtype)

    ops = _compare(Fn(fn), (torch.randn(3, 40) + 0.5,))
    full = (qmin, qmax) in ((0, 255), (-128, 127))
    assert ops["DynamicQuantizeLinear"] == int(full)


@pytest.mark.parametrize("dtype,qmin,qmax", [(torch.int8, -128, 127), (torch.uint8, 0, 255)])
def test_choose_qparams_symmetric(dtype, qmin, qmax) -> None:
    eps = torch.finfo(torch.float32).eps

    def fn(self, x):
        s, z = qd.choose_qparams_symmetric.tensor(x, qmin, qmax, eps, dtype)
        q = qd.quantize_per_tensor.tensor(x, s, z, qmin, qmax, dtype)
        return s.float(), z, qd.dequantize_per_tensor.tensor(q, s, z, qmin, qmax, dtype)

    _compare(Fn(fn), (torch.randn(3, 40),))


def test_int16_needs_opset_21() -> None:
    def fn(self, x):
        q = qd.quantize_per_tensor(x, 0.001, 0, -32768, 32767, torch.int16)
        return qd.dequantize_per_tensor(q, 0.001, 0, -32768, 32767, torch.int16)

    with pytest.raises(onnxport.OnnxExporterError, match="opset 21"):
        onnxport.export(Fn(fn), (torch.randn(2, 8),), opset_version=18)
    ops = _compare(Fn(fn), (torch.randn(2, 8),), opset_version=21)
    assert ops["QuantizeLinear"] == 1
