"""ONNX Runtime LLM decode latency: onnxport vs torch.onnx vs the ONNX Runtime GenAI builder.

A random-weight Llama checkpoint (hidden 512, 4 layers, 8 heads, 2 key/value heads (GQA),
fp32; nothing downloaded) is saved with `save_pretrained`, and each graph runs the same greedy
generation in ONNX Runtime (CPU, 1 intra-op thread): a prefill of `--prompt` (128) tokens with
an empty cache, then `--new` per-token decode steps, each feeding the previous step's present
keys/values back (a growing KV cache). The graphs:

* `onnxport`             `onnxport.llm.export_decoder_with_cache(model)` (opset 18, defaults);
* `onnxport opset 23`    the same at `opset_version=23` (rotary fused into RotaryEmbedding);
* `onnxport 23 w/o rotary` opset 23 through the default passes minus `FuseRotaryPass`;
* `onnxport ort-target`  `target="onnxruntime"` (opset 18 + the contrib-op passes: attention
                         as GroupQueryAttention with rotary inside, Q/K/V packed in one MatMul);
* `onnxport ort-target 23` the same at `opset_version=23`;
* `onnxport ort-target 23 unpacked` the same with `FuseGroupQueryAttentionPass(pack_qkv=False)`
                         (three Q/K/V MatMuls: what packing is worth);
* `torch.onnx`           `torch.onnx.export(DecoderWithCache(model), dynamo=True)`;
* `genai builder`        `python -m onnxruntime_genai.models.builder -i <dir> -o <out> -p fp32
                         -e cpu` (onnxruntime-genai is a benchmark-only dependency).

One round runs the whole generation once per graph, in a rotating order; after `--warmup`
rounds, `--repeat` rounds are timed. The table gives the median prefill time, the median
per-token decode time over every decode step of every timed round, its ratio to the builder's,
the median decode CPU time of the calling thread (which runs the kernels at 1 intra-op thread:
on a shared, loaded machine it leaves out the time other processes hold the cores) and its
ratio, the node count of the file and after ORT's own optimizations, and whether the greedy
tokens equal eager `model.generate(do_sample=False)`.

    python benchmarks/bench_decode.py --out benchmarks/results/decode_<date>.md
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

from onnxport import llm

CONFIG = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="float32")


def make_checkpoint(path: Path) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():   # random weights of a realistic scale (init std 0.02 is near-flat)
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.05)
    model.save_pretrained(path)
    save_tokenizer(path, config.vocab_size)
    return model


def save_tokenizer(path: Path, vocab_size: int) -> None:
    """A word-level tokenizer of `vocab_size` made-up tokens: the builder loads one to write
    genai_config.json (the timed runs feed token ids and never use it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)


def export_onnxport(model: Any, path: Path, **kwargs: Any) -> None:
    program = llm.export_decoder_with_cache(model, **kwargs)
    program.save(str(path))


def export_onnxport_no_rotary(model: Any, path: Path) -> None:
    """Opset 23 through the default passes without FuseRotaryPass (what it is worth)."""
    from onnxport.passes import FuseRotaryPass, default_passes, run_passes

    program = llm.export_decoder_with_cache(model, opset_version=23, optimize=False)
    run_passes(program.model, [p for p in default_passes() if not isinstance(p, FuseRotaryPass)])
    program.save(str(path))


def export_onnxport_unpacked(model: Any, path: Path) -> None:
    """The ONNX Runtime target at opset 23 with GQA's Q, K, V left as three MatMuls."""
    from onnxport.passes import run_passes
    from onnxport.passes.onnxruntime import onnxruntime_passes
    from onnxport.passes.onnxruntime.fuse_group_query_attention import FuseGroupQueryAttentionPass

    program = llm.export_decoder_with_cache(model, opset_version=23)
    passes = [FuseGroupQueryAttentionPass(pack_qkv=False) if
              isinstance(p, FuseGroupQueryAttentionPass) else p for p in onnxruntime_passes()]
    run_passes(program.model, passes)
    program.save(str(path))


def export_torch_onnx(model: Any, path: Path) -> None:
    num_layers = model.config.num_hidden_layers
    batch, seq, past = 2, 3, 4
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    kv = [(torch.randn(k.shape), torch.randn(v.shape))
          for k, v in llm.empty_past(model.config, batch, past)]
    b, s, p = torch.export.Dim("batch"), torch.export.Dim("sequence"), torch.export.Dim("past")
    cache = {0: b, 2: p}
    shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: torch.export.Dim.AUTO},
              "past_key_values": [(cache, cache) for _ in range(num_layers)]}
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(llm.DecoderWithCache(model).eval(), (ids, mask, kv), dynamo=True,
                                 dynamic_shapes=shapes,
                                 input_names=llm.cache_input_names(num_layers),
                                 output_names=llm.cache_output_names(num_layers))
    prog.save(str(path))


def export_builder(ckpt: Path, out: Path) -> Path:
    """The builder runs in its own venv (onnxruntime-genai is not in this environment):
    bench_quantized_cli.builder_python() makes it once."""
    from bench_quantized_cli import builder_python

    cmd = [str(builder_python()), "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt),
           "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(out / "cache")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"the builder failed:\n{proc.stderr[-3000:]}")
    return out / "model.onnx"


def node_counts(path: Path) -> tuple[int, int]:
    model = onnx.load(str(path), load_external_data=False)
    file_nodes = sum(n.op_type != "Constant" for n in model.graph.node)
    with tempfile.TemporaryDirectory() as tmp:
        options = _options()
        options.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        opt = onnx.load(options.optimized_model_filepath, load_external_data=False)
    return file_nodes, len(opt.graph.node)


def _options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


class Runner:
    """Greedy generation with one graph, feeding inputs by the names the graph declares."""

    def __init__(self, path: Path) -> None:
        self.session = ort.InferenceSession(str(path), _options(), providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]

    def generate(self, prompt: np.ndarray, new: int
                 ) -> tuple[np.ndarray, float, list[float], list[float]]:
        """(tokens, prefill seconds, decode seconds per step, decode CPU seconds per step: the
        calling thread's CPU time, which runs the kernels at 1 intra-op thread; unlike wall
        time, it does not count the time other processes hold the cores)."""
        batch = prompt.shape[0]
        past: dict[str, np.ndarray] = {}
        for name, meta in self.inputs.items():
            if name.startswith("past_key_values."):
                heads, head_dim = meta.shape[1], meta.shape[3]
                if not isinstance(head_dim, int):    # the builder names it kv_cache_dim
                    head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
                past[name] = np.zeros((batch, heads, 0, head_dim), dtype=np.float32)
        tokens = prompt
        step = prompt
        times: list[float] = []
        cpu: list[float] = []
        for _ in range(new):
            total = tokens.shape[1]
            feed = {"input_ids": step, "attention_mask": np.ones((batch, total), np.int64), **past}
            if "position_ids" in self.inputs:
                feed["position_ids"] = np.arange(total - step.shape[1], total,
                                                 dtype=np.int64)[None].repeat(batch, 0)
            start, start_cpu = time.perf_counter(), time.thread_time()
            out = dict(zip(self.outputs, self.session.run(None, feed)))
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
            nxt = out["logits"][:, -1, :].argmax(-1).astype(np.int64)[:, None]
            tokens = np.concatenate([tokens, nxt], axis=1)
            step = nxt
            past = {name: out[name.replace("past_key_values", "present")] for name in past}
        return tokens, times[0], times[1:], cpu[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=65, help="generated tokens (1 prefill + decode)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=str, default=None)
    ns = parser.parse_args()
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_checkpoint(root / "ckpt")
        exporters = {
            "onnxport": lambda p: export_onnxport(model, p),
            "onnxport opset 23": lambda p: export_onnxport(model, p, opset_version=23),
            "onnxport 23 w/o rotary": lambda p: export_onnxport_no_rotary(model, p),
            "onnxport ort-target": lambda p: export_onnxport(model, p, target="onnxruntime"),
            "onnxport ort-target 23": lambda p: export_onnxport(model, p, target="onnxruntime",
                                                                opset_version=23),
            "onnxport ort-target 23 unpacked": lambda p: export_onnxport_unpacked(model, p),
            "torch.onnx": lambda p: export_torch_onnx(model, p),
        }
        paths: dict[str, Path] = {}
        errors: dict[str, str] = {}
        for name, fn in exporters.items():
            path = root / re.sub(r"[^A-Za-z0-9.]+", "_", name) / "model.onnx"
            path.parent.mkdir()
            try:
                fn(path)
                paths[name] = path
            except Exception as e:  # noqa: BLE001  (reported in the table)
                errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"exported {name}", file=sys.stderr)
        try:
            paths["genai builder"] = export_builder(root / "ckpt", root / "builder")
        except Exception as e:  # noqa: BLE001
            errors["genai builder"] = f"{type(e).__name__}: {e}"
        print("exported genai builder", file=sys.stderr)

        torch.manual_seed(1)
        prompt = torch.randint(3, CONFIG["vocab_size"], (1, ns.prompt))
        with torch.no_grad():
            expected = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                      do_sample=False, max_new_tokens=ns.new, eos_token_id=None,
                                      pad_token_id=0).numpy()
        runners = {name: Runner(p) for name, p in paths.items()}
        prefill: dict[str, list[float]] = collections.defaultdict(list)
        decode: dict[str, list[float]] = collections.defaultdict(list)
        decode_cpu: dict[str, list[float]] = collections.defaultdict(list)
        equal: dict[str, bool] = {}
        names = list(runners)
        for r in range(ns.warmup + ns.repeat):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                tokens, first, rest, rest_cpu = runners[name].generate(prompt.numpy(), ns.new)
                equal[name] = equal.get(name, True) and bool(np.array_equal(tokens, expected))
                if r >= ns.warmup:
                    prefill[name].append(first)
                    decode[name].extend(rest)
                    decode_cpu[name].extend(rest_cpu)
        counts = {name: node_counts(p) for name, p in paths.items()}

    anchor = statistics.median(decode["genai builder"]) if "genai builder" in decode else None
    anchor_cpu = statistics.median(decode_cpu["genai builder"]) if anchor else None
    lines = [f"LLM decode, {datetime.date.today()}: Llama hidden {CONFIG['hidden_size']}, "
             f"{CONFIG['num_hidden_layers']} layers, {CONFIG['num_attention_heads']} heads / "
             f"{CONFIG['num_key_value_heads']} kv heads, vocab {CONFIG['vocab_size']}, fp32, "
             f"batch 1, prompt {ns.prompt}, {ns.new - 1} decode steps, ORT {ort.__version__} "
             f"CPU 1 thread, {ns.repeat} rounds (+{ns.warmup} warm-up), torch {torch.__version__}",
             "",
             "| graph | prefill ms | decode ms/token | ratio to builder | decode CPU ms/token | "
             "CPU ratio | nodes (file) | nodes (ORT-optimized) | tokens = eager |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        d = statistics.median(decode[name]) * 1e3
        ratio = f"{d / (anchor * 1e3):.3f}" if anchor else "-"
        c = statistics.median(decode_cpu[name]) * 1e3
        cpu_ratio = f"{c / (anchor_cpu * 1e3):.3f}" if anchor_cpu else "-"
        lines.append(f"| {name} | {statistics.median(prefill[name]) * 1e3:.2f} | {d:.3f} | "
                     f"{ratio} | {c:.3f} | {cpu_ratio} | {counts[name][0]} | {counts[name][1]} | "
                     f"{'yes' if equal[name] else 'NO'} |")
    for name, err in errors.items():
        lines.append(f"| {name} | failed: {err} | | | | | | | |")
    text = "\n".join(lines)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
