"""OpInfo cases for random draws and uninitialized allocations.

Their outputs cannot match eager PyTorch's values, so the harness compares them in shape and
dtype (`op_db.random_outputs`); their distributions are tested in tests/ops/test_random.py.
"""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32, I64, BOOL, F16 = torch.float32, torch.int64, torch.bool, torch.float16
ALL = (F32, I64, BOOL, F16)
FLOATS = (F32, F16)
NORMAL = (aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.float_float)

CASES = [
    OpTest("rand_like", covers=(aten.randn_like.default, aten.rand_like.default), dtypes=FLOATS),
    OpTest("randn", covers=(aten.randn.default,), dtypes=FLOATS),
    OpTest("randn_like", covers=(aten.randn_like.default,), dtypes=FLOATS),
    OpTest("randint", covers=(aten.randint.default, aten.randint.low), dtypes=(F32, I64, F16)),
    OpTest("randint_like", covers=(aten.randint_like.default, aten.randint_like.low_dtype), dtypes=(F32, I64, F16)),
    OpTest("normal", covers=NORMAL, dtypes=FLOATS),
    OpTest("normal", variant="number_mean", covers=NORMAL, dtypes=FLOATS),
    OpTest("normal", variant="in_place", covers=(aten.normal_functional.default, aten.normal_.default), dtypes=FLOATS),
    OpTest("uniform", covers=(aten.uniform.default, aten.uniform_.default), dtypes=FLOATS),
    OpTest("exponential", covers=(aten.exponential.default, aten.exponential_.default), dtypes=FLOATS),
    OpTest("cauchy", covers=(aten.cauchy.default, aten.cauchy_.default), dtypes=FLOATS),
    OpTest("log_normal", covers=(aten.log_normal.default, aten.log_normal_.default), dtypes=FLOATS),
    OpTest("geometric", covers=(aten.geometric.default, aten.geometric_.default), dtypes=(F32, I64, F16)),
    OpTest("multinomial", covers=(aten.multinomial.default,), dtypes=FLOATS),
    OpTest("bernoulli", covers=(aten.bernoulli.default,), dtypes=FLOATS),
    OpTest("nn.functional.rrelu", covers=(aten.rrelu.default, aten.rrelu_with_noise_functional.default)),
    OpTest("nn.functional.dropout", covers=(aten.dropout.default,), dtypes=FLOATS),
    OpTest("nn.functional.dropout2d", covers=(aten.feature_dropout.default,), dtypes=FLOATS),
    OpTest("nn.functional.alpha_dropout", covers=(aten.alpha_dropout.default,), dtypes=FLOATS),
    OpTest("nn.functional.feature_alpha_dropout", variant="with_train",
           covers=(aten.feature_alpha_dropout.default,), dtypes=FLOATS),
    OpTest("nn.functional.fractional_max_pool2d", covers=(aten.fractional_max_pool2d.default,)),
    OpTest("nn.functional.fractional_max_pool3d", covers=(aten.fractional_max_pool3d.default,)),
    OpTest("empty", covers=(aten.empty.memory_format,), dtypes=ALL),
    OpTest("empty_like", covers=(aten.empty_like.default,), dtypes=ALL),
    OpTest("empty_strided", covers=(aten.empty_strided.default,), dtypes=ALL),
    OpTest("empty_permuted", covers=(aten.empty_permuted.default,), dtypes=ALL),
    OpTest("new_empty", covers=(aten.new_empty.default,), dtypes=ALL),
    OpTest("new_empty_strided", covers=(aten.new_empty_strided.default,), dtypes=ALL),
]
