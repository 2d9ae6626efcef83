"""OpInfo cases for reductions."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32 = torch.float32
F16 = torch.float16
I64 = torch.int64
BOOL = torch.bool

CASES = [
    OpTest("sum", covers=(aten.sum.default, aten.sum.dim_IntList), dtypes=(F32, F16, I64, BOOL)),
    OpTest("nansum", covers=(aten.nansum.default,), dtypes=(F32, I64)),
    OpTest("mean", covers=(aten.mean.default, aten.mean.dim), dtypes=(F32, F16)),
    OpTest("prod", covers=(aten.prod.default, aten.prod.dim_int), dtypes=(F32, I64, BOOL)),
    OpTest("amax", covers=(aten.amax.default,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("amin", covers=(aten.amin.default,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("aminmax", covers=(aten.aminmax.default,), dtypes=(F32, I64)),
    OpTest("max", variant="reduction_no_dim", covers=(aten.max.default,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("min", variant="reduction_no_dim", covers=(aten.min.default,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("max", variant="reduction_with_dim", covers=(aten.max.dim,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("min", variant="reduction_with_dim", covers=(aten.min.dim,), dtypes=(F32, F16, I64, BOOL)),
    OpTest("argmax", covers=(aten.argmax.default,), dtypes=(F32, F16, I64)),
    OpTest("argmin", covers=(aten.argmin.default,), dtypes=(F32, F16, I64)),
    OpTest("var", covers=(aten.var.correction, aten.var.dim, aten.var.default), dtypes=(F32, F16)),
    OpTest("var", variant="unbiased", covers=(aten.var.correction, aten.var.dim, aten.var.default)),
    OpTest("std", covers=(aten.std.correction, aten.std.dim, aten.std.default), dtypes=(F32, F16)),
    OpTest("std", variant="unbiased", covers=(aten.std.correction, aten.std.dim, aten.std.default)),
    OpTest("var_mean", covers=(aten.var_mean.correction, aten.var_mean.dim)),
    OpTest("var_mean", variant="unbiased", covers=(aten.var_mean.correction, aten.var_mean.dim)),
    OpTest("std_mean", covers=(aten.std_mean.correction, aten.std_mean.dim)),
    OpTest("std_mean", variant="unbiased", covers=(aten.std_mean.correction, aten.std_mean.dim)),
    OpTest("logsumexp", covers=(aten.logsumexp.default,), dtypes=(F32, F16, I64)),
    OpTest("linalg.vector_norm", covers=(aten.linalg_vector_norm.default,), dtypes=(F32, F16)),
    # renorm decomposes to a norm and a scale; float16 converts via prims.convert_element_type.
    OpTest("renorm", covers=(aten.linalg_vector_norm.default,), dtypes=(F32, F16)),
    OpTest("norm", covers=(aten.linalg_vector_norm.default, aten.norm.ScalarOpt_dim, aten.norm.Scalar)),
    OpTest("norm", variant="fro", covers=(aten.linalg_vector_norm.default, aten.norm.ScalarOpt_dim)),
    OpTest("norm", variant="inf", covers=(aten.linalg_vector_norm.default, aten.norm.ScalarOpt_dim)),
    OpTest("any", covers=(aten.any.default, aten.any.dim, aten.any.dims), dtypes=(F32, I64, BOOL)),
    OpTest("all", covers=(aten.all.default, aten.all.dim, aten.all.dims), dtypes=(F32, I64, BOOL)),
    OpTest("count_nonzero", covers=(aten.count_nonzero.default, aten.count_nonzero.dim_IntList),
           dtypes=(F32, I64, BOOL)),
]
