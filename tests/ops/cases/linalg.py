"""OpInfo cases for matrix products."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32 = (torch.float32,)

CASES = [
    OpTest("nn.functional.linear", covers=(aten.linear.default,)),
    OpTest("addmm", covers=(aten.addmm.default,)),
    OpTest("mm", covers=(aten.mm.default,)),
    OpTest("bmm", covers=(aten.bmm.default,)),
]
