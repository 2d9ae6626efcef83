"""The checkpoint verbs of the `onnxport` command: `export --model`, `inspect`, `verify`.

`onnxport.cli` owns the command; it adds these options and verbs with `add_export_options`,
`add_inspect_parser` and `add_verify_parser`, and hands the parsed namespace to `run_export`,
`run_inspect` and `run_verify`. Exit codes: 0 ok, 1 the export failed or ONNX Runtime
differs from eager (the typed error's message), 2 usage (a bad option, an unknown task, a
task the architecture lacks, a non-empty OUTPUT_DIR without --overwrite).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxport.tasks.progress import (export_failed, human_bytes, progress, progress_with_bytes,
                                     usage_error)

__all__ = ["EXPORT_EPILOG", "add_export_options", "add_inspect_parser", "add_verify_parser",
           "main", "run_export", "run_inspect", "run_verify"]

EXPORT_EPILOG = """\
examples:
  onnxport export --model ./tiny-llama ./tiny-llama-onnx
        task detected from config.json (LlamaForCausalLM: text-generation-with-past)
  onnxport export --model ./bert --task token-classification --atol 1e-5 ./bert-onnx
  onnxport export --model ./qwen --dtype float16 --overwrite ./qwen-onnx
  onnxport export --model ./llama-7b --dtype float16 --stream-weights ./llama-7b-onnx
        weights streamed from the checkpoint files into model.onnx.data (never all in
        memory); chosen on its own when the model would not fit (docs/cli.md)
  onnxport export --model ./tiny-llama --target onnxruntime --quantize int4 ./llama-int4
        GroupQueryAttention, SkipSimplifiedLayerNormalization and int4 MatMulNBits (opset
        21), for onnxruntime-genai and optimum; validated against float eager within the
        quantization's own error (docs/cli.md, "Quantized export")
  onnxport export --model ./mixtral --target onnxruntime ./mixtral-ort   (com.microsoft.MoE)
  onnxport export --model ./bert --layout transformers.js --dtypes fp32,q8,q4 ./bert-web
        onnx/model.onnx, model_quantized.onnx, model_q4.onnx as transformers.js loads them
  onnxport export --example mlp -o mlp.onnx --verify
  onnxport export my_pkg.models:make_model -o model.onnx

tasks (optimum's names): feature-extraction, feature-extraction-with-past, fill-mask,
  text-classification, token-classification, question-answering, multiple-choice,
  text-generation, text-generation-with-past, text2text-generation,
  text2text-generation-with-past, image-classification, object-detection,
  semantic-segmentation, image-segmentation, image-to-image, image-to-text(-with-past),
  keypoint-detection, depth-estimation, masked-im, automatic-speech-recognition(-with-past),
  audio-classification, audio-frame-classification, audio-xvector,
  zero-shot-image-classification, zero-shot-object-detection; those a model type has come
  from transformers' Auto mappings. docs/cli.md lists the files and names each writes.
"""

INSPECT_EPILOG = """\
examples:
  onnxport inspect out/model.onnx
  onnxport inspect out/decoder_model_merged.onnx --top 10
"""

VERIFY_EPILOG = """\
examples:
  onnxport verify out/model.onnx --model ./tiny-llama
  onnxport verify out/encoder_model.onnx --model ./t5 --task text2text-generation-with-past
  onnxport verify out/model.onnx --model ./bert --atol 1e-3
"""


# -- options -------------------------------------------------------------------------------------

def add_export_options(parser: argparse.ArgumentParser) -> None:
    """The checkpoint options of `onnxport export` (with OUTPUT_DIR the positional argument)."""
    g = parser.add_argument_group("checkpoint export (--model CHECKPOINT_DIR OUTPUT_DIR)")
    g.add_argument("--model", metavar="CHECKPOINT_DIR",
                   help="a local transformers checkpoint folder (config.json + weights); the "
                        "positional argument is then OUTPUT_DIR")
    g.add_argument("--task", help="optimum's task name (default: detected from "
                                  "config.architectures)")
    g.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                   help="export in this dtype (default: the checkpoint's)")
    g.add_argument("--atol", type=float, default=None,
                   help="validation tolerance (default 1e-4; 1e-2 in float16, 5e-2 bfloat16)")
    g.add_argument("--batch-size", type=int, default=2, help="example batch size (default 2)")
    g.add_argument("--sequence-length", type=int, default=8,
                   help="example sequence length (default 8)")
    g.add_argument("--no-dynamic", action="store_true",
                   help="static shapes: no named dynamic dims")
    g.add_argument("--overwrite", action="store_true", help="replace a non-empty OUTPUT_DIR")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow checkpoints that need their own Python code (off by default)")
    g.add_argument("--no-validate", action="store_true",
                   help="skip the comparison of ONNX Runtime with eager PyTorch")
    g.add_argument("--stream-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="build the model without weights and stream them from the checkpoint "
                        "into the external data, for checkpoints larger than memory (default: "
                        "when loading and validating in memory would need more than 80%% of "
                        "the available memory); --no-stream-weights: always load the model")
    g.add_argument("--target", choices=["onnx", "onnxruntime"], default="onnx",
                   help="onnx (default): standard ONNX any runtime loads; onnxruntime: ONNX "
                        "Runtime's fused contrib ops (GroupQueryAttention, "
                        "SkipSimplifiedLayerNormalization, MoE, MatMulNBits)")
    g.add_argument("--quantize", choices=["int4", "int8"], default=None,
                   help="round-to-nearest weights in blocks (the Linears and the LM head; "
                        "embeddings stay float), as the GenAI builder's -p int4; picks "
                        "opset 21; MatMulNBits with --target onnxruntime")
    g.add_argument("--block-size", type=int, default=None,
                   help="--quantize block along the input features (default 32; 0: int8 "
                        "per output channel)")
    g.add_argument("--asymmetric", action="store_true",
                   help="--quantize with unsigned values and a zero point per block "
                        "(default: signed, no zero point, as the builder)")
    g.add_argument("--accuracy-level", type=int, choices=[0, 1, 2, 3, 4], default=None,
                   help="MatMulNBits accuracy level of int4 weights under --target "
                        "onnxruntime (default 4, the builder's: int8 activations; 0: float)")
    g.add_argument("--layout", choices=["optimum", "transformers.js"], default="optimum",
                   help="optimum (default): the graphs at the folder's root; transformers.js: "
                        "graphs in onnx/ (decoder_model_merged.onnx for encoder-decoders), a "
                        "file per --dtypes, as transformers.js loads them (docs/web.md)")
    g.add_argument("--dtypes", default=None, metavar="LIST",
                   help="--layout transformers.js: the dtypes written, comma-separated, from "
                        "fp32,fp16,q8,int8,uint8,q4,bnb4,q4f16 (default: all)")
    g.add_argument("--model-kwargs", default=None, metavar="JSON",
                   help="optimum-cli's model kwargs, a JSON object: SpeechT5 text-to-audio "
                        "takes '{\"vocoder\": DIR}', DIR a local SpeechT5HifiGan folder")
    g.add_argument("--verbose", action="store_true",
                   help="also show other libraries' warnings and log lines (torch, torchao, "
                        "transformers); by default only onnxport's own lines and warnings show")


def add_inspect_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("inspect", help="print an ONNX file's inputs, outputs, opsets, ops, weights",
                       epilog=INSPECT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("onnx_file", help="the .onnx file")
    p.add_argument("--top", type=int, default=0, help="show only the N most frequent ops")
    return p


def add_verify_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("verify", help="check an exported ONNX file against its checkpoint",
                       epilog=VERIFY_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("onnx_file", help="the .onnx file (its name says which graph of the task)")
    p.add_argument("--model", required=True, metavar="CHECKPOINT_DIR",
                   help="the checkpoint it was exported from")
    p.add_argument("--task", help="the task it was exported for (default: detected)")
    p.add_argument("--atol", type=float, default=None, help="tolerance (default 1e-4)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                   help="the dtype it was exported in")
    p.add_argument("--trust-remote-code", action="store_true")
    return p


# Libraries whose log lines say nothing about the user's model: torchao, imported by
# transformers whenever it is installed (for quantized checkpoints only: checkpoint.py),
# logs that its CUDA kernels do not load and (through torch's pytree logger) that its enums
# are registered; transformers logs its loading steps.
_LIBRARY_LOGGERS = ("torch", "torchao", "transformers", "onnxscript", "huggingface_hub")


def _quiet_libraries(verbose: bool = False) -> None:
    """Keep other libraries' warnings and log lines off the terminal (all of them show with
    --verbose). onnxport's own warnings, which are about the user's model, still show."""
    import warnings

    if verbose:
        return
    for name in _LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"onnxport(\.|$)")
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass


# -- verbs ---------------------------------------------------------------------------------------

def run_export(ns: argparse.Namespace, output_dir: str | None) -> int:
    """`onnxport export --model DIR [options] OUTPUT_DIR`."""
    from onnxport.errors import OnnxExporterError
    from onnxport.tasks import export_checkpoint

    if not output_dir:
        print("onnxport export: give OUTPUT_DIR after --model CHECKPOINT_DIR", file=sys.stderr)
        return 2
    _quiet_libraries(getattr(ns, "verbose", False))
    if getattr(ns, "layout", "optimum") == "transformers.js":
        from onnxport.tasks.layouts.cli import run_transformersjs_export

        return run_transformersjs_export(ns, output_dir)
    if getattr(ns, "dtypes", None):
        print("onnxport export: --dtypes is an option of --layout transformers.js",
              file=sys.stderr)
        return 2
    say, close, saving = progress_with_bytes()
    try:
        result = export_checkpoint(
            ns.model, output_dir, ns.task, opset=getattr(ns, "opset", None), dtype=ns.dtype,
            dynamic=not ns.no_dynamic, overwrite=ns.overwrite, atol=ns.atol,
            batch_size=ns.batch_size, sequence_length=ns.sequence_length,
            trust_remote_code=ns.trust_remote_code, report=getattr(ns, "report", False),
            validate=not ns.no_validate, optimize=not getattr(ns, "no_optimize", False),
            stream_weights=getattr(ns, "stream_weights", None),
            target=getattr(ns, "target", "onnx"), quantize=getattr(ns, "quantize", None),
            block_size=getattr(ns, "block_size", None),
            symmetric=not getattr(ns, "asymmetric", False),
            accuracy_level=getattr(ns, "accuracy_level", None), progress=say,
            save_progress=saving, model_kwargs=getattr(ns, "model_kwargs", None))
    except OnnxExporterError as e:
        return export_failed(e, close)
    close()
    if result.rows or result.checks:
        print(result.table)
    seconds = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items())
    route = "" if result.route == "in-memory" else f", weights streamed ({result.route_reason})"
    print(f"exported {result.model_type} for {result.task} ({result.task_reason}{route}) into "
          f"{result.output_dir}: {', '.join(result.files)} ({seconds})")
    if result.rows:
        print("validated: ONNX Runtime matches eager PyTorch at every shape")
    if result.checks:
        print("checked: " + "; ".join(f"{c.file} {c.what}" for c in result.checks))
    if result.not_validated:
        print(f"not validated: {result.not_validated}")
    return 0


def describe(path: str | os.PathLike[str], *, top: int = 0) -> str:
    """What `onnxport inspect` prints for the ONNX file at `path`."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    elem = {v: k for k, v in onnx.TensorProto.DataType.items()}

    def value_line(v: Any) -> str:
        t = v.type.tensor_type
        dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
                for d in t.shape.dim]
        return f"  {v.name}: {elem.get(t.elem_type, t.elem_type).lower()}[{', '.join(dims)}]"

    ops: collections.Counter[str] = collections.Counter()

    def count(g: Any) -> None:
        for node in g.node:
            ops[f"{node.domain + '.' if node.domain else ''}{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    count(attr.g)
                for sub in attr.graphs:
                    count(sub)

    count(graph)
    init_bytes, external = 0, collections.Counter[str]()
    for init in graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            init_bytes += int(info.get("length", 0))
            external[info.get("location", "?")] += int(info.get("length", 0))
        else:
            init_bytes += len(init.raw_data) or onnx.numpy_helper.to_array(init).nbytes
    lines = [f"{path}: {os.path.getsize(path):,} bytes, IR version {model.ir_version}, "
             f"producer {model.producer_name} {model.producer_version}".rstrip(),
             "opsets: " + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}"
                                    for o in model.opset_import),
             f"inputs ({len(graph.input)}):", *map(value_line, graph.input),
             f"outputs ({len(graph.output)}):", *map(value_line, graph.output),
             f"initializers: {len(graph.initializer)}, {human_bytes(init_bytes)} ({init_bytes:,} "
             f"bytes)"]
    if external:
        lines.append("external data files:")
        folder = Path(path).parent
        for location, size in external.items():
            present = (folder / location).is_file()
            lines.append(f"  {location}: {size:,} bytes"
                         + ("" if present else "  (MISSING beside the model)"))
    else:
        lines.append("external data files: none")
    total = sum(ops.values())
    shown = ops.most_common(top or None)
    lines.append(f"nodes: {total} ({len(ops)} op types)")
    lines += [f"  {op:<28} {n}" for op, n in shown]
    if top and len(ops) > top:
        lines.append(f"  ... {len(ops) - top} more op types")
    return "\n".join(lines)


def run_inspect(ns: argparse.Namespace) -> int:
    """`onnxport inspect FILE`."""
    if not os.path.isfile(ns.onnx_file):
        print(f"onnxport inspect: no file {ns.onnx_file!r}", file=sys.stderr)
        return 2
    try:
        print(describe(ns.onnx_file, top=ns.top))
    except Exception as e:  # onnx.load raises DecodeError and friends
        print(f"onnxport inspect: cannot read {ns.onnx_file!r}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    return 0


def run_verify(ns: argparse.Namespace) -> int:
    """`onnxport verify FILE --model DIR`: validate an existing file against its checkpoint."""
    from onnxport.errors import OnnxExporterError
    from onnxport.tasks import checkpoint, registry
    from onnxport.tasks.export import parse_dtype
    from onnxport.tasks.graphs import graphs_for
    from onnxport.tasks.validate import default_atol, format_table, validate_graph

    if not os.path.isfile(ns.onnx_file):
        print(f"onnxport verify: no file {ns.onnx_file!r}", file=sys.stderr)
        return 2
    _quiet_libraries(getattr(ns, "verbose", False))
    say, close = progress()
    try:
        config = checkpoint.load_config(ns.model, trust_remote_code=ns.trust_remote_code)
        task, reason = registry.resolve_task(config, ns.task)
        say(f"task: {task} ({reason})")
        family, auto_class = registry.plan(config.model_type, task)
        model = checkpoint.load_model(ns.model, config, auto_class,
                                      dtype=parse_dtype(ns.dtype),
                                      trust_remote_code=ns.trust_remote_code)
        specs = {s.filename: s for s in graphs_for(model, family, task)}
        name = os.path.basename(ns.onnx_file)
        spec = specs.get(name) or (next(iter(specs.values())) if len(specs) == 1 else None)
        if spec is None:
            close()
            print(f"onnxport verify: {name!r} is none of the files of {task}: "
                  f"{', '.join(specs)}", file=sys.stderr)
            return 2
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        atol = ns.atol if ns.atol is not None else default_atol(dtype)
        shapes = _shapes_the_file_takes(ns.onnx_file, spec)
        say(f"validating {ns.onnx_file} at {len(shapes)} shapes (atol {atol:g})")
        rows = validate_graph(spec, ns.onnx_file, atol=atol, shapes=shapes)
    except OnnxExporterError as e:
        close()
        print(f"onnxport verify: {type(e).__name__}: {e}", file=sys.stderr)
        return 2 if usage_error(e) else 1
    close()
    print(format_table(rows))
    if all(r.ok for r in rows):
        print(f"verified: {ns.onnx_file} matches {ns.model} ({task})")
        return 0
    print(f"onnxport verify: {ns.onnx_file} differs from {ns.model} beyond the tolerance",
          file=sys.stderr)
    return 1


def _shapes_the_file_takes(path: str, spec: Any) -> list[dict[str, int]]:
    """The spec's shapes whose inputs fit the file's static dims (all of them if dynamic)."""
    import onnx
    import torch

    graph = onnx.load(path, load_external_data=False).graph
    static = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim] for v in graph.input}
    fitting = []
    for shape in spec.shapes:
        torch.manual_seed(0)
        feeds = spec.make_inputs(shape)
        if all(all(s is None or s == t for s, t in zip(static[n], feeds[n].shape))
               for n in static if n in feeds):
            fitting.append(shape)
    return fitting or spec.shapes[:1]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m onnxport.tasks.cli` runs these verbs alone (`onnxport` wires them in)."""
    parser = argparse.ArgumentParser(prog="onnxport")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", epilog=EXPORT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output_dir", nargs="?")
    p.add_argument("--opset", type=int, default=None)
    p.add_argument("--report", action="store_true")
    p.add_argument("--no-optimize", action="store_true")
    add_export_options(p)
    add_inspect_parser(sub)
    add_verify_parser(sub)
    ns = parser.parse_args(argv)
    if ns.command == "export":
        if not ns.model:
            parser.error("export: --model CHECKPOINT_DIR is required here")
        return run_export(ns, ns.output_dir)
    if ns.command == "inspect":
        return run_inspect(ns)
    return run_verify(ns)


if __name__ == "__main__":
    raise SystemExit(main())
