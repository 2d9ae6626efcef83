"""OpInfo cases for covariance and correlation."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32, I64, F16 = torch.float32, torch.int64, torch.float16

CASES = [
    OpTest("cov", covers=(aten.cov.default,), dtypes=(F32, I64, F16)),
    OpTest("corrcoef", covers=(aten.corrcoef.default,), dtypes=(F32, I64, F16)),
]
