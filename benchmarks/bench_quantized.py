"""Quantized models through onnxport and torch.onnx, in one run: file size, ORT latency, and the
integer kernels ONNX Runtime runs after its graph optimizations.

    python benchmarks/bench_quantized.py                       # every model and flow
    python benchmarks/bench_quantized.py --models cnn mlp --repeat 50

Models: CNN (conv 3->8 + linear), MLP (16-32-8), MLP-large (512-2048-512, where file size
and latency show what quantization buys), small BERT and small Llama (hidden 32, 2
layers, vocab 99, random weights). Flows: `float` (no quantization), PT2E `x86`,
`xnnpack_per_channel`, `x86_dynamic`, `xnnpack_dynamic` (onnxport rows of the dynamic flows
run FuseDynamicQuantMatMulPass), and torchao weight-only `int4_weight_only` (opset 21).
Latency: median of `--repeat` runs, ORT CPU, 1 intra-op thread, all graph optimizations.
`kernels` counts QLinearConv/QLinearMatMul/QGemm/MatMulInteger/MatMulIntegerToFloat/
DynamicQuantizeMatMul/MatMulNBits nodes in ORT's optimized model.
"""

from __future__ import annotations

import argparse
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
from onnxport.passes.fuse_dynamic_quant import FuseDynamicQuantMatMulPass  # noqa: E402
from tests.quantization import _helpers as h  # noqa: E402

KERNELS = ("QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "MatMulIntegerToFloat",
           "DynamicQuantizeMatMul", "MatMulNBits", "QLinearAdd", "QLinearMul")


def bert():
    from tests.quantization.test_transformers import bert as make
    return make(), (torch.randint(0, 99, (2, 8)),)


def llama():
    from tests.quantization.test_transformers import llama as make
    return make(), (torch.randint(0, 99, (2, 8)),)


def mlp_large():
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).eval()
    return model, (torch.randn(8, 512),)


MODELS = {"cnn": h.cnn, "mlp": h.mlp, "mlp_large": mlp_large, "bert": bert, "llama": llama}
FLOWS = {
    "cnn": ["float", "x86", "xnnpack_per_channel", "x86_dynamic"],
    "mlp": ["float", "x86", "xnnpack_per_channel", "x86_dynamic", "xnnpack_dynamic",
            "int4_weight_only"],
    "mlp_large": ["float", "x86", "xnnpack_per_channel", "x86_dynamic", "int4_weight_only"],
    "bert": ["float", "xnnpack_per_channel"],
    "llama": ["float", "x86"],
}


def quantize(name: str, flow: str):
    torch.manual_seed(0)
    model, example = MODELS[name]()
    if flow == "float":
        return model, example, 18
    if flow == "int4_weight_only":
        from torchao.quantization import IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup
        quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(16)))
        return model, example, 21
    ints = name in ("bert", "llama")
    calibrate = (lambda: [torch.randint(0, 99, (2, 8))]) if ints else None
    return h.pt2e(model, example, flow, calibrate=calibrate), example, 18


def measure(proto: onnx.ModelProto, example, repeat: int) -> tuple[int, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        onnx.save(proto, path)
        size = os.path.getsize(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        options.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        kernels = sum(1 for n in onnx.load(options.optimized_model_filepath).graph.node
                      if n.op_type in KERNELS)
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
        prog = onnxport.export(model, example, opset_version=opset)
        if flow.endswith("_dynamic"):
            run_passes(prog.model, [FuseDynamicQuantMatMulPass()])
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
                    session = h.ort_session(proto)
                    got = h.run_ort(session, example)[0]
                    err = float(np.abs(got - eager.detach().numpy()).max())
                    row += [f"ok ({err:.1e})", f"{size / 1024:.1f} KB", f"{ms:.3f}", str(kernels)]
                except Exception as e:  # noqa: BLE001  (reported in the table)
                    row += [f"fails: {type(e).__name__}", "-", "-", "-"]
            rows.append(row)
            print(" | ".join(row), file=sys.stderr, flush=True)
    header = ["model", "flow", "onnxport ok (max err)", "size", "ORT ms", "int kernels",
              "torch.onnx ok (max err)", "size", "ORT ms", "int kernels"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
