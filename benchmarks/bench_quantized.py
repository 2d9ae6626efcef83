"""Quantized models through onnxport and torch.onnx, in one run: file size, ORT latency, and the
integer kernels ONNX Runtime runs after its graph optimizations.

    python benchmarks/bench_quantized.py                       # every model and flow
    python benchmarks/bench_quantized.py --models cnn mlp --repeat 50

Models: CNN (conv 3->8 + linear), MLP (16-32-8), MLP-large (512-2048-512, where file size
and latency show what quantization buys), small BERT and small Llama (hidden 32, 2
layers, vocab 99, random weights). Flows: `float` (no quantization), PT2E `x86`,
`xnnpack_per_channel`, `x86_dynamic`, `xnnpack_dynamic` (FuseDynamicQuantMatMulPass, a default
pass, makes them MatMulInteger), `xnnpack_qat` (prepare_qat_pt2e, eval, observers off: the
fake-quantized model itself), torchao weight-only `int8_weight_only` (Int8WeightOnlyConfig,
opset 18) and `int4_weight_only` (IntxWeightOnlyConfig int4, group 32; 16 on the small MLP; opset 21), the latter
also as `int4_wo+ort_target` (onnxport `target="onnxruntime"`: MatMulNBits, accuracy level
0, exact) and `int4_wo+nbits_acc4` (FuseMatMulNBitsPass(accuracy_level=4): ORT quantizes the
activations to int8 per block, faster, not exact), `torchao_qat` (QATConfig prepare, eval: int8
per-token asymmetric activations + int4 weights per group of 32, 16 on the small MLP; opset 21;
the default target: weights INT4 + blocked DequantizeLinear, activations torchao's arithmetic)
and `torchao_qat+ort_target` (QDQ activations, MatMulNBits). torch.onnx exports the same model at the
same opset in every row of a flow. onnxport's PT2E and QAT rows (every flow but `float` and
the weight-only ones) are exported with `target="onnxruntime"`, whose Uint8WeightsPass stores
the int8 weights as uint8 so ORT's fused kernels are its exact U8U8 ones on AVX2 CPUs without
VNNI; the default target writes the int8 weights as quantized (what the `no-opt` error of
torch.onnx's column, the same int8 QDQ, shows is exact without ORT's fused kernels).
Latency: median of `--repeat` runs, ORT CPU, 1 intra-op thread, all graph optimizations.
`kernels` counts QLinearConv/QLinearMatMul/QGemm/MatMulInteger/MatMulIntegerToFloat/
DynamicQuantizeMatMul/MatMulNBits nodes in ORT's optimized model.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

import onnxport  # noqa: E402
from onnxport.passes import run_passes  # noqa: E402
from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass  # noqa: E402
from tests.quantization import _helpers as h  # noqa: E402

KERNELS = ("QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "MatMulIntegerToFloat",
           "DynamicQuantizeMatMul", "MatMulNBits", "QLinearAdd", "QLinearMul")


def bert():
    from tests.quantization.test_transformers import bert as make
    return make(intermediate_size=64), (torch.randint(0, 99, (2, 8)),)


def llama():
    from tests.quantization.test_transformers import llama as make
    return make(intermediate_size=64), (torch.randint(0, 99, (2, 8)),)


def mlp_large():
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).eval()
    return model, (torch.randn(8, 512),)


MODELS = {"cnn": h.cnn, "mlp": h.mlp, "mlp_large": mlp_large, "bert": bert, "llama": llama}
FLOWS = {
    "cnn": ["float", "x86", "xnnpack_per_channel", "x86_dynamic"],
    "mlp": ["float", "x86", "xnnpack_per_channel", "x86_dynamic", "xnnpack_dynamic",
            "xnnpack_qat", "int8_weight_only", "int4_weight_only", "int4_wo+ort_target",
            "torchao_qat", "torchao_qat+ort_target"],
    "mlp_large": ["float", "x86", "xnnpack_per_channel", "x86_dynamic", "xnnpack_qat",
                  "int8_weight_only", "int4_weight_only", "int4_wo+ort_target",
                  "int4_wo+nbits_acc4", "torchao_qat", "torchao_qat+ort_target"],
    "bert": ["float", "xnnpack_per_channel", "torchao_qat", "torchao_qat+ort_target"],
    "llama": ["float", "x86", "torchao_qat", "torchao_qat+ort_target"],
}


def quantize(name: str, flow: str):
    torch.manual_seed(0)
    model, example = MODELS[name]()
    if flow == "float":
        return model, example, 18
    if flow.startswith("int4_w"):
        from torchao.quantization import IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup
        group = 16 if name == "mlp" else 32  # the MLP's first layer has K = 16
        quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group)))
        return model, example, 21
    if flow == "int8_weight_only":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        quantize_(model, Int8WeightOnlyConfig())
        return model, example, 18
    if flow == "xnnpack_qat":
        return qat(model, example), example, 18
    if flow.startswith("torchao_qat"):
        from torchao.quantization import quantize_
        from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig
        group = 16 if name == "mlp" else 32  # the MLP's first layer has K = 16
        quantize_(model, QATConfig(
            activation_config=IntxFakeQuantizeConfig(torch.int8, "per_token", is_symmetric=False),
            weight_config=IntxFakeQuantizeConfig(torch.int4, group_size=group), step="prepare"))
        return model.eval(), example, 21
    ints = name in ("bert", "llama")
    calibrate = (lambda: [torch.randint(0, 99, (2, 8))]) if ints else None
    return h.pt2e(model, example, flow, calibrate=calibrate), example, 18


def qat(model, example):
    """prepare_qat_pt2e (XNNPACK, per channel), a few calibration steps, eval, observers off."""
    from torchao.quantization.pt2e import disable_observer, move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_qat=True))
    prepared = prepare_qat_pt2e(torch.export.export(model.train(), example).module(), quantizer)
    for _ in range(4):
        prepared(*[torch.randn_like(t) for t in example])
    move_exported_model_to_eval(prepared)
    prepared.apply(disable_observer)
    return prepared


SHORT = {"QLinearConv": "QLConv", "QLinearMatMul": "QLMatMul", "MatMulInteger": "MMInt",
         "MatMulIntegerToFloat": "MMIntToFloat", "DynamicQuantizeMatMul": "DynQMatMul",
         "MatMulNBits": "MatMulNBits", "QLinearAdd": "QLAdd", "QLinearMul": "QLMul",
         "QGemm": "QGemm"}


def measure(proto: onnx.ModelProto, example, repeat: int) -> tuple[int, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        onnx.save(proto, path)
        size = os.path.getsize(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        options.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        found = collections.Counter(n.op_type for n in
                                    onnx.load(options.optimized_model_filepath).graph.node
                                    if n.op_type in KERNELS)
        kernels = " ".join(f"{SHORT[k]}x{v}" for k, v in sorted(found.items())) or "-"
    feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), example)}
    for _ in range(3):
        session.run(None, feed)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return size, 1000 * statistics.median(times), kernels


def export(exporter: str, model, example, flow: str, opset: int) -> onnx.ModelProto:
    if exporter == "onnxport":
        pt2e = flow not in ("float", "int8_weight_only", "int4_weight_only", "int4_wo+nbits_acc4",
                            "torchao_qat")
        target = "onnxruntime" if flow.endswith("+ort_target") or pt2e else "onnx"
        prog = onnxport.export(model, example, opset_version=opset, target=target)
        if flow.endswith("+nbits_acc4"):
            run_passes(prog.model, [FuseMatMulNBitsPass(bits=(4, 8), accuracy_level=4)])
        return prog.model_proto
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        prog = torch.onnx.export(model, example, dynamo=True, opset_version=opset)
    return prog.model_proto


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        for flow in FLOWS[name]:
            model, example, opset = quantize(name, flow)
            with torch.no_grad():
                eager = model(*example)
            eager = eager[0] if isinstance(eager, (tuple, list)) else eager
            row = [name, flow]
            for exporter in ("onnxport", "torch.onnx"):
                try:
                    proto = export(exporter, model, example, flow, opset)
                    size, ms, kernels = measure(proto, example, args.repeat)
                    errs = []
                    for optimize in (True, False):  # ORT's fused kernels / the plain graph
                        got = h.run_ort(h.ort_session(proto, optimize=optimize), example)[0]
                        errs.append(float(np.abs(got - eager.detach().numpy()).max()))
                    row += [f"ok ({errs[0]:.0e} / {errs[1]:.0e})", f"{size / 1024:.1f} KB",
                            f"{ms:.3f}", kernels]
                except Exception as e:  # noqa: BLE001  (reported in the table)
                    row += [f"fails: {type(e).__name__}", "-", "-", "-"]
            rows.append(row)
            print(" | ".join(row), file=sys.stderr, flush=True)
    header = ["model", "flow", "onnxport ok (max err opt / no-opt)", "size", "ORT ms",
              "ORT kernels", "torch.onnx ok (max err opt / no-opt)", "size", "ORT ms",
              "ORT kernels"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
