"""Mixture-of-experts LLMs: onnxport beside torch.onnx on the same tiny models, same run.

    python benchmarks/bench_moe.py [--only mixtral,olmoe] [--exporters onnxport,torch.onnx]
                                   [--decode-steps 32] [--decode-size tiny|small] [--out FILE]

For each family of tests/models/moe.py (tiny configs, random weights): export with a dynamic
batch and sequence (`dynamo=True`), run in ONNX Runtime at two sizes ((2, 8) and (3, 5)) and
compare the logits with eager (rtol 1e-3, atol 1e-4, as the transformers zoo). A case passes
when the export succeeds and both sizes match. Seconds are the export call's.

Then decode: each family's KV-cache graph (`onnxport.llm.export_decoder_with_cache`), one ORT
session, median milliseconds per decoded token over `--decode-steps` greedy steps after a
16-token prompt (batch 1), for the standard graph (`target="onnx"`) and the ONNX Runtime
target (`target="onnxruntime"`: com.microsoft.MoE where the layer's routing is ORT's, see
passes/onnxruntime/fuse_moe.py; the table gives how many MoE nodes it has). `--decode-size
small` decodes with a larger config (hidden 512, 8 experts of 1024, 4 layers) where the
experts' products dominate the step, not the graph's fixed costs.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import statistics
import sys
import time
import traceback
import warnings
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tests.models import moe  # noqa: E402

SIZES = [(2, 8), (3, 5)]
RTOL, ATOL = 1e-3, 1e-4


def _run_onnx(path_or_program: Any, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    import onnxruntime as ort

    if isinstance(path_or_program, str):
        session = ort.InferenceSession(path_or_program, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        feed = {n: inputs[n].numpy() for n in names}
        return session.run(None, feed)[0]
    return np.asarray(path_or_program(**inputs)[0])


def export_case(family: str, exporter: str, tmp: str) -> dict[str, Any]:
    model = moe.build(family)
    example = moe.inputs(*SIZES[0])
    t0 = time.perf_counter()
    try:
        if exporter == "onnxport":
            import onnxport

            target: Any = onnxport.export(model, (), kwargs=example,
                                          dynamic_shapes=moe.DYNAMIC, dynamo=True)
        else:
            importlib.import_module("torch.onnx")
            path = os.path.join(tmp, f"{family}-torch_onnx.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, (), path, kwargs=example, dynamic_shapes=moe.DYNAMIC,
                                  dynamo=True)
            target = path
    except Exception as e:  # noqa: BLE001  (reported in the table)
        cause = e.__cause__ if e.__cause__ is not None else e
        first = (str(cause).splitlines() or [""])[0]
        return {"status": "export failed", "error": f"{type(cause).__name__}: {first[:160]}",
                "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    worst = 0.0
    for batch, sequence in SIZES:
        inputs = moe.inputs(batch, sequence)
        with torch.no_grad():
            expected = model(**inputs).logits.numpy()
        try:
            actual = _run_onnx(target, inputs)
        except Exception as e:  # noqa: BLE001
            return {"status": "ORT failed", "error": f"{type(e).__name__}: {str(e)[:160]}",
                    "seconds": seconds}
        if actual.shape != expected.shape or not np.allclose(actual, expected, rtol=RTOL, atol=ATOL):
            return {"status": "mismatch", "seconds": seconds,
                    "error": f"at {batch}x{sequence}: max diff "
                             f"{np.abs(actual - expected).max() if actual.shape == expected.shape else actual.shape}"}
        worst = max(worst, float(np.abs(actual - expected).max()))
    return {"status": "pass", "seconds": seconds, "max_diff": worst}


SMALL = dict(hidden_size=512, intermediate_size=1024, moe_intermediate_size=1024,
             shared_expert_intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, head_dim=64, vocab_size=1000)


def _small(family: str) -> dict[str, Any]:
    experts = {k: 8 for k in ("num_local_experts", "num_experts", "n_routed_experts")
               if k in moe.FAMILIES[family]}
    extra: dict[str, Any] = {}
    if family == "deepseek_v3":   # latent attention: its head dims are the rope/nope ones
        extra = {"num_key_value_heads": 8, "kv_lora_rank": 64, "q_lora_rank": 64,
                 "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32,
                 "head_dim": 32}
    if family == "gpt_oss":       # one layer type per layer; a window the decode stays in
        extra = {"layer_types": ["sliding_attention", "full_attention"] * 2,
                 "sliding_window": 512}
    return {**SMALL, **experts, **extra}


def decode_ms(family: str, steps: int, target: str = "onnx", size: str = "tiny"
              ) -> tuple[float, int]:
    """(median ms per decoded token, MoE nodes in the graph)."""
    import onnxruntime as ort

    from onnxport import llm

    overrides = _small(family) if size == "small" else {}
    model = moe.build(family, use_cache=True, **overrides)
    program = llm.export_decoder_with_cache(model, target=target)
    fused = sum(1 for n in program.model.graph if n.op_type == "MoE")
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    layers = sum(1 for n in names if n.endswith(".key"))
    prompt = torch.randint(3, model.config.vocab_size, (1, 16),
                           generator=torch.Generator().manual_seed(0))
    feed: dict[str, np.ndarray] = {"input_ids": prompt.numpy(),
                                   "attention_mask": np.ones((1, 16), dtype=np.int64)}
    for graph_input in session.get_inputs():
        # an empty past of the graph's own head dims (DeepSeek's differ from its config's)
        if graph_input.name.startswith("past_key_values."):
            dims = [d if isinstance(d, int) else 0 for d in graph_input.shape]
            dims[0] = 1
            feed[graph_input.name] = np.zeros(dims, dtype=np.float32)
    times = []
    total = 16
    for step in range(steps + 1):
        t0 = time.perf_counter()
        out = session.run(None, feed)
        if step:
            times.append(time.perf_counter() - t0)
        token = out[0][:, -1].argmax(-1)[:, None].astype(np.int64)
        total += 1
        feed = {"input_ids": token, "attention_mask": np.ones((1, total), dtype=np.int64)}
        for i in range(layers):
            feed[f"past_key_values.{i}.key"] = out[1 + 2 * i]
            feed[f"past_key_values.{i}.value"] = out[2 + 2 * i]
    return 1000 * statistics.median(times), fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--exporters", default="onnxport,torch.onnx")
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--decode-size", choices=["tiny", "small"], default="tiny")
    parser.add_argument("--out", default="")
    opts = parser.parse_args()
    families = [f for f in opts.only.split(",") if f] or list(moe.FAMILIES)
    exporters = [e for e in opts.exporters.split(",") if e]
    import tempfile

    results: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            for exporter in exporters:
                try:
                    results[family, exporter] = export_case(family, exporter, tmp)
                except Exception:  # noqa: BLE001
                    results[family, exporter] = {"status": "crashed", "seconds": 0.0,
                                                 "error": traceback.format_exc(limit=1)[-160:]}
                r = results[family, exporter]
                print(f"{family:12} {exporter:10} {r['status']:13} {r['seconds']:6.1f}s "
                      f"{r.get('error', '')}", flush=True)
    decode: dict[tuple[str, str], tuple[float, int]] = {}
    targets = ("onnx", "onnxruntime")
    if opts.decode_steps and "onnxport" in exporters:
        for family in families:
            for target in targets:
                try:
                    decode[family, target] = decode_ms(family, opts.decode_steps, target,
                                                       opts.decode_size)
                except Exception as e:  # noqa: BLE001
                    print(f"decode {family} {target}: {type(e).__name__}: {e}", flush=True)
                else:
                    ms, fused = decode[family, target]
                    print(f"decode {family} {target}: {ms:.2f} ms/token ({fused} MoE nodes)",
                          flush=True)

    def cell(family: str, target: str) -> str:
        if (family, target) not in decode:
            return "failed"
        ms, fused = decode[family, target]
        return f"{ms:.2f}" + (f" ({fused} MoE)" if target == "onnxruntime" else "")

    lines = [f"# MoE LLMs, {datetime.date.today()}: onnxport beside torch.onnx", "",
             f"torch {torch.__version__}; tiny configs of tests/models/moe.py; dynamic batch and "
             f"sequence; ORT vs eager at {SIZES} (rtol {RTOL}, atol {ATOL}). Decode: "
             f"{opts.decode_size} configs, batch 1, median ms per token over "
             f"{opts.decode_steps} steps.", "",
             "| family | " + " | ".join(f"{e} | {e} s" for e in exporters)
             + " | decode ms/token, standard graph | decode ms/token, ORT target |",
             "| --- | " + " | ".join("--- | ---:" for _ in exporters) + " | ---: | ---: |"]
    for family in families:
        cells = []
        for exporter in exporters:
            r = results[family, exporter]
            cells += [r["status"] + (f" ({r['error']})" if r["status"] != "pass" else ""),
                      f"{r['seconds']:.1f}"]
        lines.append(f"| {family} | " + " | ".join(cells)
                     + f" | {cell(family, 'onnx')} | {cell(family, 'onnxruntime')} |")
    for exporter in exporters:
        passed = sum(results[f, exporter]["status"] == "pass" for f in families)
        lines.append(f"\n{exporter}: {passed} of {len(families)} families pass.")
    text = "\n".join(lines) + "\n"
    print(text)
    if opts.out:
        with open(opts.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
