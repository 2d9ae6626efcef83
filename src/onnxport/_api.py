"""export(): capture -> translate -> passes -> ONNXProgram."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import IO, Any

import torch

from onnxport.capture import capture
from onnxport.diagnostics import DiagnosticContext
from onnxport.errors import (
    CaptureError,
    OnnxExporterError,
    TranslationError,
    UnsupportedOperatorError,
    VerificationError,
)
from onnxport.options import DiagnosticOptions, ExportOptions
from onnxport.passes import cleanup_passes, run_passes
from onnxport.passes.convert_opset import LIBRARY_OPSET, convert_to_opset
from onnxport.program import ONNXProgram
from onnxport.translate import Registry, default_registry
from onnxport.translate.translator import Translator
from onnxport.verify.compare import verify_program
from onnxport.verify.report import ExportReport

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 18
_SARIF_REPORT = "report_dynamo_export.sarif"
_in_export = 0


def is_in_onnx_export() -> bool:
    """Whether an onnxport export is running (in either flavour)."""
    return _in_export > 0


@contextlib.contextmanager
def _exporting() -> Iterator[None]:
    global _in_export
    _in_export += 1
    try:
        yield
    finally:
        _in_export -= 1


def export(
    model: torch.nn.Module | torch.export.ExportedProgram | Any,
    args: tuple[Any, ...] | torch.Tensor = (),
    f: str | os.PathLike[str] | IO[bytes] | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
    export_params: bool = True,
    verbose: bool | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset_version: int | None = None,
    dynamic_axes: Mapping[str, Mapping[int, str] | Sequence[int]] | None = None,
    keep_initializers_as_inputs: bool | None = None,
    dynamo: bool = True,
    external_data: bool | None = None,
    dynamic_shapes: Any = None,
    report: bool = False,
    optimize: bool = True,
    verify: bool = False,
    artifacts_dir: str | os.PathLike[str] = ".",
    registry: Registry | Any = None,
    **torchscript_options: Any,
) -> ONNXProgram | None:
    """Export a PyTorch model to ONNX.

    Args:
        model: An nn.Module, a function, or a torch.export.ExportedProgram.
        args: Example positional inputs (a tensor or a tuple).
        f: Where to save the model (path or binary file object); nothing is written on failure.
        kwargs: Example keyword inputs.
        export_params: Store the weights in the model.
        verbose: Log progress.
        input_names: Names of the graph inputs, in order (default: forward's parameter names).
        output_names: Names of the graph outputs, in order.
        opset_version: The ONNX opset (default 18).
        dynamic_axes: The legacy form of dynamic_shapes: {input_name: {axis: dim_name}}.
        keep_initializers_as_inputs: List the weights as graph inputs too (dynamo=False: None
            means False for OperatorExportTypes.ONNX, True otherwise).
        dynamo: True for the torch.export path; False for the TorchScript path.
        external_data: Save weights to `<f>.data`; None: only above 2 GB.
        dynamic_shapes: As torch.export.export takes it.
        report: Write a markdown report to `artifacts_dir`, on success and on failure.
        optimize: Run the optimization passes (constant folding, CSE, dead code removal).
        verify: Run the model in ONNX Runtime and compare with eager PyTorch.
        artifacts_dir: Where the report goes.
        registry: An OnnxRegistry or Registry to use instead of the built-in op library.
        torchscript_options: Options of the TorchScript flavour (dynamo=False): training,
            operator_export_type, do_constant_folding, custom_opsets (see
            `onnxport._torchscript_api.export_torchscript`).

    Returns:
        The ONNXProgram (dynamo=True); None with dynamo=False, as torch.onnx's TorchScript
        flavour returns (the model is written to `f`).

    Raises:
        OnnxExporterError: a subclass saying what failed, where and how to fix it.

    Example:
        >>> import torch, onnxport
        >>> program = onnxport.export(torch.nn.ReLU(), (torch.randn(2, 3),))
        >>> [n.op_type for n in program.model.graph]
        ['Relu']
    """
    if not dynamo:
        if dynamic_shapes is not None:
            raise TypeError("dynamo=False takes dynamic_axes, not dynamic_shapes")
        _export_torchscript(model, args, f, kwargs=kwargs, export_params=export_params,
                            verbose=verbose, input_names=input_names, output_names=output_names,
                            opset_version=opset_version, dynamic_axes=dynamic_axes,
                            keep_initializers_as_inputs=keep_initializers_as_inputs,
                            external_data=external_data, registry=registry,
                            options=torchscript_options)
        return None
    if torchscript_options:
        raise TypeError(f"export() got options of the TorchScript flavour with dynamo=True: "
                        f"{', '.join(sorted(torchscript_options))}")
    if isinstance(args, torch.Tensor):
        args = (args,)
    return _export_dynamo(
        model, tuple(args), kwargs, f=f, export_params=export_params, verbose=verbose,
        input_names=input_names, output_names=output_names, opset_version=opset_version,
        dynamic_axes=dynamic_axes, keep_initializers_as_inputs=keep_initializers_as_inputs,
        external_data=external_data, dynamic_shapes=dynamic_shapes, report=report,
        optimize=optimize, verify=verify, artifacts_dir=artifacts_dir, registry=registry)


def _export_dynamo(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, *,
    f: str | os.PathLike[str] | IO[bytes] | None = None, export_params: bool = True,
    verbose: bool | None = None, input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None, opset_version: int | None = None,
    dynamic_axes: Mapping[str, Any] | None = None, keep_initializers_as_inputs: bool = False,
    external_data: bool | None = None, dynamic_shapes: Any = None, report: bool = False,
    optimize: bool = True, verify: bool = False, artifacts_dir: str | os.PathLike[str] = ".",
    registry: Any = None, diagnostic_options: DiagnosticOptions | None = None,
) -> ONNXProgram:
    """The dynamo pipeline: capture, translate, passes, verify, save; with report and diagnostics."""
    target_opset = opset_version or DEFAULT_OPSET
    # Translations are written for opset 18 and newer; older targets are converted down.
    opset = max(target_opset, LIBRARY_OPSET)
    table = _as_registry(registry)
    dim_names = _dim_names(dynamic_axes, dynamic_shapes)
    if dynamic_axes and dynamic_shapes is None:
        dynamic_shapes = _dynamic_axes_to_shapes(model, args, kwargs, dynamic_axes, input_names)
    name = _model_name(model)
    rep = ExportReport(name) if report else None
    diagnostics = DiagnosticContext(diagnostic_options)
    timings: dict[str, float] = {}
    try:
        with _exporting():
            t0 = time.perf_counter()
            captured = capture(model, args, kwargs, dynamic_shapes=dynamic_shapes,
                               has_translation=lambda t: table.lookup(t, opset) is not None)
            timings["capture"] = captured.seconds
            timings["decompose"] = captured.decompose_seconds
            _diagnose_capture(diagnostics, captured)
            if rep is not None:
                rep.attempts = captured.attempts
                rep.decomposed = captured.decomposed
                rep.exported_program = str(captured.exported_program)
            t1 = time.perf_counter()
            onnx_model = Translator(captured, table, opset, input_names=input_names,
                                    output_names=output_names, dim_names=dim_names).run()
            timings["translate"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            run_passes(onnx_model, cleanup_passes())
            if optimize:
                run_passes(onnx_model)
            if target_opset < opset:
                onnx_model = convert_to_opset(onnx_model, target_opset)
                diagnostics.log("OPX008", logging.INFO,
                                f"translated at opset {opset}, converted to opset {target_opset}")
            timings["passes"] = time.perf_counter() - t2
            program = ONNXProgram(onnx_model, captured.exported_program)
            program.diagnostic_context = diagnostics
            if rep is not None:
                rep.model = onnx_model
            if verify:
                t3 = time.perf_counter()
                diffs = verify_program(program, model, args, kwargs)
                timings["verify"] = time.perf_counter() - t3
                if rep is not None:
                    rep.verification = diffs
            if diagnostics.options.warnings_as_errors and diagnostics.warnings:
                listed = "\n".join(f"  {d.rule.id} {d.rule.name}: {d.message}"
                                    for d in diagnostics.warnings)
                raise OnnxExporterError(
                    f"{len(diagnostics.warnings)} warning diagnostics with warnings_as_errors=True:"
                    f"\n{listed}\n  fix: address them, or set warnings_as_errors=False")
            if f is not None:
                t4 = time.perf_counter()
                program.save(f, include_initializers=export_params,
                             keep_initializers_as_inputs=bool(keep_initializers_as_inputs),
                             external_data=external_data)
                timings["save"] = time.perf_counter() - t4
            timings["total"] = time.perf_counter() - t0
            if verbose:
                logger.info("exported %s in %.3fs: %s", name, timings["total"], timings)
    except Exception as e:
        _diagnose_failure(diagnostics, e)
        if isinstance(e, OnnxExporterError):
            e.diagnostic_context = diagnostics  # type: ignore[attr-defined]
        if rep is not None:
            rep.error = e
            rep.timings = timings
            rep.diagnostics = diagnostics.diagnostics
            if isinstance(e, OnnxExporterError) and getattr(e, "diffs", None):
                rep.verification = e.diffs  # type: ignore[attr-defined]
            path = rep.write(os.fspath(artifacts_dir))
            logger.warning("export failed; report written to %s", path)
        raise
    if rep is not None:
        rep.timings = timings
        rep.diagnostics = diagnostics.diagnostics
        rep.write(os.fspath(artifacts_dir))
    return program


def _model_name(model: Any) -> str:
    if isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)) or not callable(model):
        return type(model).__name__
    return getattr(model, "__name__", "model")


def _diagnose_capture(diagnostics: DiagnosticContext, captured: Any) -> None:
    for attempt in captured.attempts:
        if attempt.error is not None:
            first = (str(attempt.error).strip().splitlines() or [""])[0]
            diagnostics.log("OPX001", logging.WARNING,
                            f"capture strategy '{attempt.strategy}' failed "
                            f"({type(attempt.error).__name__}: {first}); used '{captured.strategy}'")
    for op in captured.decomposed:
        diagnostics.log("OPX002", logging.INFO, f"{op} has no translation; it was decomposed")
    if captured.retraced:
        diagnostics.log("OPX003", logging.WARNING,
                        "the whole program was re-traced by run_decompositions")


def _diagnose_failure(diagnostics: DiagnosticContext, error: BaseException) -> None:
    if isinstance(error, UnsupportedOperatorError) and error.missing:
        for m in error.missing:
            diagnostics.log("OPX004", logging.ERROR, f"{m.target} has no translation",
                            source=m.source, node=m.node)
    elif isinstance(error, TranslationError):
        diagnostics.log("OPX005", logging.ERROR, str(error).splitlines()[0],
                        source=error.source or "", node=error.node or "")
    elif isinstance(error, CaptureError):
        diagnostics.log("OPX006", logging.ERROR, str(error).splitlines()[0])
    elif isinstance(error, VerificationError):
        diagnostics.log("OPX007", logging.ERROR, str(error).splitlines()[0])
    else:
        diagnostics.log("OPX009", logging.ERROR, f"{type(error).__name__}: {error}")


def _export_torchscript(model: Any, args: Any, f: Any, *, registry: Any, options: dict[str, Any],
                        **common: Any) -> None:
    """The dynamo=False flavour: TorchScript capture, the same op library."""
    from onnxport._torchscript_api import export_torchscript, split_options

    with _exporting():
        export_torchscript(model, args, f, registry=_as_registry(registry),
                           **common, **split_options(options))


def dynamo_export(model: torch.nn.Module | torch.export.ExportedProgram | Any, /,
                  *model_args: Any, export_options: ExportOptions | None = None,
                  **model_kwargs: Any) -> ONNXProgram:
    """Export a model to ONNX with the TorchDynamo-based exporter (the PyTorch 2.1 API).

    Args:
        model: An nn.Module, a callable or a torch.export.ExportedProgram.
        model_args: Positional inputs to the model.
        export_options: ExportOptions (dynamic shapes, registry, fake context, diagnostics).
        model_kwargs: Keyword inputs to the model; Python numbers are baked into the graph.

    Returns:
        The ONNXProgram.

    Example:
        >>> import torch, onnxport
        >>> program = onnxport.dynamo_export(torch.nn.Linear(2, 2), torch.randn(3, 2))
        >>> [v.name for v in program.model.graph.inputs]
        ['input']
    """
    options = export_options or ExportOptions()
    dynamic_shapes = None
    if options.dynamic_shapes:
        dynamic_shapes = _all_dims_dynamic(model, model_args, model_kwargs)
    try:
        return _export_dynamo(model, tuple(model_args), model_kwargs or None,
                              dynamic_shapes=dynamic_shapes, registry=options.onnx_registry,
                              diagnostic_options=options.diagnostic_options)
    except OnnxExporterError as e:
        # As documented for dynamo_export: the diagnostics go to a SARIF log.
        context = getattr(e, "diagnostic_context", None)
        if context is not None:
            context.save_sarif(_SARIF_REPORT)
            e.sarif_path = os.path.abspath(_SARIF_REPORT)  # type: ignore[attr-defined]
            logger.warning("export failed; diagnostics written to %s", _SARIF_REPORT)
        raise


def _all_dims_dynamic(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A dynamic_shapes spec marking every dimension of every tensor input dynamic."""
    def spec(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return {i: torch.export.Dim.AUTO for i in range(x.dim())} if x.dim() else None
        return None

    if isinstance(model, torch.export.ExportedProgram):
        return None
    mapped_args = torch.utils._pytree.tree_map(spec, tuple(args))
    if not kwargs:
        return mapped_args
    import inspect

    forward = model.forward if isinstance(model, torch.nn.Module) else model
    params = list(inspect.signature(forward).parameters)
    named = {params[i]: s for i, s in enumerate(mapped_args) if i < len(params)}
    named.update({k: torch.utils._pytree.tree_map(spec, v) for k, v in kwargs.items()})
    return named


def _as_registry(registry: Any) -> Registry:
    if registry is None:
        return default_registry()
    if isinstance(registry, Registry):
        return registry
    inner = getattr(registry, "registry", None)
    if isinstance(inner, Registry):
        return inner
    raise TypeError(f"registry must be an OnnxRegistry, not {type(registry).__name__}")


def _dim_names(dynamic_axes: Mapping[str, Any] | None, dynamic_shapes: Any) -> dict[str, dict[int, str]]:
    """{input name: {axis: dim name}} from dynamic_axes names or named torch.export Dims."""
    names: dict[str, dict[int, str]] = {}
    for input_name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, Mapping):
            names[input_name] = {int(a): str(n) for a, n in axes.items()}
        else:
            names[input_name] = {int(a): f"{input_name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    specs: list[tuple[str, Any]] = []
    if isinstance(dynamic_shapes, Mapping):
        specs = [(str(k), v) for k, v in dynamic_shapes.items()]
    elif isinstance(dynamic_shapes, (list, tuple)):
        specs = [(f"#{i}", v) for i, v in enumerate(dynamic_shapes)]
    if specs:
        for input_name, spec in specs:
            if isinstance(spec, Mapping):
                found = {int(a): d.__name__ for a, d in spec.items()
                         if isinstance(getattr(d, "__name__", None), str) and type(d).__name__ != "_DimHint"}
            elif isinstance(spec, (list, tuple)):
                found = {i: d.__name__ for i, d in enumerate(spec)
                         if isinstance(getattr(d, "__name__", None), str) and type(d).__name__ != "_DimHint"}
            else:
                continue
            if found:
                names.setdefault(str(input_name), {}).update(found)
    return names


def _dynamic_axes_to_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                            dynamic_axes: Mapping[str, Mapping[int, str] | Sequence[int]],
                            input_names: Sequence[str] | None) -> Any:
    """Convert the legacy {input_name: axes} form into torch.export's dynamic_shapes."""
    import inspect

    forward = model.forward if isinstance(model, torch.nn.Module) else model
    params = list(inspect.signature(forward).parameters)
    names = list(input_names or [])
    shapes: dict[str, Any] = {}
    for i, param in enumerate(params):
        public = names[i] if i < len(names) else param
        axes: Collection[int] | Mapping[int, str] = dynamic_axes.get(public) or dynamic_axes.get(param) or {}
        if axes:
            shapes[param] = {int(a): torch.export.Dim.DYNAMIC for a in axes}
        else:
            shapes[param] = None
    used = len(args) + len(kwargs or {})
    return {k: v for k, v in list(shapes.items())[:max(used, 0)]}
