"""Graph passes run after translation. `DEFAULT_PASSES` is the list `optimize` applies."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir
import onnx_ir.passes.common as common

from onnxport.errors import PassError
from onnxport.passes.fold_batch_norm import FoldBatchNormPass
from onnxport.passes.fold_constants import FoldConstantsPass
from onnxport.passes.fold_scale import FoldScaleIntoGemmPass
from onnxport.passes.foldable_weight_dequant import FoldableWeightDequantPass
from onnxport.passes.fuse_attention import FuseAttentionPass
from onnxport.passes.fuse_dynamic_quant import FuseDynamicQuantMatMulPass
from onnxport.passes.fuse_fake_quant import FuseFakeQuantPass
from onnxport.passes.fuse_gelu import FuseGeluPass
from onnxport.passes.fuse_gemm import FuseGemmPass
from onnxport.passes.fuse_global_pool import FuseGlobalPoolPass
from onnxport.passes.fuse_layer_norm import FuseLayerNormPass
from onnxport.passes.fuse_rms_norm import FuseRMSNormPass
from onnxport.passes.fuse_rotary import FuseRotaryPass
from onnxport.passes.fuse_rows import FuseRowsPass
from onnxport.passes.head_layout import HeadLayoutPass
from onnxport.passes.pretranspose_weights import PretransposeWeightsPass, transposed_weights
from onnxport.passes.simplify_indexing import SimplifyIndexingPass


def fusion_passes() -> list[ir.passes.PassBase]:
    """Every fusion pass, in the order they run (the default list runs those that pay off)."""
    return [FuseFakeQuantPass(), FuseLayerNormPass(), FuseRMSNormPass(), FuseGeluPass(), FuseRotaryPass(), FuseAttentionPass(),
            FuseRowsPass(), FuseGemmPass(), FoldScaleIntoGemmPass(), HeadLayoutPass(), FuseDynamicQuantMatMulPass(),
            FuseGlobalPoolPass(), FoldableWeightDequantPass()]


# The fusions `default_passes()` runs: those that made ONNX Runtime (CPU) measurably faster in
# benchmarks/bench_latency.py --ablation (docs/benchmarks.md, "ORT latency and fusion passes"):
# LayerNorm -15%, RMSNorm -16%, GELU -12% on blocks that use them. FuseRowsPass carries
# row-wise groups holding a Linear as 2-D (rows, hidden), where FuseGemmPass makes each Linear
# one Gemm (-2 nodes a Linear) and ORT no longer forms its slow SkipLayerNormalization (BERT
# -10%); FuseGemmPass alone (3-D MatMuls stay) did not change ORT latency.
# FuseDynamicQuantMatMulPass matches dynamically quantized matmuls only (PT2E dynamic flows):
# ORT runs them as DynamicQuantizeMatMul integer kernels, which it never forms by itself.
# FuseRotaryPass (RotaryEmbedding, opset >= 23 only): Llama decode -4% and -6% a token at opset 23
# in two runs of benchmarks/bench_decode.py (docs/benchmarks.md, "LLM decode").
# FuseFakeQuantPass (exact rewrites only): fake-quantized weights as integer initializers +
# DequantizeLinear, so ORT forms its weight kernels (docs/quantization.md).
# FoldScaleIntoGemmPass: attention's query scale (below opset 23) as the query Gemm's alpha:
# one node and one elementwise pass a layer fewer (BERT, ViT, Llama encoders).
# HeadLayoutPass (after the attention and row passes): a batch-of-one head split as an
# (S, 1, H, D) view, whose Transpose ORT folds into FusedMatMul: three Transposes a layer
# fewer; benchmarks/bench_latency.py, ORT CPU time: BERT -2.2%, GPT-2 -1.5%, ViT -3%.
# FuseGlobalPoolPass: a keepdims mean over H and W (timm's squeeze-and-excitation blocks) as
# GlobalAveragePool, which ORT runs in its NCHWc layout: no reorders around each SE block, fewer
# nodes after ORT than torch.onnx's (EfficientNet-B0 217 vs 233, RegNetY 279 vs 306); latency
# within 1% of the ReduceMean graph's in A/B runs (benchmarks/bench_vision_graphs.py,
# docs/benchmarks.md "Vision graphs").
# FoldableWeightDequantPass (last): weight-only DequantizeLinear as Cast/Mul arithmetic ORT folds
# at load: int4 MLP 512-2048-512 at float's latency instead of 18x it (docs/quantization.md).
DEFAULT_FUSIONS = (FuseFakeQuantPass, FuseLayerNormPass, FuseRMSNormPass, FuseGeluPass, FuseRotaryPass, FuseAttentionPass,
                   FuseRowsPass, FuseGemmPass, FoldScaleIntoGemmPass, HeadLayoutPass, FuseDynamicQuantMatMulPass,
                   FuseGlobalPoolPass, FoldableWeightDequantPass)


# PretransposeWeightsPass is not in the default list: a weight stored transposed keeps its
# state_dict name with the transposed shape, which breaks the contract that every parameter is
# an initializer of its state_dict name *and shape* (tests/models/test_small_models.py), and
# ONNX Runtime folds Transpose(initializer) at session load anyway (no latency change). Run it
# explicitly (`run_passes(program.model, [PretransposeWeightsPass()])`) for a smaller file;
# `ONNXProgram.apply_weights` transposes the weights it lists.
# FoldBatchNormPass (Conv + BatchNormalization as one Conv, as torch.onnx writes CNNs) is not
# default for the same reasons: the folded weights are new initializers, so the state_dict names
# leave the graph, and ORT folds Conv + BatchNormalization at load (bench_vision_graphs.py
# --fold-bn: the same nodes after ORT's optimizations, the same latency).


def default_passes() -> list[ir.passes.PassBase]:
    """The passes `optimize()` runs, in order."""
    return [
        FoldConstantsPass(),
        common.RemoveUnusedNodesPass(),
        SimplifyIndexingPass(),
        common.CommonSubexpressionEliminationPass(),
        *(p for p in fusion_passes() if isinstance(p, DEFAULT_FUSIONS)),
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    ]


TARGETS = ("onnx", "onnxruntime")


def target_passes(target: str) -> list[ir.passes.PassBase]:
    """The passes a target adds after the default ones: none for standard ONNX ("onnx");
    ONNX Runtime's contrib-op rewrites for "onnxruntime" (an `OnnxRuntimeTarget` sets their
    options)."""
    if target == "onnx":
        return []
    if target == "onnxruntime":
        from onnxport.options import OnnxRuntimeTarget
        from onnxport.passes.onnxruntime import onnxruntime_passes

        return onnxruntime_passes(target if isinstance(target, OnnxRuntimeTarget)
                                  else OnnxRuntimeTarget())
    raise ValueError(f"target must be one of {', '.join(map(repr, TARGETS))}, got {target!r}")


def cleanup_passes() -> list[ir.passes.PassBase]:
    """Passes run on every export, even with optimize=False: only dead code removal."""
    return [common.RemoveUnusedNodesPass()]


def run_passes(model: ir.Model, passes: Sequence[ir.passes.PassBase] | None = None) -> ir.Model:
    """Run `passes` (default: `default_passes()`) in place; wrap failures in PassError."""
    done: list[str] = []
    # Passes that merge values (CSE) may put an internal value, typed but without a shape,
    # in a graph output's place: keep what the translator knew about each output.
    known = [(v.dtype, v.shape) for v in model.graph.outputs]
    for p in default_passes() if passes is None else passes:
        name = type(p).__name__
        try:
            p(model)
        except Exception as e:  # noqa: BLE001  (re-raised with the pass's name)
            raise PassError(f"pass {name} failed after {done or 'no passes'}: {e}") from e
        done.append(name)
    for value, (dtype, shape) in zip(model.graph.outputs, known):
        if value.dtype is None:
            value.dtype = dtype
        if value.shape is None:
            value.shape = shape
    return model


PassFactory = Callable[[], ir.passes.PassBase]
__all__ = ["FoldBatchNormPass", "FoldConstantsPass", "FoldScaleIntoGemmPass", "FoldableWeightDequantPass", "FuseAttentionPass", "FuseFakeQuantPass", "FuseGeluPass", "FuseGemmPass", "FuseGlobalPoolPass", "FuseLayerNormPass",
           "FuseRMSNormPass", "FuseRotaryPass", "FuseRowsPass", "HeadLayoutPass", "PretransposeWeightsPass", "SimplifyIndexingPass", "cleanup_passes", "default_passes",
           "fusion_passes", "run_passes", "target_passes", "transposed_weights", "TARGETS"]
