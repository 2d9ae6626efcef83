"""OpInfo cases for neural-network layers and attention."""

from __future__ import annotations

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

CASES = [
    OpTest("nn.functional.conv1d", covers=CONV, dtypes=(F32, F16, I64)),
    OpTest("nn.functional.conv2d", covers=CONV, dtypes=(F32, F16, I64)),
    OpTest("nn.functional.conv3d", covers=CONV, dtypes=(F32, I64)),
    OpTest("nn.functional.conv_transpose1d", covers=CONV_T, dtypes=(F32, F16, I64))
    .xfail(dtypes=[F16], reason="torch's CPU float16 conv_transpose rounds in float16; ONNX computes in "
           "float32 and is closer to a float64 reference (max error over the 10 samples: torch "
           "0.056, ONNX 0.030), beyond fp16 rtol on torch 2.13.0's CPU build; the first 4 "
           "samples pass on torch 2.14.1's and 2.15.0's builds, whose kernels round closer",
           strict=False),
    OpTest("nn.functional.conv_transpose2d", covers=CONV_T, dtypes=(F32, F16, I64))
    .xfail(dtypes=[F16], reason="torch's CPU float16 conv_transpose rounds in float16; ONNX computes in "
           "float32 and is closer to a float64 reference (0.06 vs 0.10 max error), beyond fp16 rtol"),
    OpTest("nn.functional.conv_transpose3d", covers=CONV_T, dtypes=(F32, F16, I64))
    .xfail(dtypes=[F16], reason="torch's CPU float16 conv_transpose rounds in float16; ONNX computes in "
           "float32 and is closer to a float64 reference (max error over the 10 samples: torch "
           "1.05, ONNX 0.24), beyond fp16 rtol"),
    OpTest("nn.functional.max_pool1d", covers=(aten.max_pool1d.default,
                                               aten.max_pool1d_with_indices.default), dtypes=(F32, F16)),
    OpTest("nn.functional.max_pool2d", covers=(aten.max_pool2d.default,
                                               aten.max_pool2d_with_indices.default), dtypes=(F32, F16, I64)),
    OpTest("nn.functional.max_pool3d", covers=(aten.max_pool3d.default,
                                               aten.max_pool3d_with_indices.default), dtypes=(F32, I64)),
    OpTest("nn.functional.avg_pool1d", covers=(aten.avg_pool1d.default,), dtypes=(F32, I64)),
    OpTest("nn.functional.avg_pool2d", covers=(aten.avg_pool2d.default,), dtypes=(F32, F16, I64)),
    OpTest("nn.functional.avg_pool3d", covers=(aten.avg_pool3d.default,), dtypes=(F32, I64)),
    OpTest("nn.functional.local_response_norm", covers=(aten.avg_pool2d.default, aten.avg_pool3d.default),
           dtypes=(F32, I64)),
    OpTest("nn.functional.adaptive_avg_pool1d", covers=(aten.adaptive_avg_pool1d.default,)),
    OpTest("nn.functional.adaptive_avg_pool2d", covers=(aten.adaptive_avg_pool2d.default,),
           dtypes=(F32, F16)),
    OpTest("nn.functional.adaptive_avg_pool3d", covers=(aten.adaptive_avg_pool3d.default,),
           dtypes=(F32, F16))
    .xfail(dtypes=[F16], reason="torch's CPU float16 adaptive_avg_pool3d sums each window one element "
           "at a time in float16 (a sequential float16 sum reproduces samples 1 and 6 exactly); "
           "ONNX sums in float32 and is closer to a float64 reference (max error torch 0.0045, "
           "ONNX 0.0020), beyond fp16 rtol"),
    OpTest("nn.functional.adaptive_max_pool1d", covers=(aten.adaptive_max_pool1d.default,),
           dtypes=(F32, F16)),
    OpTest("nn.functional.adaptive_max_pool2d", covers=(aten.adaptive_max_pool2d.default,),
           dtypes=(F32, F16)),
    OpTest("nn.functional.adaptive_max_pool3d", covers=(aten.adaptive_max_pool3d.default,),
           dtypes=(F32, F16)),
]
CASES += [
    OpTest("nn.functional.batch_norm", covers=(aten.batch_norm.default,), dtypes=(F32, F16)),
    OpTest("nn.functional.batch_norm", variant="without_cudnn", covers=(aten.batch_norm.default,),
           dtypes=(F32, F16)),
    OpTest("native_batch_norm", covers=(aten.native_batch_norm.default,), dtypes=(F32, F16)),
    OpTest("_native_batch_norm_legit", covers=(aten._native_batch_norm_legit.default,
                                               aten._native_batch_norm_legit.no_stats,
                                               aten._native_batch_norm_legit_functional.default),
           dtypes=(F32, F16)),
    OpTest("nn.functional.layer_norm", covers=(aten.layer_norm.default,), dtypes=(F32, F16)),
    OpTest("native_layer_norm", covers=(aten.native_layer_norm.default,)),
    OpTest("nn.functional.group_norm", covers=(aten.group_norm.default,), dtypes=(F32, F16)),
    OpTest("native_group_norm", covers=(aten.native_group_norm.default,)),
    OpTest("nn.functional.instance_norm", covers=(aten.instance_norm.default,), dtypes=(F32, F16)),
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
CASES += [
    OpTest("nn.functional.bilinear", covers=(aten.bilinear.default,), dtypes=(F32, F16, I64))
    .xfail(dtypes=[F16], reason="torch's CPU float16 bilinear rounds its intermediate products to "
           "float16; ONNX computes in float32 and is closer to a float64 reference (max error "
           "0.007 vs 0.014 over 50 random (8,3)x(5,3,4) samples), beyond fp16 rtol"),
]
CASES += [
    # torch has no float16 CPU kernel for the antialiased modes.
    OpTest("_upsample_bilinear2d_aa", covers=(aten._upsample_bilinear2d_aa.vec,
                                              aten._upsample_bilinear2d_aa.default)),
]
CASES += [
    OpTest("_batch_norm_with_update", covers=(aten._batch_norm_with_update_functional.default,),
           dtypes=(F32, F16)),
]
# linalg.py
CASES += [
    OpTest("addbmm", covers=(aten.addbmm.default,), dtypes=(F32, F16, I64))
    .xfail(dtypes=[F32, F16], reason="rounding only: the samples (values up to 9, 25-term sums) "
           "cancel to near 0 in places; over 300 random (5,10)+(5,5,5)@(5,5,10) float32 samples "
           "torch's max error vs float64 is 4.2e-5 (mean), ONNX's 4.3e-5, yet they differ from "
           "each other beyond rtol in 64/300 (87/300 when summing per batch in torch's order); "
           "float16 OpInfo samples: max error vs float64 torch 0.215, ONNX 0.116; whether the "
           "float32 samples stay within rtol depends on the CPU's matmul kernels (they pass on "
           "some 2-core machines, fail on others)", strict=False),
]
# conversion: bfloat16 outputs come back through ONNXProgram's OrtValue path (program.py)
CASES += [
    OpTest("bfloat16", covers=(aten.to.dtype, aten._to_copy.default),
           dtypes=(F32, F16, I64, torch.bool)),
]
# strided.py
CASES += [
    OpTest("as_strided_scatter", covers=(aten.as_strided_scatter.default,
                                         torch.ops.prims.as_strided_scatter.default),
           dtypes=(F32, F16, I64, torch.bool)),
]
# losses: cross_entropy, nll_loss and multilabel_margin_loss reach ONNX through torch's
# decompositions (nll_loss_forward's returns a namedtuple, unwrapped in capture/decompose.py);
# the chunked linear_cross_entropy custom ops are translated in loss.py.
import torch.nn.modules.linear_cross_entropy  # noqa: E402,F401  (defines the torch_nn:: ops)

_TORCH_NN = torch.ops.torch_nn
CASES += [
    OpTest("nn.functional.cross_entropy", covers=(), dtypes=(F32, F16)),
    OpTest("nn.functional.nll_loss", covers=(), dtypes=(F32, F16))
    .xfail(dtypes=[F16], when=lambda s: s.input.dim() == 4 and s.kwargs.get("reduction") != "none",
           reason="torch's float16 nll_loss2d reduces in float16; ONNX reduces in float32 and is "
                  "closer to float64 (e.g. sample 34: error 1.8e-3 vs torch's 6.1e-3; sample 53: "
                  "0 vs 2.0e-3), beyond fp16 rtol"),
    OpTest("nn.functional.multilabel_margin_loss", covers=()),
    OpTest("nn.functional.soft_margin_loss", covers=(aten.soft_margin_loss.default,),
           dtypes=(F32, F16)),
    # CompositeImplicit: reach ONNX as chains of elementwise ops, each rounded to float16 as in ATen
    OpTest("nn.functional.cosine_similarity", covers=(), dtypes=(F32, F16)),
    OpTest("nn.functional.triplet_margin_loss", covers=(), dtypes=(F32, F16)),
    OpTest("nn.functional.triplet_margin_with_distance_loss", covers=(), dtypes=(F32, F16)),
    OpTest("nn.functional.linear_cross_entropy", covers=()),
    OpTest("nn.functional.linear_cross_entropy", variant="chunked",
           covers=(_TORCH_NN._linear_cross_entropy_batch_chunked.default, aten.linear.default)),
    OpTest("nn.functional.linear_cross_entropy", variant="chunked_none",
           covers=(_TORCH_NN._linear_cross_entropy_batch_chunked_no_reduction.default,
                   aten.linear.default)),
    OpTest("nn.functional.multi_head_attention_forward", covers=())
    .xfail(when=lambda s: s.kwargs.get("attn_mask") is not None,
           reason="rounding only: with a float mask the logits reach the hundreds and softmax "
                  "amplifies float32 rounding; e.g. sample 126 (output up to 1611) differs "
                  "from float64 by 1.2e-2 in torch and 3.0e-2 in ONNX, sample 134 by 8.9e-4 "
                  "in torch and 3.0e-4 in ONNX, beyond rtol where the output cancels to ~0"),
]
CASES += [
    # at opset 18 (the op tests' opset) from Gathers; GridSample from opset 20
    OpTest("grid_sampler_3d", covers=(aten.grid_sampler_3d.default,), dtypes=(F32, F16))
    .xfail(dtypes=[F16], when=lambda s: s.args[1] != 1,
           reason="torch's CPU float16 grid_sampler_3d computes coordinates and weights in float16; "
                  "ONNX computes them in float32 and is closer to a float64 reference (max error "
                  "torch 0.032, ONNX 0.00024), beyond fp16 rtol"),
]
