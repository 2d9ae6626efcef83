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
also as `int4_wo+ort_target` (onnxport `target="onnxruntime"`: MatMulNBits at the target's
default accuracy level 4 since 2026-12-06, level 0 (exact) before) and `int4_wo+nbits_acc4`
(the default target's file + FuseMatMulNBitsPass(bits=(4, 8), accuracy_level=4): ORT
quantizes the activations to int8 per block, faster, not exact), `torchao_qat` (QATConfig prepare, eval: int8
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

`--latency` measures instead what weight-only quantization buys in ORT (issue 38), in one run:
an MLP 512-2048-512 at M=1 and M=64 (dynamic rows), and a transformers Llama (hidden 512, 4
layers, intermediate 1376, 8 heads, 4 kv heads, vocab 32000, random weights N(0, 0.05)) with
its KV cache (`onnxport.llm.export_decoder_with_cache`, opset 21): prefill (64 tokens, empty
cache) and decode (1 token after those 64), each quantized with torchao
`IntxWeightOnlyConfig(int4, PerGroup(32))` and `Int8WeightOnlyConfig()`. Graphs: float
(onnxport default target; and ORT target, whose GQA/skip-norm fusions also speed up float),
onnxport default target (`onnx`), onnxport `target="onnxruntime"` (MatMulNBits accuracy level
4, block 32: the default `OnnxRuntimeTarget()`), the same at accuracy level 0 (exact), and
torch.onnx (the same model, opset 21). Per (model, scheme) the graphs run alternately in
rotating order, `--repeat` rounds; ms is the median; `err` max |ORT - eager| of the output
(logits), against the float model for float graphs and the quantized one otherwise.

    flock /tmp/bench.lock python benchmarks/bench_quantized.py --latency --out FILE
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
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
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


LLAMA = dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
             bos_token_id=1, eos_token_id=2, pad_token_id=0)
PROMPT = 64


def _quantize_wo(model: torch.nn.Module, scheme: str) -> torch.nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    if scheme == "int4":
        quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    elif scheme == "int8":
        quantize_(model, Int8WeightOnlyConfig())
    return model


def _mlp_512(scheme: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).eval()
    return _quantize_wo(model, scheme)


def _llama_512(scheme: str) -> torch.nn.Module:
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    with torch.no_grad():   # a realistic weight scale (init std 0.02 is near-flat)
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.05)
    return _quantize_wo(model, scheme)


def _mlp_exports(model: torch.nn.Module, exporter: str, target) -> onnx.ModelProto:
    x = torch.randn(8, 512)
    shapes = ({0: torch.export.Dim("rows")},)
    if exporter == "onnxport":
        return onnxport.export(model, (x,), opset_version=21, dynamic_shapes=shapes,
                               target=target).model_proto
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return torch.onnx.export(model, (x,), dynamo=True, opset_version=21,
                                 dynamic_shapes=shapes).model_proto


def _llama_exports(model: torch.nn.Module, exporter: str, target) -> onnx.ModelProto:
    from onnxport import llm
    if exporter == "onnxport":
        return llm.export_decoder_with_cache(model, opset_version=21, target=target).model_proto
    layers = model.config.num_hidden_layers
    ids = torch.randint(0, model.config.vocab_size, (2, 3))
    mask = torch.ones(2, 7, dtype=torch.long)
    kv = [(torch.randn(k.shape), torch.randn(v.shape)) for k, v in llm.empty_past(model.config, 2, 4)]
    b, s, p = torch.export.Dim("batch"), torch.export.Dim("sequence"), torch.export.Dim("past")
    cache = {0: b, 2: p}
    shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: torch.export.Dim.AUTO},
              "past_key_values": [(cache, cache) for _ in range(layers)]}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return torch.onnx.export(llm.DecoderWithCache(model).eval(), (ids, mask, kv), dynamo=True,
                                 dynamic_shapes=shapes, opset_version=21,
                                 input_names=llm.cache_input_names(layers),
                                 output_names=llm.cache_output_names(layers)).model_proto


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _cases(kind: str, session: ort.InferenceSession, model: torch.nn.Module
           ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The feeds of each timed case and eager's output for it."""
    if kind == "mlp":
        torch.manual_seed(2)
        xs = {"M=1": torch.randn(1, 512), "M=64": torch.randn(64, 512)}
        name = session.get_inputs()[0].name
        with torch.no_grad():
            return ({k: {name: x.numpy()} for k, x in xs.items()},
                    {k: model(x).numpy() for k, x in xs.items()})
    torch.manual_seed(2)
    ids = torch.randint(3, LLAMA["vocab_size"], (1, PROMPT + 1))
    with torch.no_grad():
        logits = model(ids).logits.numpy()
    inputs = {i.name: i for i in session.get_inputs()}
    heads = LLAMA["num_key_value_heads"]
    head_dim = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    empty = {n: np.zeros((1, heads, 0, head_dim), np.float32) for n in inputs
             if n.startswith("past_key_values.")}
    prefill = {"input_ids": ids[:, :PROMPT].numpy(),
               "attention_mask": np.ones((1, PROMPT), np.int64), **empty}
    if "position_ids" in inputs:
        prefill["position_ids"] = np.arange(PROMPT, dtype=np.int64)[None]
    outs = dict(zip([o.name for o in session.get_outputs()], session.run(None, prefill)))
    decode = {"input_ids": ids[:, PROMPT:].numpy(),
              "attention_mask": np.ones((1, PROMPT + 1), np.int64),
              **{n: outs[n.replace("past_key_values", "present")] for n in empty}}
    if "position_ids" in inputs:
        decode["position_ids"] = np.array([[PROMPT]], np.int64)
    return ({"prefill 64": prefill, "decode 1": decode},
            {"prefill 64": logits[:, :PROMPT], "decode 1": logits[:, PROMPT:]})


GRAPHS = ("float", "float ort-target", "onnxport", "onnxport ort-target",
          "onnxport ort-target acc0", "torch.onnx")


def _builder_graphs(model: torch.nn.Module, python: str, tmp: str) -> dict[str, onnx.ModelProto]:
    """The ORT GenAI builder's `-p fp32 -e cpu` and `-p int4 -e cpu` graphs of the float Llama
    (run by `python`, which has onnxruntime-genai: a benchmark-only dependency)."""
    import subprocess

    from bench_decode import save_tokenizer

    ckpt = os.path.join(tmp, "ckpt")
    model.save_pretrained(ckpt)
    save_tokenizer(Path(ckpt), LLAMA["vocab_size"])
    graphs = {}
    for precision in ("fp32", "int4"):
        out = os.path.join(tmp, precision)
        subprocess.run([python, "-m", "onnxruntime_genai.models.builder", "-i", ckpt, "-o", out,
                        "-p", precision, "-e", "cpu", "-c", os.path.join(tmp, "cache")],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        graphs[f"builder {precision}"] = onnx.load(os.path.join(out, "model.onnx"))
    return graphs


def latency(repeat: int, builder_python: str | None = None) -> list[str]:
    from onnxport.options import OnnxRuntimeTarget
    lines = ["| model | case | weights | " + " | ".join(f"{g} ms (err)" for g in GRAPHS)
             + " | onnxport / torch.onnx | ort-target / float | ort-target / float ort-target |",
             "|" + " --- |" * (len(GRAPHS) + 6)]
    builder_rows: list[str] = []
    makers = {"mlp 512-2048-512": (_mlp_512, _mlp_exports, "mlp"),
              "llama h512 x4": (_llama_512, _llama_exports, "llama")}
    for label, (make, export_with, kind) in makers.items():
        fmodel = make("float")
        float_graphs = {"float": export_with(fmodel, "onnxport", "onnx"),
                        "float ort-target": export_with(fmodel, "onnxport", "onnxruntime")}
        for scheme in ("int4", "int8"):
            model = make(scheme)
            protos = dict(float_graphs)
            for name, exporter, target in (
                    ("onnxport", "onnxport", "onnx"),
                    ("onnxport ort-target", "onnxport", OnnxRuntimeTarget()),
                    ("onnxport ort-target acc0", "onnxport",
                     OnnxRuntimeTarget(int4_accuracy_level=0)),
                    ("torch.onnx", "torch.onnx", "onnx")):
                try:
                    protos[name] = export_with(model, exporter, target)
                except Exception as e:  # noqa: BLE001  (reported in the table)
                    print(f"{label} {scheme} {name}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
            if kind == "llama" and scheme == "int4" and builder_python:
                with tempfile.TemporaryDirectory() as tmp:
                    protos.update(_builder_graphs(fmodel, builder_python, tmp))
            sessions = {n: _session(p) for n, p in protos.items()}
            feeds, errs = {}, {}
            for n, sess in sessions.items():
                cases, want = _cases(kind, sess, model)
                _, want_float = _cases(kind, sess, fmodel)
                feeds[n] = cases
                for case, feed in cases.items():
                    got = sess.run(None, feed)[0]
                    float_err = float(np.abs(got - want_float[case]).max())
                    errs[(n, case)] = float(np.abs(got - want[case]).max())
                    if n.startswith(("float", "builder")):
                        errs[(n, case)] = float_err
                    errs[(n, case, "float")] = float_err
            times = collections.defaultdict(list)
            names = list(sessions)
            for r in range(repeat + 2):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    for case, feed in feeds[n].items():
                        start = time.perf_counter()
                        sessions[n].run(None, feed)
                        if r >= 2:  # two warm-up rounds
                            times[(n, case)].append(time.perf_counter() - start)
            for case in feeds[names[0]]:
                ms = {n: 1000 * statistics.median(times[(n, case)]) for n in names}
                cells = [f"{ms[g]:.3f} ({errs[(g, case)]:.0e})" if g in ms else "fails"
                         for g in GRAPHS]
                ratios = [f"{ms[a] / ms[b]:.2f}" if a in ms and b in ms else "-" for a, b in (
                    ("onnxport", "torch.onnx"), ("onnxport ort-target", "float"),
                    ("onnxport ort-target", "float ort-target"))]
                row = (f"| {label} | {case} | {scheme} | " + " | ".join(cells) + " | "
                       + " | ".join(ratios) + " |")
                lines.append(row)
                print(row, file=sys.stderr, flush=True)
                if "builder int4" in ms:
                    builder_rows.append(
                        f"| {case} | {ms['builder fp32']:.3f} ({errs[('builder fp32', case)]:.0e}) | "
                        f"{ms['builder int4']:.3f} ({errs[('builder int4', case)]:.0e}) | "
                        f"{ms['builder int4'] / ms['builder fp32']:.2f} | "
                        f"{ms['onnxport ort-target']:.3f} "
                        f"({errs[('onnxport ort-target', case, 'float')]:.0e}) | "
                        f"{ms['onnxport ort-target'] / ms['builder int4']:.2f} |")
            del sessions
    if builder_rows:
        lines += ["", "ORT GenAI builder anchor (same run, same rounds as the Llama int4 row; "
                  "errors against the FLOAT eager model: the quantization error included):", "",
                  "| llama h512 x4 | builder fp32 ms (err) | builder int4 ms (err) | builder int4 / "
                  "fp32 | onnxport ort-target int4 ms (err vs float) | onnxport / builder int4 |",
                  "| --- | --- | --- | --- | --- | --- |", *builder_rows]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--latency", action="store_true",
                        help="the weight-only latency table (MLP and Llama prefill/decode)")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    parser.add_argument("--builder-python", default=None,
                        help="a python with onnxruntime-genai: adds the builder's fp32/int4 Llama")
    args = parser.parse_args()
    if args.latency:
        import datetime
        head = (f"Weight-only latency, {datetime.date.today()}: ORT {ort.__version__} CPU, "
                f"1 thread, median of {args.repeat} alternating rounds, torch {torch.__version__}")
        text = "\n".join([head, "", *latency(args.repeat, args.builder_python)])
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")
        return
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
