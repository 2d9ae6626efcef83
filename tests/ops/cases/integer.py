"""OpInfo cases for integer arithmetic: gcd, lcm, bit shifts, bincount."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

CASES = [
    OpTest("gcd", covers=(aten.gcd.default,), dtypes=INTS),
    OpTest("lcm", covers=(aten.lcm.default,), dtypes=INTS),
    OpTest("bitwise_left_shift", covers=(aten.bitwise_left_shift.Tensor,), dtypes=INTS),
    OpTest("bitwise_right_shift", covers=(aten.bitwise_right_shift.Tensor,), dtypes=INTS),
    OpTest("bincount", covers=(aten.bincount.default,), dtypes=INTS),
]
