"""Passes of the ONNX Runtime target (`export(..., target="onnxruntime")`).

They rewrite standard ONNX into ONNX Runtime's contrib operators (domain `com.microsoft`)
where ORT documents them and runs them faster: the default target never emits them, so
its files load in any runtime. Each pass lives in its own file here; `onnxruntime_passes()`
lists them in the order they run, after the default passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx_ir as ir

from onnxport.passes.onnxruntime.contrib import CONTRIB_DOMAIN

if TYPE_CHECKING:
    from onnxport.options import OnnxRuntimeTarget


def onnxruntime_passes(options: OnnxRuntimeTarget | None = None) -> list[ir.passes.PassBase]:
    """The contrib-op passes of the ONNX Runtime target, in order (`options`: the int4
    accuracy level and block size, `OnnxRuntimeTarget()`'s by default)."""
    from onnxport.options import OnnxRuntimeTarget
    from onnxport.passes.fuse_fake_quant import FuseFakeQuantPass
    from onnxport.passes.onnxruntime.fuse_group_query_attention import FuseGroupQueryAttentionPass
    from onnxport.passes.onnxruntime.fuse_moe import FuseMoEPass
    from onnxport.passes.onnxruntime.fuse_skip_norm import FuseSkipNormPass
    from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass
    from onnxport.passes.onnxruntime.uint8_weights import Uint8WeightsPass

    # GroupQueryAttention: decoder attention over a KV cache whose mask is provably causal (and
    # padding), rotary inside where its positions are the cache's (fuse_group_query_attention.py).
    # Skip*LayerNormalization only where ORT 1.32's CPU kernels measured faster than Add + norm:
    # RMS norms of <= 512 elements (decode steps of small models; dynamic rows count as one
    # in a graph with a KV cache); see fuse_skip_norm.py.
    # MoE: a mixture-of-experts layer (router logits, two grouped expert products and the
    # routing glue between them) whose semantics ORT's kernel has, checked by running the glue.
    options = options or OnnxRuntimeTarget()
    return [FuseGroupQueryAttentionPass(max_positions=options.max_positions),
            FuseMoEPass(),
            FuseFakeQuantPass(exact=False),  # also x * (1/s) activations: one step at a tie
            FuseSkipNormPass(max_elements=512, layer_norm=False, decode_rows=True),
            # int4 only: ORT's 8-bit fp32 path is slower (matmul_nbits.py); accuracy level 4 (the
            # builder's) is faster than float in prefill and decode (docs/quantization.md)
            FuseMatMulNBitsPass(bits=(4,), accuracy_level=options.int4_accuracy_level,
                                block_size=options.int4_block_size),
            Uint8WeightsPass()]  # int8 weights as uint8: ORT's exact U8U8 kernels (uint8_weights.py)


__all__ = ["CONTRIB_DOMAIN", "onnxruntime_passes"]
