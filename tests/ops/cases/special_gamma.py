"""OpInfo cases for special functions: gamma family, incomplete gamma, zeta, erfcx, ndtr, bits."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F16, F32, F64 = torch.float16, torch.float32, torch.float64
I64, BOOL = torch.int64, torch.bool

CASES = [
    OpTest("lgamma", covers=(aten.lgamma.default,), dtypes=(F32, F64, F16, I64, BOOL)),
    OpTest("digamma", covers=(aten.digamma.default,), dtypes=(F32, F64, F16, I64, BOOL)),
    OpTest("polygamma", variant="polygamma_n_0", covers=(aten.polygamma.default,),
           dtypes=(F32, F64, F16, I64, BOOL)),
    *(OpTest("polygamma", variant=f"polygamma_n_{n}", covers=(aten.polygamma.default,),
             dtypes=(F32, F64, I64, BOOL)) for n in range(1, 5)),
    OpTest("special.polygamma", variant="special_polygamma_n_0",
           covers=(aten.polygamma.default,), dtypes=(F32, F64, F16, I64, BOOL)),
    *(OpTest("mvlgamma", variant=f"mvlgamma_p_{p}", covers=(aten.mvlgamma.default,),
             dtypes=(F32, F64, F16, I64)) for p in (1, 3, 5)),
    OpTest("igamma", covers=(aten.igamma.default,), dtypes=(F32, F64, F16)),
    OpTest("igammac", covers=(aten.igammac.default,), dtypes=(F32, F64, F16)),
    OpTest("special.zeta", covers=(aten.special_zeta.default,), dtypes=(F32, F64, I64, BOOL)),
    OpTest("special.erfcx", covers=(aten.special_erfcx.default,), dtypes=(F32, F64, I64, BOOL)),
    OpTest("special.log_ndtr", covers=(aten.special_log_ndtr.default,),
           dtypes=(F32, F64, I64, BOOL)),
    OpTest("special.ndtri", covers=(aten.special_ndtri.default,), dtypes=(F32, F64, I64, BOOL)),
    OpTest("nextafter", covers=(aten.nextafter.default,), dtypes=(F32, F64, F16)),
    OpTest("frexp", covers=(aten.frexp.Tensor,), dtypes=(F32, F64, F16)),
    OpTest("copysign", covers=(aten.copysign.Tensor, aten.copysign.Scalar),
           dtypes=(F32, F64, F16, I64, BOOL)),
]
