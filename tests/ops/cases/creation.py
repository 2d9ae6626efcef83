"""OpInfo cases for tensor creation: arange, full/zeros/ones/empty and variants, linspace, eye."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32, I64, BOOL, F16 = torch.float32, torch.int64, torch.bool, torch.float16
ALL = (F32, I64, BOOL, F16)
FIH = (F32, I64, F16)

CASES = [
    OpTest("arange", covers=(aten.arange.default, aten.arange.start, aten.arange.start_step),
           dtypes=FIH),
    OpTest("full", covers=(aten.full.default,), dtypes=ALL),
    OpTest("full_like", covers=(aten.full_like.default,), dtypes=ALL),
    OpTest("zeros", covers=(aten.zeros.default,), dtypes=ALL),
    OpTest("zeros_like", covers=(aten.zeros_like.default,), dtypes=ALL),
    OpTest("ones", covers=(aten.ones.default,), dtypes=ALL),
    OpTest("ones_like", covers=(aten.ones_like.default,), dtypes=ALL),
    OpTest("new_zeros", covers=(aten.new_zeros.default,), dtypes=ALL),
    OpTest("new_ones", covers=(aten.new_ones.default,), dtypes=ALL),
    OpTest("new_full", covers=(aten.new_full.default,), dtypes=ALL),
    OpTest("scalar_tensor", covers=(aten.scalar_tensor.default,), dtypes=ALL),
    OpTest("linspace", covers=(aten.linspace.default,), dtypes=FIH),
    OpTest("eye", covers=(aten.eye.default, aten.eye.m), dtypes=ALL),
    OpTest("fill", covers=(aten.fill.Scalar,), dtypes=ALL),
    OpTest("zero_", covers=(aten.zero.default, aten.zero_.default), dtypes=ALL),
]
