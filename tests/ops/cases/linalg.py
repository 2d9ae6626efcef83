"""OpInfo cases for matrix products."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32 = (torch.float32,)

CASES = [
    OpTest("nn.functional.linear", covers=(aten.linear.default,)),
    OpTest("addmm", covers=(aten.addmm.default,)),
    OpTest("baddbmm", covers=(aten.baddbmm.default,), dtypes=(torch.float32, torch.int64)),
    OpTest("mm", covers=(aten.mm.default,)),
    OpTest("bmm", covers=(aten.bmm.default,)),
]
