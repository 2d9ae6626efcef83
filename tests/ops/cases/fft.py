"""OpInfo cases for FFTs and complex tensors (carried as real (..., 2) pairs)."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32_F64 = (torch.float32, torch.float64)
FFT_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool)
# OpInfos whose samples can be complex: complex inputs enter the model as real pairs.
C2X_DTYPES = (*FFT_DTYPES, torch.complex64, torch.complex128)
TO_COMPLEX_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64,
                     torch.complex128)
R2C = (aten._fft_r2c.default,)
C2C = (aten._fft_c2c.default,)
C2R = (aten._fft_c2r.default,)

CASES = [
    OpTest("fft.fft", covers=R2C + C2C, dtypes=C2X_DTYPES),
    OpTest("fft.fft2", covers=C2C, dtypes=C2X_DTYPES),
    OpTest("fft.fftn", covers=C2C, dtypes=C2X_DTYPES),
    OpTest("fft.ifft", covers=R2C + C2C, dtypes=C2X_DTYPES),
    OpTest("fft.ifft2", covers=C2C, dtypes=C2X_DTYPES),
    OpTest("fft.ifftn", covers=C2C, dtypes=C2X_DTYPES),
    OpTest("fft.rfft", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("fft.rfft2", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("fft.rfftn", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("fft.irfft", covers=C2R, dtypes=C2X_DTYPES),
    OpTest("fft.irfft2", covers=C2R, dtypes=C2X_DTYPES),
    OpTest("fft.irfftn", covers=C2R, dtypes=C2X_DTYPES),
    OpTest("fft.hfft", covers=C2R, dtypes=C2X_DTYPES),
    OpTest("fft.hfft2", covers=C2R, dtypes=C2X_DTYPES).xfail(
        dtypes=[torch.complex64], when=lambda s: s.kwargs.get("dim") == (-3, -2, -1),
        reason="eager float32 pocketfft is itself 3.9e-5 off the float64 result on this "
               "5x6x12 transform (ours 2.7e-5), so the two differ beyond complex64 tolerance"),
    OpTest("fft.hfftn", covers=C2R, dtypes=C2X_DTYPES),
    OpTest("fft.ihfft", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("fft.ihfft2", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("fft.ihfftn", covers=R2C, dtypes=FFT_DTYPES),
    OpTest("stft", covers=R2C + C2C, dtypes=(*F32_F64, torch.complex64, torch.complex128)),
    OpTest("istft", covers=C2R + C2C, dtypes=(torch.complex64, torch.complex128)),
    OpTest("view_as_real", covers=(aten.view_as_real.default,),
           dtypes=(torch.complex64, torch.complex128)),
    OpTest("view_as_complex", covers=(aten.view_as_complex.default,), dtypes=F32_F64),
    OpTest("complex", covers=(aten.complex.default,), dtypes=F32_F64),
    OpTest("polar", covers=(aten.polar.default,), dtypes=F32_F64),
    OpTest("cfloat", covers=(aten.to.dtype, aten._to_copy.default),
           dtypes=TO_COMPLEX_DTYPES),
    OpTest("cdouble", covers=(aten.to.dtype, aten._to_copy.default), dtypes=TO_COMPLEX_DTYPES),
]
