"""`--layout transformers.js`: the folder transformers.js loads as it is, at every dtype.

A layout writer over the graphs `export_checkpoint` exports and validates (optimum's
layout, written to a temporary folder), never a second exporter:

    OUTPUT_DIR/config.json, generation_config.json, tokenizer*.json, preprocessor_config.json
    OUTPUT_DIR/onnx/model.onnx                   single-graph tasks; decoder-only LMs with
                                                 past_key_values inputs and present outputs
    OUTPUT_DIR/onnx/encoder_model.onnx           encoder-decoders: the encoder, and
    OUTPUT_DIR/onnx/decoder_model_merged.onnx    the decoder with and without the cache in one
                                                 graph (an If on use_cache_branch: merge.py;
                                                 a vision encoder-decoder with a decoder-only
                                                 decoder: its self-attention cache only)
    OUTPUT_DIR/onnx/text_model.onnx              CLIP, SigLIP: each tower alone, beside
    OUTPUT_DIR/onnx/vision_model.onnx            model.onnx (towers.py)
    OUTPUT_DIR/onnx/<graph><suffix>.onnx         each dtype: _fp16, _quantized (q8), _int8,
                                                 _uint8, _q4, _bnb4, _q4f16 (dtypes.py)

Every file of every dtype is run by ONNX Runtime on the task's inputs and compared with
eager PyTorch, with the tolerance of its dtype (`TOLERANCE`); the table shows them side by
side.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from onnxport.tasks.errors import TaskError, ValidationError
from onnxport.tasks.layouts import dtypes as dt
from onnxport.tasks.graphs import GraphSpec
from onnxport.tasks.layouts.merge import USE_CACHE_BRANCH, merge_decoders, self_attention_cache
from onnxport.tasks.layouts.towers import TOWERS, export_towers

__all__ = ["DtypeRow", "WebExportResult", "export_transformersjs", "parse_dtypes"]

# Per dtype: (absolute tolerance, tolerance relative to the output's largest magnitude, must
# the error stay within it). fp32 is the exporter's own 1e-4. fp16 rounds weights and
# activations to 11 significant bits: 2% of the largest value covers the rounding a few
# layers accumulate. 8- and 4-bit weights change the model itself (RTN: up to half a step
# per weight), so their outputs are checked finite and of the right shape and the error is
# reported, not bounded.
TOLERANCE = {"fp32": (1e-4, 0.0, True), "fp16": (0.0, 0.02, True),
             "q8": (0.0, 0.0, False), "int8": (0.0, 0.0, False), "uint8": (0.0, 0.0, False),
             "q4": (0.0, 0.0, False), "bnb4": (0.0, 0.0, False), "q4f16": (0.0, 0.0, False)}

# Decoder types whose cache transformers.js carries with the cross-attention's keys and
# values (`past_key_values.{i}.decoder/encoder.*`: its normalized config has encoder and
# decoder layers). A vision encoder-decoder with another decoder (GPT-2, ...) runs with a
# decoder-only cache (`merge.self_attention_cache`).
CROSS_ATTENTION_CACHE_TYPES = frozenset({
    "t5", "mt5", "longt5", "bart", "mbart", "marian", "whisper", "m2m_100", "blenderbot",
    "blenderbot-small", "speecht5", "trocr", "musicgen_decoder"})


def parse_dtypes(text: str | Iterable[str] | None) -> list[str]:
    """"fp32,fp16,q8,..." (or a list) -> the dtypes in transformers.js's order; None: all."""
    if text is None:
        return list(dt.DTYPES)
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in dt.DTYPES]
    if unknown or not names:
        raise TaskError(f"unknown dtype(s) {unknown or names!r} for --dtypes; choose from "
                        f"{', '.join(dt.DTYPES)}")
    return [d for d in dt.DTYPES if d in names]


@dataclasses.dataclass
class DtypeRow:
    """One output of one file at one input shape."""

    dtype: str
    file: str
    case: str
    output: str
    shape: tuple[int, ...]
    max_abs_diff: float
    largest: float      # the largest |eager| value of the output
    tolerance: float    # math.inf: not bounded (reported only)
    finite: bool
    ok: bool
    note: str = ""


@dataclasses.dataclass
class WebExportResult:
    """What `export_transformersjs` wrote and measured."""

    output_dir: Path
    task: str
    model_type: str
    files: list[str]
    sizes: dict[str, int]
    rows: list[DtypeRow]
    base: Any  # the ExportResult of the float32 export

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def table(self) -> str:
        head = (f"{'dtype':<6} {'file':<36} {'case':<22} {'output':<28} {'max |diff|':>10} "
                f"{'rel':>8} {'tol':>9}  ok")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            rel = r.max_abs_diff / r.largest if r.largest else 0.0
            tol = "report" if math.isinf(r.tolerance) else f"{r.tolerance:.2e}"
            ok = "ok" if r.ok else "FAIL"
            lines.append(f"{r.dtype:<6} {r.file:<36} {r.case:<22} {r.output:<28} "
                         f"{r.max_abs_diff:>10.3e} {rel:>8.2%} {tol:>9}  {ok}"
                         + (f"  {r.note}" if r.note else ""))
        return "\n".join(lines)


def _graphs(files: list[str]) -> dict[str, list[str]]:
    """transformers.js graph name -> the optimum files it is made of."""
    if "decoder_with_past_model.onnx" in files:
        return {"encoder_model": ["encoder_model.onnx"],
                "decoder_model_merged": ["decoder_model.onnx", "decoder_with_past_model.onnx"]}
    if "decoder_model.onnx" in files:
        raise TaskError("transformers.js runs encoder-decoders through one decoder with and "
                        "without the cache (decoder_model_merged.onnx): export the task's "
                        "-with-past variant (e.g. --task text2text-generation-with-past)")
    onnx_files = [f for f in files if f.endswith(".onnx")]
    if onnx_files != ["model.onnx"]:
        raise TaskError(f"transformers.js's layout for the graphs {onnx_files} is not written "
                        f"yet (--layout transformers.js: single-graph tasks, decoder-only "
                        f"LMs and encoder-decoders with past)")
    return {"model": ["model.onnx"]}


def _write_graph(name: str, parts: list[Path], dtype: str, dst: Path,
                 made: dict[tuple[str, str], Path], work: Path,
                 self_attention: bool = False) -> None:
    """Write graph `name` at `dtype` to `dst` (its optimum parts converted, then merged;
    `self_attention`: with a decoder-only model's cache, `self_attention_cache`)."""
    import onnx

    converted = []
    for part in parts:
        if dtype == "fp32":
            converted.append(part)
            continue
        out = work / f"{dtype}-{part.name}"
        dt.write_dtype(dtype, part, out)
        made[(dtype, part.name)] = out
        converted.append(out)
    if len(converted) == 1:
        shutil.copy2(converted[0], dst)
        return
    no_past, with_past = onnx.load(str(converted[0])), onnx.load(str(converted[1]))
    if self_attention:
        self_attention_cache(no_past, with_past)
    merged = merge_decoders(no_past, with_past)
    dt.save(merged, dst)


def _feeds_np(feeds: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in feeds.items()}


def _cases(graph: str, specs: dict[str, Any]) -> list[tuple[str, Any, dict[str, int], dict[str, np.ndarray], list[str]]]:
    """(label, spec, shape, extra feeds, outputs compared) of the graph's validation runs."""
    if graph != "decoder_model_merged":
        spec = specs[graph + ".onnx"]
        return [(",".join(f"{k}={v}" for k, v in s.items()), spec, s, {}, spec.output_names)
                for s in spec.shapes]
    first, past = specs["decoder_model.onnx"], specs["decoder_with_past_model.onnx"]
    cases = []
    sample = past.make_inputs(past.shapes[0])
    for s in first.shapes:
        b = s["batch_size"]
        empty = {n: np.zeros((b, t.shape[1], 0, t.shape[3]), np.float32)
                 for n, t in sample.items() if n.startswith("past_key_values.")}
        empty[USE_CACHE_BRANCH] = np.array([False])
        cases.append((f"no cache b={b},t={s['decoder_sequence_length']}", first, s, empty,
                      first.output_names))
    for s in past.shapes:
        cases.append((f"cache b={s['batch_size']},past={s['past_decoder_sequence_length']}",
                      past, s, {USE_CACHE_BRANCH: np.array([True])}, past.output_names))
    return cases


def _self_attention_name(name: str) -> str | None:
    """A cache name of the optimum decoders in `self_attention_cache`'s form (None: the
    cross-attention's, which that form does not carry)."""
    if not name.startswith(("past_key_values.", "present.")):
        return name
    return None if ".encoder." in name else name.replace(".decoder.", ".", 1)


def validate_dtype(dtype: str, graph: str, path: Path, specs: dict[str, Any],
                   self_attention: bool = False) -> list[DtypeRow]:
    """Run `path` on the task's inputs and compare each output with eager PyTorch
    (`self_attention`: a merged decoder in `self_attention_cache`'s form)."""
    import onnxruntime as ort

    atol, rtol, bounded = TOLERANCE[dtype]
    file = path.name
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:
        return [DtypeRow(dtype, file, "-", "(session)", (), math.inf, 0.0, 0.0, False, False,
                         f"ONNX Runtime cannot load it: {type(e).__name__}: {e}"[:300])]
    names = [i.name for i in session.get_inputs()]
    out_names = [o.name for o in session.get_outputs()]
    rows = []
    for label, spec, shape, extra, compared in _cases(graph, specs):
        torch.manual_seed(0)
        feeds = spec.make_inputs(shape)
        if self_attention and USE_CACHE_BRANCH in extra and bool(extra[USE_CACHE_BRANCH][0]):
            # the graph computes the cross-attention's keys and values from the encoder's
            # states: eager's past gets those of the first step, not random ones
            first = specs["decoder_model.onnx"]
            present = first.eager({n: feeds[n] for n in first.input_names})
            feeds.update({n.replace("present.", "past_key_values.", 1): v
                          for n, v in present.items() if ".encoder." in n})
        expected = spec.eager(feeds)
        given = {**_feeds_np(feeds), **extra}
        if self_attention:
            given = {_self_attention_name(k): v for k, v in given.items()}
            expected = {_self_attention_name(k): v for k, v in expected.items()}
            compared = [n for n in map(_self_attention_name, compared) if n is not None]
        try:
            got = dict(zip(out_names, session.run(None, {n: given[n] for n in names})))
        except Exception as e:
            rows.append(DtypeRow(dtype, file, label, "(run)", (), math.inf, 0.0, 0.0, False,
                                 False, f"ONNX Runtime failed: {type(e).__name__}: {e}"[:300]))
            continue
        for out in compared:
            e = expected[out].detach().float().numpy().astype(np.float64)
            a = np.asarray(got[out]).astype(np.float64)
            largest = float(np.max(np.abs(e))) if e.size else 0.0
            tol = atol + rtol * largest if bounded else math.inf
            if a.shape != e.shape:
                rows.append(DtypeRow(dtype, file, label, out, a.shape, math.inf, largest, tol,
                                     False, False, f"shape differs: eager {e.shape}"))
                continue
            finite = bool(np.isfinite(a).all())
            diff = float(np.max(np.abs(a - e))) if a.size else 0.0
            rows.append(DtypeRow(dtype, file, label, out, a.shape, diff, largest, tol, finite,
                                 finite and diff <= tol,
                                 "" if finite else "non-finite values"))
    return rows


def _check_dir(out: Path, overwrite: bool) -> None:
    from onnxport.tasks.export import _check_output_dir

    _check_output_dir(out, overwrite)


def export_transformersjs(model_dir: str | os.PathLike[str],
                          output_dir: str | os.PathLike[str], task: str | None = None, *,
                          dtypes: str | Iterable[str] | None = None, overwrite: bool = False,
                          validate: bool = True,
                          progress: Callable[[str], None] | None = None,
                          **export_options: Any) -> WebExportResult:
    """Export a checkpoint into the folder transformers.js loads, at each of `dtypes`.

    Args:
        model_dir, output_dir, task: as `export_checkpoint`.
        dtypes: "fp32,fp16,q8,int8,uint8,q4,bnb4,q4f16" (or a list); None: all of them.
        overwrite: Replace a non-empty `output_dir`.
        validate: Compare every file of every dtype with eager PyTorch (`TOLERANCE`).
        progress: Called with a line per step.
        export_options: Passed on to `export_checkpoint` (opset, atol, batch_size, ...);
            the opset is 21 when q4/q4f16 are asked for and no opset is given.

    Returns:
        A `WebExportResult` (files, sizes, a row per dtype, file, input and output).

    Raises:
        TaskError: an unknown dtype, a task whose graphs transformers.js's layout lacks.
        ValidationError: a file differs from eager beyond its dtype's tolerance, or is not
            finite; the folder is kept for inspection.
        And what `export_checkpoint` raises.
    """
    from onnxport.tasks import checkpoint, registry
    from onnxport.tasks.export import _move_into_place, export_checkpoint, parse_dtype
    from onnxport.tasks.graphs import graphs_for

    say = progress or (lambda line: None)
    chosen = parse_dtypes(dtypes)
    out = Path(output_dir).absolute()
    _check_dir(out, overwrite)
    if export_options.get("dtype") not in (None, "float32", "fp32", torch.float32):
        raise TaskError("--layout transformers.js writes each dtype from the float32 export; "
                        "pick them with --dtypes instead of --dtype")
    if any(d in ("q4", "q4f16") for d in chosen) and export_options.get("opset") is None:
        export_options["opset"] = dt.Q4_OPSET
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.optimum-", dir=out.parent) as tmp:
        base = export_checkpoint(model_dir, Path(tmp) / "optimum", task,
                                 validate=validate, progress=say, **export_options)
        src = base.output_dir
        graphs = _graphs(base.files)
        trust = export_options.get("trust_remote_code", False)
        batch = export_options.get("batch_size", 2)
        sequence = export_options.get("sequence_length", 8)
        config = checkpoint.load_config(model_dir, trust_remote_code=trust)
        family, auto_class = registry.plan(config.model_type, base.task)
        model = None
        if validate or (family == "clip" and config.model_type in TOWERS):
            model = checkpoint.load_model(model_dir, config, auto_class,
                                          dtype=parse_dtype(None), trust_remote_code=trust)
        tower_files: list[GraphSpec] = []
        self_attention = (config.model_type == "vision-encoder-decoder" and getattr(
            config.decoder, "model_type", None) not in CROSS_ATTENTION_CACHE_TYPES)
        if family == "clip" and config.model_type in TOWERS:
            say("exporting text_model.onnx and vision_model.onnx (the single-tower classes)")
            tower_files = export_towers(
                model, src, batch=batch, sequence=sequence,
                dynamic=export_options.get("dynamic", True),
                opset=export_options.get("opset"),
                optimize=export_options.get("optimize", True))
            graphs.update({s.filename.removesuffix(".onnx"): [s.filename] for s in tower_files})
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
        try:
            (staging / "onnx").mkdir()
            for f in base.files:
                if not f.endswith((".onnx", ".onnx.data", ".md")) and f != "genai_config.json":
                    shutil.copy2(src / f, staging / f)
            made: dict[tuple[str, str], Path] = {}
            work = Path(tmp) / "work"
            work.mkdir()
            written: dict[tuple[str, str], Path] = {}
            for dtype in chosen:
                for graph, parts in graphs.items():
                    dst = staging / "onnx" / f"{graph}{dt.SUFFIX[dtype]}.onnx"
                    t0 = time.perf_counter()
                    _write_graph(graph, [src / p for p in parts], dtype, dst, made, work,
                                 self_attention=self_attention)
                    written[(dtype, graph)] = dst
                    say(f"wrote onnx/{dst.name} ({dst.stat().st_size:,} bytes) in "
                        f"{time.perf_counter() - t0:.1f}s")
            rows: list[DtypeRow] = []
            if validate:
                specs = {s.filename: s for s in graphs_for(model, family, base.task,
                                                           batch=batch, sequence=sequence)}
                specs.update({s.filename: s for s in tower_files})
                for (dtype, graph), path in written.items():
                    say(f"validating onnx/{path.name} against eager ({dtype})")
                    rows += validate_dtype(dtype, graph, path, specs, self_attention)
            files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*")
                           if p.is_file())
            sizes = {str(p.relative_to(staging)): p.stat().st_size
                     for p in (staging / "onnx").iterdir()}
            _move_into_place(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    result = WebExportResult(out, base.task, base.model_type, files, sizes, rows, base)
    say(f"transformers.js layout written in {time.perf_counter() - start:.1f}s")
    if not result.ok:
        raise ValidationError(
            f"a transformers.js file differs from eager PyTorch beyond its dtype's tolerance; "
            f"the files are kept for inspection in {out}\n{result.table}",
            output_dir=str(out), table=result.table)
    return result
