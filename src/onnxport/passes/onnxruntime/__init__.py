"""Passes of the ONNX Runtime target (`export(..., target="onnxruntime")`).

They rewrite standard ONNX into ONNX Runtime's contrib operators (domain `com.microsoft`)
where ORT documents them and runs them faster: the default target never emits them, so
its files load in any runtime. Each pass lives in its own file here; `onnxruntime_passes()`
lists them in the order they run, after the default passes.
"""

from __future__ import annotations

import onnx_ir as ir

CONTRIB_DOMAIN = "com.microsoft"


def onnxruntime_passes() -> list[ir.passes.PassBase]:
    """The contrib-op passes of the ONNX Runtime target, in order."""
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
    return [FuseGroupQueryAttentionPass(),
            FuseMoEPass(),
            FuseFakeQuantPass(exact=False),  # also x * (1/s) activations: one step at a tie
            FuseSkipNormPass(max_elements=512, layer_norm=False, decode_rows=True),
            FuseMatMulNBitsPass(bits=(4,)),  # int4 only: ORT's 8-bit fp32 path is slower (matmul_nbits.py)
            Uint8WeightsPass()]  # int8 weights as uint8: ORT's exact U8U8 kernels (uint8_weights.py)


__all__ = ["CONTRIB_DOMAIN", "onnxruntime_passes"]
