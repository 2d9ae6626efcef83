"""export_checkpoint: a transformers checkpoint folder to a folder of ONNX files runtimes load.

Everything is written into a staging folder beside OUTPUT_DIR, which is renamed into place at
the end: a failed export leaves no partial folder. A validation mismatch is no failure of the
export: the folder is put in place for inspection, then `ValidationError` says where it is.

Two routes (`streaming.plan_route` chooses): in memory (transformers loads the model with its
weights), or streamed for checkpoints larger than memory (`streaming.py`: the model is built
without weights and the checkpoint's tensors are streamed into the external data).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from onnxport.errors import OnnxExporterError
from onnxport.tasks import checkpoint, registry, speecht5, streaming, workers
from onnxport.tasks.errors import OutputDirError, TaskError, TaskExportError, ValidationError
from onnxport.tasks.specs import GraphSpec, decoder_uses_position_ids, float_dtype
from onnxport.tasks.quantized import (
    QuantizeSpec,
    quantization_error,
    quantize_program,
    rtn_weights,
)
from onnxport.tasks.validate import (
    Row,
    check_runtime_dtype,
    default_atol,
    format_table,
    validate_graph,
)

__all__ = ["ExportResult", "export_checkpoint", "parse_dtype"]

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """float32 / float16 / bfloat16 (or fp32, fp16, bf16, or a torch.dtype)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise TaskError(f"unknown dtype {dtype!r}; choose float32, float16 or bfloat16")
    return _DTYPES[dtype]


@dataclasses.dataclass
class ExportResult:
    """What `export_checkpoint` did."""

    output_dir: Path
    task: str
    task_reason: str
    model_type: str
    files: list[str]
    rows: list[Row]
    seconds: dict[str, float]
    route: str = "in-memory"
    route_reason: str = ""
    checks: list[streaming.Check] = dataclasses.field(default_factory=list)
    not_validated: str = ""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and all(c.ok for c in self.checks)

    @property
    def table(self) -> str:
        lines = [format_table(self.rows)] if self.rows else []
        lines += [f"{c.file}  {c.what}: {'ok' if c.ok else 'FAILED'}"
                  + (f" ({c.detail})" if c.detail else "") for c in self.checks]
        return "\n".join(lines)


def _check_output_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"OUTPUT_DIR {str(out)!r} exists and is a file")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputDirError(f"OUTPUT_DIR {str(out)!r} exists and is not empty; pass "
                             f"--overwrite (overwrite=True) to replace it")


def _move_into_place(staging: Path, out: Path) -> None:
    old: Path | None = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / out.name)
    os.rename(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _copy_checkpoint_files(model_dir: Path, staging: Path) -> list[str]:
    copied = []
    for name in checkpoint.COPIED_FILES:
        if (model_dir / name).is_file():
            shutil.copy2(model_dir / name, staging / name)
            copied.append(name)
    return copied


def export_checkpoint(model_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str],
                      task: str | None = None, *, opset: int | None = None,
                      dtype: str | torch.dtype | None = None, dynamic: bool = True,
                      overwrite: bool = False, atol: float | None = None,
                      batch_size: int = 2, sequence_length: int = 8,
                      trust_remote_code: bool = False, report: bool = False,
                      validate: bool = True, optimize: bool = True,
                      stream_weights: bool | None = None,
                      target: str = "onnx", quantize: str | None = None,
                      block_size: int | None = None, symmetric: bool = True,
                      accuracy_level: int | None = None,
                      progress: Callable[[str], None] | None = None,
                      save_progress: Callable[[str, int, int], None] | None = None,
                      model_kwargs: str | dict[str, Any] | None = None,
                      ) -> ExportResult:
    """Export a local transformers checkpoint for a task into `output_dir`, as optimum does.

    Args:
        model_dir: A folder with config.json, weights (safetensors, sharded or not, or
            pytorch_model.bin) and tokenizer/preprocessor files.
        output_dir: The folder to write: model.onnx (or encoder_model.onnx,
            decoder_model.onnx, decoder_with_past_model.onnx), the copied config, generation
            config and tokenizer files, and genai_config.json for decoder-only LMs.
        task: optimum's task name; None: detected from config.architectures.
        opset: Target opset (onnxport's default when None).
        dtype: float32, float16 or bfloat16 (default: the checkpoint's, as loaded).
        dynamic: Named dynamic dims (batch_size, sequence_length, ...); False: static.
        overwrite: Replace a non-empty `output_dir`.
        atol: Validation tolerance (default 1e-4 in float32, 1e-2 in float16, 5e-2 bfloat16).
        batch_size, sequence_length: The example input sizes the graphs are traced with.
        trust_remote_code: Allow a checkpoint that needs its own code (auto_map).
        report: Write onnxport's markdown export report into `output_dir`.
        validate: Compare ONNX Runtime with eager PyTorch at two shapes (and more for
            decoders: prefill and decode steps). On the streamed route, only when the eager
            model and a session fit in memory; the external data's CRC-32s and an ONNX
            Runtime session are checked instead otherwise (`ExportResult.not_validated`
            says so).
        optimize: Run onnxport's optimization passes.
        stream_weights: True: build the model without weights and stream them from the
            checkpoint into the external data (`.onnx.data`), for checkpoints larger than
            memory; False: load the model in memory; None: streamed when loading (and
            validating) in memory would need more than 80% of the available memory.
        target: "onnx" (default): standard ONNX; "onnxruntime": ONNX Runtime's fused
            contrib ops (GroupQueryAttention, SkipSimplifiedLayerNormalization, MoE,
            MatMulNBits), the same target as `onnxport.export(..., target="onnxruntime")`,
            for every graph of the task. An `onnxport.options.OnnxRuntimeTarget` is passed
            on as it is.
        quantize: "int4" or "int8": round-to-nearest weights in blocks of `block_size` along
            K (`onnxport.quantize`) for every MatMul/Gemm weight (Linears and the LM head;
            embeddings stay float), as the GenAI builder's `-p int4`; opset 21 is chosen
            when `opset` is None. Standard DequantizeLinear + MatMul on the default target,
            MatMulNBits under "onnxruntime". Validation then follows the rule of
            docs/cli.md ("Quantized export").
        block_size: The quantization block along K (default 32; 0: int8 per channel).
        symmetric: Signed weights without zero points (default, the builder's), or
            unsigned with a zero point per block.
        accuracy_level: MatMulNBits' accuracy level for int4 under "onnxruntime" (0: float
            activations; 4, the target's default: int8 activations, faster).
        progress: Called with a line per step (load, export, save, validate).
        save_progress: Called as `save_progress(filename, bytes_written, total_bytes)`
            while weights are written to external data.
        model_kwargs: optimum-cli's --model-kwargs (a JSON object or a dict): SpeechT5's
            `{"vocoder": DIR}`, DIR a local SpeechT5HifiGan folder (tasks/speecht5.py).

    Returns:
        An `ExportResult` (task chosen and why, route and why, files, validation rows and
        checks, seconds per step).

    Raises:
        CheckpointError, WeightsError: the checkpoint cannot be read.
        UnknownTaskError, UnsupportedTaskError: the task is unknown or not the model's.
        OutputDirError: `output_dir` is not empty and `overwrite` is False.
        TaskError: an option the others exclude (quantize with streamed weights or an
            opset below 21, accuracy_level without target="onnxruntime").
        OnnxExporterError: the export failed (the folder is not created).
        ValidationError: ORT differs from eager; the files are kept in `output_dir`.
    """
    say = progress or (lambda line: None)
    start = time.perf_counter()
    cpu_at_start = workers.cpu_sample()
    plan = _plan(Path(model_dir), Path(output_dir).absolute(), task, say, opset=opset,
                 dtype=parse_dtype(dtype), dynamic=dynamic, overwrite=overwrite, atol=atol,
                 batch=batch_size, sequence=sequence_length,
                 trust_remote_code=trust_remote_code, report=report, validate=validate,
                 optimize=optimize, stream_weights=stream_weights,
                 target=_parse_target(target, accuracy_level),
                 qspec=QuantizeSpec.parse(quantize, block_size=block_size, symmetric=symmetric))
    seconds: dict[str, float] = {}
    extras = _model_kwargs(plan, model_kwargs)
    model = speecht5.apply_model_kwargs(_load(plan, say, since=start), extras)
    seconds["load"] = time.perf_counter() - start
    specs = _build_graphs(plan, model)
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{plan.out.name}.staging-", dir=plan.out.parent))
    try:
        checked = _Checked()
        layouts = _export_and_save_each(plan, model, specs, staging, say, save_progress, seconds,
                                        since=cpu_at_start, checked=checked)
        _write_companions(plan, staging)
        _validate(plan, model, specs, staging, layouts, say, seconds, checked)
        files = sorted(p.name for p in staging.iterdir())
        _move_into_place(staging, plan.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    seconds["total"] = time.perf_counter() - start
    result = ExportResult(plan.out, plan.task, plan.task_reason, plan.config.model_type, files,
                          checked.rows, seconds, route=plan.route_name,
                          route_reason=plan.route.reason, checks=checked.checks,
                          not_validated=checked.not_validated)
    if not result.ok:
        raise ValidationError(
            f"ONNX Runtime's outputs differ from eager PyTorch beyond the tolerance; the "
            f"files are kept for inspection in {plan.out}\n{result.table}",
            output_dir=str(plan.out), table=result.table)
    return result


# -- the stages ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Plan:
    """What `export_checkpoint` decided before any work, carried through its stages."""

    model_dir: Path
    out: Path
    config: Any
    task: str
    task_reason: str
    family: str
    auto_class: str
    dtype: torch.dtype | None  # the requested dtype (None: the checkpoint's)
    opset: int | None
    target: Any  # "onnx", "onnxruntime" or an OnnxRuntimeTarget
    qspec: QuantizeSpec | None
    route: streaming.RoutePlan
    weights: Any  # the checkpoint opened for streaming; None on the in-memory route
    dynamic: bool
    atol: float | None
    batch: int
    sequence: int
    trust_remote_code: bool
    report: bool
    validate: bool
    optimize: bool

    @property
    def route_name(self) -> str:
        return "streamed" if self.route.stream else "in-memory"

    @property
    def position_ids(self) -> bool | None:
        """False under the ONNX Runtime target: its decoders take no position_ids (as the
        GenAI builder's): the positions are then the cache's, which lets
        FuseGroupQueryAttentionPass move rotary into GroupQueryAttention and pack Q/K/V
        (docs/cli.md, "Targets and quantized export")."""
        return False if self.target == "onnxruntime" else None


def _plan(model_dir: Path, out: Path, task: str | None, say: Callable[[str], None], *,
          opset: int | None, dtype: torch.dtype | None, overwrite: bool,
          stream_weights: bool | None, qspec: QuantizeSpec | None, validate: bool,
          trust_remote_code: bool, **options: Any) -> _Plan:
    """Read the config, resolve the task and its family, check the output folder and the
    options, and choose the route (opening the checkpoint for streaming on that route)."""
    if qspec is not None:
        opset = qspec.opset(opset)
    config = checkpoint.load_config(model_dir, trust_remote_code=trust_remote_code)
    task_name, reason = registry.resolve_task(config, task)
    family, auto_class = registry.plan(config.model_type, task_name)
    _check_output_dir(out, overwrite)
    say(f"task: {task_name} ({reason})")
    if validate:
        check_runtime_dtype(dtype)  # before any work: ORT's CPU provider may lack it
    if qspec is not None and stream_weights:
        raise TaskError("--quantize reads the weights in memory to round them; it cannot be "
                        "combined with --stream-weights")
    route, weights = _plan_route(model_dir, config, dtype,
                                 False if qspec is not None else stream_weights, validate)
    say(f"route: {'streamed weights' if route.stream else 'in memory'} ({route.reason})")
    return _Plan(model_dir, out, config, task_name, reason, family, auto_class, dtype, opset,
                 qspec=qspec, route=route, weights=weights, validate=validate,
                 trust_remote_code=trust_remote_code, **options)


def _model_kwargs(plan: _Plan, model_kwargs: str | dict[str, Any] | None) -> dict[str, Any]:
    """--model-kwargs checked against the model type and loaded (before the model)."""
    kwargs = speecht5.parse_model_kwargs(model_kwargs)
    if kwargs and plan.route.stream:
        raise TaskError("--model-kwargs needs the in-memory route (validation reloads the "
                        "model there); drop --stream-weights")
    return speecht5.check_model_kwargs(plan.config.model_type, kwargs)


def _load(plan: _Plan, say: Callable[[str], None], since: float) -> torch.nn.Module:
    """The model: built without weights on the streamed route, loaded otherwise."""
    if plan.route.stream:
        weights = plan.weights
        build_dtype = plan.dtype or _config_dtype(plan.config) or streaming.checkpoint_dtype(weights)
        with checkpoint.offline():
            model = streaming.build_without_weights(plan.config, plan.auto_class,
                                                    dtype=build_dtype,
                                                    cast=plan.dtype is not None,
                                                    trust_remote_code=plan.trust_remote_code)
        say(f"built {type(model).__name__} without weights "
            f"({sum(p.numel() for p in model.parameters()):,} parameters; checkpoint "
            f"{weights.description}, {plan.route.weight_bytes:,} bytes as exported) "
            f"in {time.perf_counter() - since:.1f}s")
        return model
    model = _load_in_memory(plan)
    say(f"loaded {type(model).__name__} from {plan.model_dir} "
        f"({sum(p.numel() for p in model.parameters()):,} parameters) "
        f"in {time.perf_counter() - since:.1f}s")
    return model


def _load_in_memory(plan: _Plan) -> torch.nn.Module:
    return checkpoint.load_model(plan.model_dir, plan.config, plan.auto_class, dtype=plan.dtype,
                                 trust_remote_code=plan.trust_remote_code)


def _build_graphs(plan: _Plan, model: torch.nn.Module) -> list[GraphSpec]:
    """The task's graphs for `model` (one per output file)."""
    from onnxport.tasks.graphs import graphs_for

    try:
        return graphs_for(model, plan.family, plan.task, batch=plan.batch,
                          sequence=plan.sequence, position_ids=plan.position_ids)
    except OnnxExporterError:
        raise
    except Exception as e:
        raise TaskExportError(
            f"building the graphs of {plan.task} for {type(model).__name__} failed: "
            f"{type(e).__name__}: {e}") from e


def _export_and_save_each(plan: _Plan, model: torch.nn.Module, specs: list[GraphSpec],
                          staging: Path, say: Callable[[str], None],
                          save_progress: Callable[[str, int, int], None] | None,
                          seconds: dict[str, float],
                          since: tuple[float, float, float] | None = None,
                          checked: _Checked | None = None,
                          ) -> dict[str, dict[str, str]]:
    """Export each graph into `staging`, one at a time (a program is dropped once saved).
    With three graphs or more and a core idle since `since` (`workers.can_fork`), a forked
    worker (tasks/workers.py) exports `_worker_share` of them while this process exports the
    others, then validates into `checked` (when given) its own graphs and each of the
    worker's as soon as the worker has saved it, while the worker goes on; `seconds` stays
    wall-clock (this process's steps and its wait for the worker). Returns the quantized
    weights' layouts by file (empty without quantization)."""
    layouts: dict[str, dict[str, str]] = {}
    seconds["export"] = seconds["save"] = 0.0
    theirs = _worker_share(specs) if len(specs) >= 3 and _forkable(plan, since) else []
    worker: workers.Worker | None = None
    try:
        if theirs:
            forked = time.perf_counter()
            worker = workers.fork(functools.partial(_exported_in_worker, plan, model, theirs,
                                                    staging))
        for spec in specs:
            if not any(spec is other for other in theirs):
                _export_and_save_one(plan, model, spec, staging, say, save_progress, seconds,
                                     layouts)
        if worker is not None:
            own = time.perf_counter() - forked
            early = checked is not None and plan.validate and not plan.route.stream
            if early:
                for spec in specs:
                    if not any(spec is other for other in theirs):
                        _validate_early(plan, model, spec, staging, say, seconds, checked)
            t0 = time.perf_counter()
            waited = 0.0
            saved: set[str] = set()
            for filename, lines in worker.messages(timeout=_worker_timeout(own)):
                saved.add(filename)
                for line in lines:
                    say(line)
                waited += time.perf_counter() - t0
                if early:
                    _validate_early(plan, model, _named(theirs, filename), staging, say,
                                    seconds, checked)
                t0 = time.perf_counter()
            done, worker = worker.result(), None
            seconds["export"] += waited + time.perf_counter() - t0  # the wait: wall-clock
            if done is None:  # the worker failed: the rest exported here, errors raised here
                for spec in theirs:
                    if spec.filename not in saved:
                        _export_and_save_one(plan, model, spec, staging, say, save_progress,
                                             seconds, layouts)
    except BaseException:
        if worker is not None:
            worker.cancel()
        raise
    return layouts


def _named(specs: list[GraphSpec], filename: str) -> GraphSpec:
    return next(spec for spec in specs if spec.filename == filename)


WORKER_MARK = "(in the worker process)"
"""Ends the progress lines of the graphs a forked worker exported (said when collected)."""


def _worker_timeout(own: float) -> float:
    """How long the parent waits for the worker once its own graphs took `own` seconds: the
    worker's share takes about as long, so a worker far past it is stuck (then it is stopped
    and the parent exports its graphs itself)."""
    return max(120.0, 10.0 * own)


def _worker_share(specs: list[GraphSpec]) -> list[GraphSpec]:
    """The graphs a worker exports: the first (the encoder of a seq2seq task, the smallest)
    and the last (the decoder with a cache), the parent the ones between (the decoder).
    Both processes pay torch.export's first-call cost; the parent's one graph (cold) and the
    worker's two (one cold, one warm) take about as long (docs/cli.md)."""
    return [specs[0], specs[-1]]


def _exported_in_worker(plan: _Plan, model: torch.nn.Module, specs: list[GraphSpec],
                        staging: Path) -> bool:
    """Graphs exported and saved in a forked worker; each saved one is sent to the parent
    (`workers.send`) as (file name, its progress lines), which the parent says then."""
    for spec in specs:
        lines: list[str] = []
        _export_and_save_one(plan, model, spec, staging,
                             lambda line, lines=lines: lines.append(f"{line} {WORKER_MARK}"), None,
                             {"export": 0.0, "save": 0.0}, {})
        workers.send((spec.filename, lines))
    return True


def _forkable(plan: _Plan, since: tuple[float, float, float] | None) -> bool:
    """A worker process only on the in-memory route without quantization (the streamed
    route reads its checkpoint through shared file handles; quantization returns layouts),
    when the machine has a second core idle since `since` or the worker is asked for
    (`workers.can_fork`)."""
    return plan.weights is None and plan.qspec is None and workers.can_fork(since)


def _export_and_save_one(plan: _Plan, model: torch.nn.Module, spec: GraphSpec, staging: Path,
                         say: Callable[[str], None],
                         save_progress: Callable[[str, int, int], None] | None,
                         seconds: dict[str, float], layouts: dict[str, dict[str, str]]) -> None:
    t0 = time.perf_counter()
    program = _export_graph(plan, model, spec, staging, say)
    if plan.qspec is not None:
        layouts[spec.filename] = _quantize(plan, program, spec, say)
    seconds["export"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    _save_graph(plan, program, spec, staging, save_progress)
    del program
    if plan.weights is not None:
        plan.weights.close()
    size = sum(p.stat().st_size for p in staging.glob(spec.filename + "*"))
    took = time.perf_counter() - t0
    seconds["save"] += took
    say(f"saved {spec.filename} ({size:,} bytes) in {took:.1f}s "
        f"({size / 1e6 / max(took, 1e-9):.0f} MB/s)")


def _export_graph(plan: _Plan, model: torch.nn.Module, spec: GraphSpec, staging: Path,
                  say: Callable[[str], None]) -> Any:
    """One graph's ONNXProgram, its weights read from the checkpoint on the streamed route."""
    say(f"exporting {spec.filename}: capture, translate, optimize")
    kwargs: dict[str, Any] = {"opset_version": plan.opset, "optimize": plan.optimize,
                              "report": plan.report, "artifacts_dir": str(staging)}
    if plan.target != "onnx":
        kwargs["target"] = _with_context_length(plan.target, model)
    with torch.no_grad(), _without_fake_tensor_cache():
        try:
            program = spec.export_program(dynamic=plan.dynamic, **kwargs)
        except OnnxExporterError:
            raise
        except Exception as e:
            raise TaskExportError(
                f"exporting {spec.filename} for {plan.task} failed: "
                f"{type(e).__name__}: {e}") from e
    if plan.weights is not None:
        applied = streaming.apply_checkpoint(program, plan.weights, model)
        say(f"weights of {spec.filename}: {len(applied.applied)} read from the "
            f"checkpoint as it is saved ({len(applied.aliased)} under a tied name, "
            f"{len(applied.converted)} converted), "
            f"{len(applied.kept) + len(applied.materialized)} computed by the model "
            f"(buffers checkpoints do not hold)")
    return program


def _quantize(plan: _Plan, program: Any, spec: GraphSpec,
              say: Callable[[str], None]) -> dict[str, str]:
    qspec = plan.qspec
    assert qspec is not None
    done = quantize_program(program, qspec, plan.target)
    say(f"quantized {len(done.nodes)} weights of {spec.filename} to int{qspec.bits} "
        f"(round to nearest, "
        + (f"blocks of {qspec.block_size}" if qspec.block_size else "per channel")
        + (", symmetric)" if qspec.symmetric else ", zero points)"))
    return done.layouts


def _save_graph(plan: _Plan, program: Any, spec: GraphSpec, staging: Path,
                save_progress: Callable[[str, int, int], None] | None) -> None:
    bytes_done = (None if save_progress is None else
                  functools.partial(save_progress, spec.filename))
    # The streamed route always writes external data: an inline save would gather every
    # weight into one protobuf in memory.
    program.save(staging / spec.filename,
                 external_data=True if plan.weights is not None else None,
                 progress=bytes_done)


def _write_companions(plan: _Plan, staging: Path) -> None:
    """The checkpoint's config, tokenizer and preprocessor files, and genai_config.json for
    a decoder-only LM with a cache."""
    _copy_checkpoint_files(plan.model_dir, staging)
    if plan.family == "decoder" and plan.task == "text-generation-with-past":
        from onnxport.tasks.genai import write_genai_config

        write_genai_config(staging, plan.config,
                           with_position_ids=decoder_uses_position_ids(plan.config)
                           and plan.position_ids is not False)


@dataclasses.dataclass
class _Checked:
    rows: list[Row] = dataclasses.field(default_factory=list)
    checks: list[streaming.Check] = dataclasses.field(default_factory=list)
    not_validated: str = ""
    early: dict[str, list[Row]] = dataclasses.field(default_factory=dict)  # by file name


def _validate_early(plan: _Plan, model: torch.nn.Module, spec: GraphSpec, staging: Path,
                    say: Callable[[str], None], seconds: dict[str, float],
                    checked: _Checked) -> None:
    """One saved graph of the in-memory route validated before the others are saved (while
    a worker exports them); `_validate` keeps its rows."""
    t0 = time.perf_counter()
    tol = default_atol(float_dtype(model)) if plan.atol is None else plan.atol
    shapes = spec.shapes if plan.dynamic else spec.shapes[:1]
    say(f"validating {spec.filename} at {len(shapes)} shapes (atol {tol:g})")
    checked.early[spec.filename] = validate_graph(spec, staging / spec.filename, atol=tol,
                                                  shapes=shapes)
    seconds["validate"] = seconds.get("validate", 0.0) + time.perf_counter() - t0


def _validate(plan: _Plan, model: torch.nn.Module, specs: list[GraphSpec], staging: Path,
              layouts: dict[str, dict[str, str]], say: Callable[[str], None],
              seconds: dict[str, float], checked: _Checked) -> _Checked:
    """ONNX Runtime against eager at the specs' shapes, into `checked` (in the specs' order,
    with the rows of the graphs `_validate_early` checked). On the streamed route the files
    are checked first (CRC-32s, a session), and eager runs only if the model fits in memory
    (loaded again, with its weights)."""
    if not plan.validate:
        return checked
    if plan.route.stream:
        t0 = time.perf_counter()
        for spec in specs:
            say(f"checking {spec.filename}: external data CRC-32, ONNX Runtime session")
            checked.checks += streaming.check_saved(staging / spec.filename)
        export_dtype = next((p.dtype for p in model.parameters()
                             if p.is_floating_point()), torch.float32)
        need = streaming.eager_validation_bytes(plan.route.weight_bytes, export_dtype)
        available = streaming.available_memory()
        seconds["check"] = time.perf_counter() - t0
        if need > streaming.MEMORY_FRACTION * available:
            checked.not_validated = (
                f"ONNX Runtime's outputs were not compared with eager PyTorch: that needs "
                f"the model in memory twice over (~{need / 1024**3:.1f} GB), and "
                f"{available / 1024**3:.1f} GB is available")
            say(checked.not_validated)
            return checked
        del model, specs
        say("the eager model fits in memory: loading it to compare with ONNX Runtime")
        model = _load_in_memory(plan)
        specs = _build_graphs(plan, model)
    t0 = time.perf_counter()
    tol = default_atol(float_dtype(model)) if plan.atol is None else plan.atol
    for spec in specs:
        if spec.filename in checked.early:
            checked.rows += checked.early[spec.filename]
            continue
        shapes = spec.shapes if plan.dynamic else spec.shapes[:1]
        if plan.qspec is not None and layouts.get(spec.filename):
            checked.rows += _validate_quantized(spec, staging / spec.filename, model,
                                                layouts[spec.filename], plan.qspec, tol,
                                                shapes, say)
            continue
        say(f"validating {spec.filename} at {len(shapes)} shapes (atol {tol:g})")
        checked.rows += validate_graph(spec, staging / spec.filename, atol=tol, shapes=shapes)
    seconds["validate"] = seconds.get("validate", 0.0) + time.perf_counter() - t0
    return checked


def _with_context_length(target: str, model: torch.nn.Module) -> str:
    """The ONNX Runtime target given the model's context length (`max_position_embeddings`), so
    GroupQueryAttention's cos/sin caches are constant tables as in the GenAI builder's graphs
    (decode 1.058x -> 1.023x the builder per token in onnxruntime-genai, run 06g of
    benchmarks/bench_quantized_cli.py); genai_config's max_length is the same length."""
    from onnxport.options import OnnxRuntimeTarget

    config = getattr(model, "config", None)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()   # a multimodal model's language model
    n = getattr(config, "max_position_embeddings", None)
    if target != "onnxruntime" or not isinstance(n, int) or n < 1 \
            or getattr(target, "max_positions", None) is not None:
        return target
    return OnnxRuntimeTarget(int4_accuracy_level=getattr(target, "int4_accuracy_level", 4),
                             int4_block_size=getattr(target, "int4_block_size", 32),
                             max_positions=n)


def _parse_target(target: str, accuracy_level: int | None) -> str:
    if target not in ("onnx", "onnxruntime"):
        raise TaskError(f"unknown target {target!r}; choose onnx or onnxruntime")
    if accuracy_level is None:
        return target
    if target != "onnxruntime":
        raise TaskError("accuracy_level (--accuracy-level) is an option of "
                        "target='onnxruntime' (MatMulNBits)")
    from onnxport.options import OnnxRuntimeTarget

    try:
        return OnnxRuntimeTarget(int4_accuracy_level=accuracy_level,
                                 int4_block_size=getattr(target, "int4_block_size", 32))
    except ValueError as e:
        raise TaskError(str(e)) from None


def _validate_quantized(spec: Any, path: Path, model: torch.nn.Module, layouts: dict[str, str],
                        qspec: QuantizeSpec, atol: float, shapes: list[dict[str, int]],
                        say: Callable[[str], None]) -> list[Row]:
    """The two comparisons of a quantized graph (tasks/quantized.py): with the eager model
    carrying the RTN weights within e_q + atol, with the float eager model within
    2 e_q + atol; rows labelled by reference."""
    e_q = quantization_error(spec, model, layouts, qspec, shapes)
    say(f"validating {spec.filename} at {len(shapes)} shapes: RTN changes eager's outputs by "
        f"up to {e_q:.3g}; tolerance {e_q + atol:.3g} against eager with the quantized "
        f"weights, {2 * e_q + atol:.3g} against float eager")
    with rtn_weights(model, layouts, qspec):
        exact = validate_graph(spec, path, atol=e_q + atol, shapes=shapes)
    plain = validate_graph(spec, path, atol=2 * e_q + atol, shapes=shapes)
    return ([dataclasses.replace(r, file=f"{r.file} vs eager RTN-int{qspec.bits}")
             for r in exact]
            + [dataclasses.replace(r, file=f"{r.file} vs eager float") for r in plain])


def _without_fake_tensor_cache() -> Any:
    """torch.export without its fake-tensor dispatch cache, for the graphs of a task.

    Each graph is traced once, and with dynamic dims every cache key and cache entry costs
    symbolic stride arithmetic: on the tiny checkpoints the cache costs more than it saves
    (capture CPU time -28% on T5's three graphs without it). The traced graph is the same
    but for the numbering of some value names (the tracer also numbers the symbolic size
    arithmetic the cache skipped).
    """
    import torch._dynamo.config

    return torch._dynamo.config.patch(fake_tensor_cache_enabled=False)


def _config_dtype(config: Any) -> torch.dtype | None:
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


def _plan_route(model_dir: Path, config: Any, dtype: torch.dtype | None,
                stream: bool | None, validate: bool,
                ) -> tuple[streaming.RoutePlan, Any]:
    """The route, and the checkpoint opened for streaming (None on the in-memory route)."""
    checkpoint.check_weights(checkpoint.weight_files(model_dir))
    if stream is False:
        return streaming.plan_route(0, torch.float32, stream=False, validate=validate), None
    try:
        weights = streaming.open_weights(model_dir)
    except TaskError:
        if stream:
            raise
        # Not streamable (a legacy .bin): the in-memory route reads it.
        return streaming.RoutePlan(False, 0, 0, "the weights cannot be memory-mapped"), None
    export_dtype = dtype or _config_dtype(config) or streaming.checkpoint_dtype(weights)
    nbytes = streaming.checkpoint_bytes(weights, export_dtype)
    plan = streaming.plan_route(nbytes, export_dtype, stream=stream, validate=validate)
    return plan, (weights if plan.stream else None)
