#!/usr/bin/env python
"""The first wrong node: onnxport beside torch.onnx 2.13, and onnxport on a 1.1B Llama.

    python benchmarks/bench_verify.py side-by-side      # tests/verify's models, both exporters
    python benchmarks/bench_verify.py llama-1b          # TinyLlama-1.1B's shape, random weights

side-by-side: each of tests/verify's models (MLP, CNN at another batch, BERT and Llama at
other batch and sequence sizes) is exported with a deliberately wrong translation and
without, by onnxport and by torch.onnx (dynamo=True); `verify_onnx_program(...,
compare_intermediates=True)` of each exporter names the first value over 1e-3, and the time
it took is printed.

llama-1b: a LlamaForCausalLM with TinyLlama-1.1B's configuration (hidden 2048, 22 layers,
random weights), its silu wrong in layer 11 only, exported with `export(verify=True)`: the
VerificationError names the first wrong node. The peak resident memory (ru_maxrss) is read
after the export alone and after verification, in one process; run it on an idle machine.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnxport  # noqa: E402
from onnxport.verification import verify_onnx_program  # noqa: E402
from tests.verify import models as m  # noqa: E402


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def _text_dims() -> dict[str, Any]:
    return {"input_ids": {0: torch.export.Dim("batch", min=1, max=16),
                          1: torch.export.Dim("seq", min=2, max=64)}}


def side_by_side() -> None:
    import torch.onnx.verification

    tanh = {torch.ops.aten.tanh.default: m.sigmoid_for_tanh}
    their_tanh = {torch.ops.aten.tanh.default: m.torch_onnx_sigmoid}
    cases = [
        ("MLP", m.MLP().eval(), (torch.randn(4, 6),), (torch.randn(4, 6),), None, tanh,
         their_tanh, "tanh"),
        ("CNN, batch 2 -> 5", m.CNN().eval(), (torch.randn(2, 3, 10, 10),),
         (torch.randn(5, 3, 10, 10),), {"x": {0: torch.export.Dim("batch", min=1, max=64)}},
         tanh, their_tanh, "tanh"),
        ("BERT (tanh in the pooler), (2,8) -> (3,5)", m.bert(), (m.ids(2, 8),), (m.ids(3, 5),),
         _text_dims(), tanh, their_tanh, "tanh"),
        ("Llama (silu wrong in layer 1 / all layers), (2,8) -> (1,11)", m.llama(),
         (m.ids(2, 8),), (m.ids(1, 11),), _text_dims(),
         {torch.ops.aten.silu.default: m.silu_wrong_in_layer_1},
         {torch.ops.aten.silu.default: m.torch_onnx_sigmoid}, "silu_1 / silu"),
    ]
    print("| model | fault | onnxport: first over 1e-3 | s | torch.onnx: first over 1e-3 | s |")
    print("|---|---|---|---|---|---|")
    for name, model, example, check, dims, ours, theirs, wrong in cases:
        for faulty in (True, False):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = onnxport.export(model, example, dynamic_shapes=dims,
                                          custom_translation_table=ours if faulty else None)
                t0 = time.perf_counter()
                infos = verify_onnx_program(program, check, compare_intermediates=True)
                ours_s = time.perf_counter() - t0
                their_program = torch.onnx.export(
                    model, example, dynamo=True, dynamic_shapes=dims, verbose=False,
                    custom_translation_table=theirs if faulty else None)
                t0 = time.perf_counter()
                their_infos = torch.onnx.verification.verify_onnx_program(
                    their_program, check, compare_intermediates=True)
                theirs_s = time.perf_counter() - t0
            print(f"| {name} | {wrong if faulty else 'none'} | {m.first_over(infos)} "
                  f"({len(infos)} values) | {ours_s:.1f} | {m.first_over(their_infos)} "
                  f"({len(their_infos)} values) | {theirs_s:.1f} |", flush=True)


def _silu_wrong_in_layer(layer: int) -> Any:
    def silu(g: Any, x: Any) -> Any:
        stack = g.fx_node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else ""
        if f".layers.{layer}." in path + ".":
            return g.op("Sigmoid", x)
        return g.op("Mul", x, g.op("Sigmoid", x))
    return silu


def llama_1b(batch: int, seq: int) -> None:
    import transformers

    from onnxport.errors import VerificationError

    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
        attn_implementation="eager", use_cache=False)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = m.Logits(transformers.LlamaForCausalLM(config)).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"built LlamaForCausalLM ({params / 1e9:.2f}B parameters, "
          f"{params * 4 / 1024**3:.1f} GiB) in {time.perf_counter() - t0:.0f}s; "
          f"peak RSS {_rss_gib():.1f} GiB", flush=True)
    ids = m.ids(batch, seq)
    table = {torch.ops.aten.silu.default: _silu_wrong_in_layer(11)}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = onnxport.export(model, (ids,), custom_translation_table=table)
        program(ids)   # one ONNX Runtime run: what an export with verify=True needs anyway
    print(f"export + one ONNX Runtime run: {time.perf_counter() - t0:.0f}s; "
          f"peak RSS {_rss_gib():.1f} GiB", flush=True)
    del program
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnxport.export(model, (ids,), custom_translation_table=table, verify=True)
        print("verify=True passed (unexpected)")
    except VerificationError as e:
        print(f"export(verify=True) failed as expected in {time.perf_counter() - t0:.0f}s; "
              f"peak RSS {_rss_gib():.1f} GiB; its message:\n{e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["side-by-side", "llama-1b"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=32)
    ns = parser.parse_args()
    torch.set_num_threads(2)
    if ns.what == "side-by-side":
        side_by_side()
    else:
        llama_1b(ns.batch, ns.seq)


if __name__ == "__main__":
    main()
