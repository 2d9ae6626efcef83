"""`onnxport export --model DIR --layout transformers.js [--dtypes ...] OUTPUT_DIR`."""

from __future__ import annotations

import argparse
import sys

__all__ = ["run_transformersjs_export"]


def run_transformersjs_export(ns: argparse.Namespace, output_dir: str) -> int:
    """The transformers.js layout of `onnxport export --model` (exit codes as run_export)."""
    from onnxport.errors import OnnxExporterError
    from onnxport.tasks.progress import export_failed, progress
    from onnxport.tasks.layouts.transformersjs import export_transformersjs

    for option, given in (("--target", getattr(ns, "target", "onnx") != "onnx"),
                          ("--quantize", getattr(ns, "quantize", None) is not None),
                          ("--stream-weights", bool(getattr(ns, "stream_weights", None)))):
        if given:
            print(f"onnxport export: {option} is not an option of --layout transformers.js "
                  f"(pick the weights' dtypes with --dtypes)", file=sys.stderr)
            return 2
    say, close = progress()
    try:
        result = export_transformersjs(
            ns.model, output_dir, ns.task, dtypes=ns.dtypes, overwrite=ns.overwrite,
            validate=not ns.no_validate, progress=say, opset=getattr(ns, "opset", None),
            dtype=ns.dtype, dynamic=not ns.no_dynamic, atol=ns.atol,
            batch_size=ns.batch_size, sequence_length=ns.sequence_length,
            trust_remote_code=ns.trust_remote_code,
            optimize=not getattr(ns, "no_optimize", False))
    except OnnxExporterError as e:
        return export_failed(e, close)
    close()
    if result.rows:
        print(result.table)
    sizes = ", ".join(f"{name.removeprefix('onnx/')} {size:,} B"
                      for name, size in sorted(result.sizes.items()))
    print(f"exported {result.model_type} for {result.task} in transformers.js's layout into "
          f"{result.output_dir}: {sizes}")
    if result.rows:
        print("validated: every dtype's file against eager PyTorch (fp32 within 1e-4, fp16 "
              "within 2% of the largest value; 8- and 4-bit finite, error shown)")
    return 0
