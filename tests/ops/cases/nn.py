"""OpInfo cases for neural-network layers and attention."""

from __future__ import annotations

from typing import Any

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32 = torch.float32
F16 = torch.float16
I64 = torch.int64

CONV = (aten.convolution.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
        aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding)
CONV_T = (aten.convolution.default, aten.conv_transpose1d.default, aten.conv_transpose2d.input,
          aten.conv_transpose3d.input)

UNEVEN = ("adaptive_max_pool to an output size that does not divide the input: overlapping "
          "windows of varying size have no MaxPool equivalent (TranslationError)")


def _uneven_adaptive(sample: Any) -> bool:
    out = sample.args[0]
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    sizes = sample.input.shape[-len(outs):] if len(outs) > 1 else sample.input.shape[-1:]
    return any(o is not None and s % o != 0 for s, o in zip(sizes, outs))


CASES = [
    OpTest("nn.functional.conv1d", covers=CONV, dtypes=(F32, F16)),
    OpTest("nn.functional.conv2d", covers=CONV, dtypes=(F32, F16)),
    OpTest("nn.functional.conv3d", covers=CONV),
    OpTest("nn.functional.conv_transpose1d", covers=CONV_T),
    OpTest("nn.functional.conv_transpose2d", covers=CONV_T, dtypes=(F32, F16))
    .xfail(dtypes=[F16], reason="torch's CPU float16 conv_transpose rounds in float16; ONNX computes in "
           "float32 and is closer to a float64 reference (0.06 vs 0.10 max error), beyond fp16 rtol"),
    OpTest("nn.functional.conv_transpose3d", covers=CONV_T),
    OpTest("nn.functional.max_pool1d", covers=(aten.max_pool1d.default,
                                               aten.max_pool1d_with_indices.default), dtypes=(F32, F16)),
    OpTest("nn.functional.max_pool2d", covers=(aten.max_pool2d.default,
                                               aten.max_pool2d_with_indices.default), dtypes=(F32, F16)),
    OpTest("nn.functional.max_pool3d", covers=(aten.max_pool3d.default,
                                               aten.max_pool3d_with_indices.default)),
    OpTest("nn.functional.avg_pool1d", covers=(aten.avg_pool1d.default,), dtypes=(F32,)),
    OpTest("nn.functional.avg_pool2d", covers=(aten.avg_pool2d.default,), dtypes=(F32, F16)),
    OpTest("nn.functional.avg_pool3d", covers=(aten.avg_pool3d.default,)),
    OpTest("nn.functional.adaptive_avg_pool1d", covers=(aten.adaptive_avg_pool1d.default,)),
    OpTest("nn.functional.adaptive_avg_pool2d", covers=(aten.adaptive_avg_pool2d.default,),
           dtypes=(F32, F16)),
    OpTest("nn.functional.adaptive_avg_pool3d", covers=(aten.adaptive_avg_pool3d.default,))
    .xfail(when=lambda s: s.input.numel() == 0,
           reason="ORT's MatmulTransposeFusion fails on an empty batch (cannot broadcast on dim 0)"),
    OpTest("nn.functional.adaptive_max_pool1d", covers=(aten.adaptive_max_pool1d.default,))
    .xfail(when=_uneven_adaptive, reason=UNEVEN),
    OpTest("nn.functional.adaptive_max_pool2d", covers=(aten.adaptive_max_pool2d.default,))
    .xfail(when=_uneven_adaptive, reason=UNEVEN),
    OpTest("nn.functional.adaptive_max_pool3d", covers=(aten.adaptive_max_pool3d.default,))
    .xfail(when=_uneven_adaptive, reason=UNEVEN),
]
CASES += [
    OpTest("nn.functional.batch_norm", covers=(aten.batch_norm.default,), dtypes=(F32, F16))
    .xfail(dtypes=[F16], when=lambda s: bool(s.kwargs.get("training")),
           reason="training-mode float16: a few outputs differ from torch by one float16 ulp "
                  "(both are equally far, 6e-3, from a float64 reference)"),
    OpTest("nn.functional.batch_norm", variant="without_cudnn", covers=(aten.batch_norm.default,)),
    OpTest("native_batch_norm", covers=(aten.native_batch_norm.default,)),
    OpTest("_native_batch_norm_legit", covers=(aten._native_batch_norm_legit.default,
                                               aten._native_batch_norm_legit.no_stats,
                                               aten._native_batch_norm_legit_functional.default)),
    OpTest("nn.functional.layer_norm", covers=(aten.layer_norm.default,), dtypes=(F32, F16)),
    OpTest("native_layer_norm", covers=(aten.native_layer_norm.default,)),
    OpTest("nn.functional.group_norm", covers=(aten.group_norm.default,), dtypes=(F32, F16)),
    OpTest("native_group_norm", covers=(aten.native_group_norm.default,)),
    OpTest("nn.functional.instance_norm", covers=(aten.instance_norm.default,)),
    OpTest("nn.functional.rms_norm", covers=(aten.rms_norm.default,), dtypes=(F32, F16)),
]
UPSAMPLE = tuple(getattr(aten, f"{name}").vec for name in (
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d"))
PAD = (aten.pad.default, aten.constant_pad_nd.default, aten.reflection_pad1d.default,
       aten.reflection_pad2d.default, aten.reflection_pad3d.default, aten.replication_pad1d.default,
       aten.replication_pad2d.default, aten.replication_pad3d.default, aten._pad_circular.default)
CASES += [
    OpTest("nn.functional.interpolate", variant="nearest", covers=UPSAMPLE,
           dtypes=(F32, F16, torch.uint8)),
    OpTest("nn.functional.interpolate", variant="nearest-exact", covers=UPSAMPLE, dtypes=(F32,)),
    OpTest("nn.functional.interpolate", variant="linear", covers=UPSAMPLE),
    OpTest("nn.functional.interpolate", variant="bilinear", covers=UPSAMPLE, dtypes=(F32, F16)),
    OpTest("nn.functional.interpolate", variant="trilinear", covers=UPSAMPLE),
    OpTest("nn.functional.interpolate", variant="bicubic", covers=UPSAMPLE),
    OpTest("nn.functional.interpolate", variant="area", covers=(aten.adaptive_avg_pool1d.default,
                                                                aten.adaptive_avg_pool2d.default,
                                                                aten.adaptive_avg_pool3d.default)),
    OpTest("nn.functional.upsample_nearest", covers=UPSAMPLE),
    OpTest("nn.functional.upsample_bilinear", covers=UPSAMPLE),
    OpTest("constant_pad_nd", covers=PAD, dtypes=(F32, F16, I64, torch.bool)),
    OpTest("nn.functional.pad", variant="constant", covers=PAD, dtypes=(F32, I64)),
    OpTest("nn.functional.pad", variant="reflect", covers=PAD, dtypes=(F32, F16)),
    OpTest("nn.functional.pad", variant="replicate", covers=PAD, dtypes=(F32, F16)),
    OpTest("nn.functional.pad", variant="replicate_negative", covers=PAD),
    OpTest("nn.functional.pad", variant="circular", covers=PAD, dtypes=(F32, I64)),
    OpTest("nn.functional.pixel_shuffle", covers=(aten.pixel_shuffle.default,), dtypes=(F32, I64)),
    OpTest("nn.functional.pixel_unshuffle", covers=(aten.pixel_unshuffle.default,), dtypes=(F32, I64)),
]
CASES += [
    OpTest("nn.functional.scaled_dot_product_attention",
           covers=(aten.scaled_dot_product_attention.default,), dtypes=(F32, F16))
    .skip(when=lambda s: s.kwargs.get("dropout_p", 0) > 0,
          reason="dropout_p > 0 draws random numbers; eager and ONNX cannot agree"),
]
