"""OpInfo cases for elementwise math."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

CASES = [
    OpTest("add", covers=(aten.add.Tensor,), dtypes=(torch.float32, torch.int64)),
    OpTest("sigmoid", covers=(aten.sigmoid.default,)),
    OpTest("nn.functional.relu", covers=(aten.relu.default,)),
    OpTest("tanh", covers=(aten.tanh.default,)),
]
