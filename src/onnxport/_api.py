"""export(): capture -> translate -> passes -> ONNXProgram."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import IO, Any

import torch

from onnxport._onnxscript import user_translation
from onnxport._stages import ExportRun
from onnxport._torchscript_api import export_torchscript, warn_legacy_export
# is_in_onnx_export is re-exported: onnxport.is_in_onnx_export, onnxport.utils take it from here.
from onnxport._state import _as_registry, _exporting, is_in_onnx_export  # noqa: F401
from onnxport._validate import check_dynamo_export_arguments, check_export_arguments
from onnxport.capture import capture
from onnxport.capture.torchscript import OperatorExportTypes, TrainingMode
from onnxport.capture.dynamic_shapes import (ResolvedInputs, resolve_inputs,
                                             split_trailing_kwargs, warn_unused_dim_names)
from onnxport.diagnostics import DiagnosticContext
from onnxport.errors import OnnxExporterError, VerificationError
from onnxport.options import DiagnosticOptions, ExportOptions
from onnxport.passes import cleanup_passes, run_passes, target_passes
from onnxport.passes.convert_opset import LIBRARY_OPSET, align_function_opsets, convert_to_opset
from onnxport.program import ONNXProgram
from onnxport.translate import Registry
from onnxport.translate.translator import Translator, dtype_opset
from onnxport.verify.compare import verify_program

logger = logging.getLogger(__name__)

# torch.onnx 2.13's default for both flavours (torch/onnx/_constants.py ONNX_DEFAULT_OPSET).
DEFAULT_OPSET = 20
_SARIF_REPORT = "report_dynamo_export.sarif"


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
    custom_translation_table: Mapping[Any, Any] | None = None,
    report: bool = False,
    optimize: bool = True,
    target: str = "onnx",
    verify: bool = False,
    profile: bool = False,
    dump_exported_program: bool = False,
    artifacts_dir: str | os.PathLike[str] = ".",
    fallback: bool = False,
    registry: Registry | Any = None,
    training: TrainingMode = TrainingMode.EVAL,
    operator_export_type: OperatorExportTypes = OperatorExportTypes.ONNX,
    do_constant_folding: bool = True,
    custom_opsets: Mapping[str, int] | None = None,
    export_modules_as_functions: bool | Collection[type[torch.nn.Module]] = False,
    autograd_inlining: bool = True,
) -> ONNXProgram | None:
    """Export a PyTorch model to ONNX.

    Args:
        model: An nn.Module, a function, a torch.export.ExportedProgram, or an
            ExportableModule (which supplies its own example inputs, names and shapes).
        args: Example positional inputs (a tensor or a tuple). A dict last in the tuple holds
            keyword inputs, unless `kwargs` is given (torch.onnx's rule).
        f: Where to save the model (path or binary file object); nothing is written on failure.
        kwargs: Example keyword inputs.
        export_params: Store the weights in the model.
        verbose: Log progress.
        input_names: Names of the graph inputs, in order (default: forward's parameter names).
        output_names: Names of the graph outputs, in order.
        opset_version: The ONNX opset (default 20, as torch.onnx 2.13; by default a model
            with values of a newer type gets that type's opset, with a warning: float4 23).
        dynamic_axes: The legacy form of dynamic_shapes (deprecated with dynamo=True, as in
            torch.onnx): {input: {axis: dim name}} or {input: [axis, ...]}; an input is named
            by `input_names`, its default graph input name, or forward's parameter name.
        keep_initializers_as_inputs: List the weights as graph inputs too (dynamo=False: None
            means False for OperatorExportTypes.ONNX, True otherwise).
        dynamo: True for the torch.export path; False for the TorchScript path.
        external_data: Save weights to `<f>.data`; None: only above 2 GB.
        dynamic_shapes: As torch.export.export takes it, and per axis also a string, which
            makes the axis dynamic and names the ONNX dimension (one string used on two
            inputs is one dimension).
        custom_translation_table: {torch op: translation}; a translation is a function
            calling onnxscript ops (torch.onnx's form: traced, the node's arguments bound to
            its own parameters), an onnxscript function, an onnxport `fn(g, ...)` (first
            parameter `g`), or a list of them (per node, the first whose signature fits). It
            overrides the built-in op library for this export, as `OnnxRegistry.register_op`.
        report: Write a markdown report to `artifacts_dir`, on success and on failure.
        optimize: Run the optimization passes (constant folding, CSE, dead code removal,
            fusions to standard ONNX ops).
        target: "onnx" (default): standard ONNX that any runtime loads. "onnxruntime": also
            rewrite into ONNX Runtime's contrib ops (com.microsoft) where ORT runs them faster
            (see docs/architecture.md, "Targets"). Needs optimize=True.
        verify: Run the model in ONNX Runtime and compare with eager PyTorch.
        profile: Profile the export: per-stage times in `program.profile` and the report, and
            a cProfile listing written to `artifacts_dir`.
        dump_exported_program: Save the captured ExportedProgram (`torch.export.save`) to
            `artifacts_dir`.
        artifacts_dir: Where the report, profile and exported program go.
        fallback: If the dynamo flavour fails, export with the TorchScript flavour instead
            (with a warning saying why).
        registry: An OnnxRegistry or Registry to use instead of the built-in op library.
        training, operator_export_type, do_constant_folding, custom_opsets,
        export_modules_as_functions, autograd_inlining: Options of the TorchScript flavour
            (dynamo=False; see `docs/torchscript.md`). With dynamo=True they have no effect,
            as in torch.onnx; a value other than the default says so in a warning.

    Returns:
        The ONNXProgram (dynamo=True); None with dynamo=False, as torch.onnx's TorchScript
        flavour returns (the model is written to `f`).

    Raises:
        OnnxExporterError: a subclass saying what failed, where and how to fix it.
        ValueError, TypeError: an argument is malformed; the message names it.

    Example:
        >>> import torch, onnxport
        >>> program = onnxport.export(torch.nn.ReLU(), (torch.randn(2, 3),))
        >>> [n.op_type for n in program.model.graph]
        ['Relu']
    """
    if isinstance(args, torch.Tensor):
        args = (args,)
    check_export_arguments(
        model, args, f, kwargs=kwargs, dynamo=dynamo, input_names=input_names,
        output_names=output_names, opset_version=opset_version, dynamic_axes=dynamic_axes,
        dynamic_shapes=dynamic_shapes, external_data=external_data,
        custom_translation_table=custom_translation_table, report=report, verify=verify,
        profile=profile, dump_exported_program=dump_exported_program, fallback=fallback,
        target=target, optimize=optimize)
    model, args, kwargs, input_names, output_names, dynamic_shapes = _from_exportable_module(
        model, tuple(args), kwargs, input_names, output_names, dynamic_shapes)
    torchscript_options = {
        "training": training, "operator_export_type": operator_export_type,
        "do_constant_folding": do_constant_folding, "custom_opsets": custom_opsets,
        "export_modules_as_functions": export_modules_as_functions,
        "autograd_inlining": autograd_inlining}
    if not dynamo:
        warn_legacy_export(stacklevel=2)
        if dynamic_shapes is not None:
            raise TypeError("dynamo=False takes dynamic_axes, not dynamic_shapes")
        _export_torchscript(model, args, f, kwargs=kwargs, export_params=export_params,
                            verbose=verbose, input_names=input_names, output_names=output_names,
                            opset_version=opset_version, dynamic_axes=dynamic_axes,
                            keep_initializers_as_inputs=keep_initializers_as_inputs,
                            external_data=external_data, registry=registry,
                            options=torchscript_options)
        return None
    _warn_ignored_torchscript_options(torchscript_options)
    if dynamic_axes and dynamic_shapes is None and \
            not isinstance(model, torch.export.ExportedProgram):
        # torch.onnx's text, word for word (code filters on it); only where dynamic_axes is
        # what makes the dims dynamic.
        warnings.warn(
            "from_dynamic_axes_to_dynamic_shapes is deprecated and will be removed in a future "
            "release. This function converts 'dynamic_axes' format (including custom axis names) "
            "to 'dynamic_shapes' format. Instead of relying on this conversion, provide "
            "'dynamic_shapes' directly with custom names.",
            DeprecationWarning, stacklevel=2)
    if not isinstance(model, torch.export.ExportedProgram):
        args, kwargs = split_trailing_kwargs(tuple(args), kwargs)
    try:
        return _export_dynamo(
            model, tuple(args), kwargs, f=f, export_params=export_params, verbose=verbose,
            input_names=input_names, output_names=output_names, opset_version=opset_version,
            dynamic_axes=dynamic_axes, keep_initializers_as_inputs=keep_initializers_as_inputs,
            external_data=external_data, dynamic_shapes=dynamic_shapes, report=report,
            optimize=optimize, verify=verify, artifacts_dir=artifacts_dir, registry=registry,
            custom_translation_table=custom_translation_table, profile=profile,
            dump_exported_program=dump_exported_program, target=target)
    except OnnxExporterError as e:
        if not fallback or isinstance(e, VerificationError) \
                or isinstance(model, torch.export.ExportedProgram):
            raise
        return _fallback_to_torchscript(
            e, model, args, kwargs, f, export_params=export_params, verbose=verbose,
            input_names=input_names, output_names=output_names, opset_version=opset_version,
            dynamic_axes=dynamic_axes, dynamic_shapes=dynamic_shapes,
            keep_initializers_as_inputs=keep_initializers_as_inputs,
            external_data=external_data, registry=registry)


def _export_dynamo(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, *,
    f: str | os.PathLike[str] | IO[bytes] | None = None, export_params: bool = True,
    verbose: bool | None = None, input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None, opset_version: int | None = None,
    dynamic_axes: Mapping[str, Any] | None = None, keep_initializers_as_inputs: bool = False,
    external_data: bool | None = None, dynamic_shapes: Any = None, report: bool = False,
    optimize: bool = True, verify: bool = False, artifacts_dir: str | os.PathLike[str] = ".",
    registry: Any = None, diagnostic_options: DiagnosticOptions | None = None,
    custom_translation_table: Mapping[Any, Any] | None = None, profile: bool = False,
    dump_exported_program: bool = False, target: str = "onnx",
) -> ONNXProgram:
    """The dynamo pipeline: capture, translate, passes, program, verify, save."""
    target_opset = opset_version or DEFAULT_OPSET
    # Translations are written for opset 18 and newer; older targets are converted down.
    opset = max(target_opset, LIBRARY_OPSET)
    table = _with_translations(_as_registry(registry), custom_translation_table)
    inputs = resolve_inputs(model, args, kwargs, dynamic_shapes=dynamic_shapes,
                            dynamic_axes=dynamic_axes, input_names=input_names,
                            output_names=output_names)
    run = ExportRun(_model_name(model), DiagnosticContext(diagnostic_options),
                    report=report, profile=profile, artifacts_dir=artifacts_dir)
    try:
        with _exporting(), run.profiling():
            with run.stage("capture"):
                captured = capture(model, inputs.args, inputs.kwargs,
                                   dynamic_shapes=inputs.dynamic_shapes,
                                   has_translation=lambda t: table.lookup(t, opset) is not None,
                                   size_oblivious=_warn_size_one(inputs),
                                   output_names=output_names)
            run.captured(captured, dynamic_shapes if dynamic_shapes is not None
                         else inputs.dynamic_shapes)
            if opset_version is None:
                target_opset = opset = _opset_for_dtypes(captured, target_opset)
            warn_unused_dim_names(captured.exported_program, inputs, stacklevel=3)
            if dump_exported_program:
                run.dump_exported_program(captured.exported_program)
            with run.stage("translate"):
                onnx_model = Translator(captured, table, opset, input_names=input_names,
                                        output_names=output_names,
                                        dim_names=_dim_names(dynamic_axes, dynamic_shapes)
                                        if isinstance(model, torch.export.ExportedProgram)
                                        else None,
                                        leaf_dim_names=inputs.dim_names).run()
            with run.stage("passes"):
                run_passes(onnx_model, cleanup_passes())
                if optimize:
                    run_passes(onnx_model)
                if target_opset < opset:
                    onnx_model = convert_to_opset(onnx_model, target_opset)
                    run.diagnostics.log("OPX008", logging.INFO, f"translated at opset {opset}, "
                                        f"converted to opset {target_opset}")
                if optimize and target != "onnx":
                    run_passes(onnx_model, target_passes(target))
                align_function_opsets(onnx_model)
            program = run.program(ONNXProgram(onnx_model, captured.exported_program))
            if isinstance(model, torch.nn.Module):
                program._module = weakref.ref(model)
            if verify:
                with run.stage("verify"):
                    run.verified(verify_program(program, model, inputs.args, inputs.kwargs))
            run.check_warnings()
            if f is not None:
                with run.stage("save"):
                    program.save(f, include_initializers=export_params,
                                 keep_initializers_as_inputs=bool(keep_initializers_as_inputs),
                                 external_data=external_data)
    except Exception as e:
        run.failed(e)
        raise
    run.succeeded()
    if verbose:
        logger.info("exported %s in %.3fs: %s", run.name, run.timings.get("total", 0.0),
                    run.timings)
    return program


_TORCHSCRIPT_DEFAULTS = {
    "training": TrainingMode.EVAL, "operator_export_type": OperatorExportTypes.ONNX,
    "do_constant_folding": True, "custom_opsets": None, "export_modules_as_functions": False,
    "autograd_inlining": True}


def _warn_ignored_torchscript_options(options: Mapping[str, Any]) -> None:
    """dynamo=True ignores the TorchScript flavour's options, as torch.onnx does: say so."""
    changed = sorted(name for name, value in options.items()
                     if value != _TORCHSCRIPT_DEFAULTS[name] and value is not None)
    if changed:
        warnings.warn(f"{', '.join(changed)} only apply to the TorchScript flavour "
                      f"(dynamo=False); ignored with dynamo=True", UserWarning, stacklevel=3)


def _from_exportable_module(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                            input_names: Sequence[str] | None, output_names: Sequence[str] | None,
                            dynamic_shapes: Any) -> tuple[Any, ...]:
    """An ExportableModule given no inputs supplies its example inputs, names and shapes.

    Recognized by the class name in its MRO (onnxport.exportable's, or torch.onnx's own
    ExportableModule, which has the same methods), so that this module needs neither.
    """
    exportable = isinstance(model, torch.nn.Module) and any(
        c.__name__ == "ExportableModule" for c in type(model).__mro__)
    if exportable and not args and not kwargs:
        args, kwargs = model.example_arguments()
        args = tuple(args or ())
        input_names = input_names if input_names is not None else model.input_names()
        output_names = output_names if output_names is not None else model.output_names()
        dynamic_shapes = dynamic_shapes if dynamic_shapes is not None else model.dynamic_shapes()
    return model, args, kwargs, input_names, output_names, dynamic_shapes


def _with_translations(table: Registry, custom: Mapping[Any, Any] | None) -> Registry:
    """A copy of `table` with the user's `custom_translation_table` on top.

    A value is a translation in any form `user_translation` takes: onnxport's `fn(g, ...)`,
    an onnxscript function, a plain function calling onnxscript ops (torch.onnx's form,
    traced), or a list of them (per node, the first whose signature fits). A key is an
    OpOverload, an OpOverloadPacket (all its overloads) or another FX target.
    """
    if not custom:
        return table
    table = table.copy()
    for target, function in custom.items():
        if isinstance(function, (list, tuple)):
            if not function:
                raise ValueError(f"custom_translation_table[{target}] is an empty list")
            bad = [f for f in function if not callable(f) and not isinstance(f, (list, tuple))]
        else:
            bad = [] if callable(function) else [function]
        if bad:
            raise TypeError(f"custom_translation_table[{target}] must be a function, got "
                            f"{type(bad[0]).__name__}")
        if not isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) \
                and not callable(target):
            raise TypeError(f"custom_translation_table keys are torch ops (torch.ops.aten.add."
                            f"Tensor), got {target!r}")
        table.register(target, is_custom=True)(user_translation(function))
    return table


def _opset_for_dtypes(captured: Any, opset: int) -> int:
    """The default opset, or the newer one a dtype of the model needs (float4: 23), warning."""
    needed = dtype_opset(captured.exported_program.graph_module)
    if needed is None or needed[0] <= opset:
        return opset
    version, node, dtype = needed
    warnings.warn(f"'{node}' has dtype {dtype}, which ONNX has only from opset {version}: "
                  f"exporting at opset_version={version} instead of the default {opset}; pass "
                  f"opset_version to choose the opset", UserWarning, stacklevel=4)
    return version


def _warn_size_one(inputs: ResolvedInputs) -> bool:
    """Whether a dim asked to be dynamic has size 0 or 1 in the example (then it is captured
    size-oblivious, as torch.onnx does, instead of being fixed to that size); warns if so."""
    leaves = torch.utils._pytree.tree_leaves((inputs.args, inputs.kwargs or {}))
    small = [(inputs.leaf_names[i], axis, leaves[i].shape[axis])
             for i, axes in sorted(inputs.dynamic_axes.items()) for axis in sorted(axes)
             if isinstance(leaves[i], torch.Tensor) and leaves[i].shape[axis] in (0, 1)]
    if small:
        listed = ", ".join(f"input {n!r} axis {a} (size {s})" for n, a, s in small)
        warnings.warn(
            f"{listed}: asked to be dynamic, but the example has size {small[0][2]}, which "
            f"torch.export would fix as a constant; captured treating sizes 0 and 1 like any "
            f"other. Give examples of size 2 or more on dynamic axes to avoid this.",
            UserWarning, stacklevel=4)
    return bool(small)


def _fallback_to_torchscript(error: OnnxExporterError, model: Any, args: tuple[Any, ...],
                             kwargs: dict[str, Any] | None, f: Any, *, dynamic_shapes: Any,
                             dynamic_axes: Any, input_names: Sequence[str] | None,
                             registry: Any, **common: Any) -> ONNXProgram:
    """fallback=True: the dynamo flavour failed; export with the TorchScript flavour."""
    warnings.warn(f"the dynamo flavour failed ({type(error).__name__}: "
                  f"{str(error).splitlines()[0]}); falling back to the TorchScript flavour "
                  f"(fallback=True)", UserWarning, stacklevel=3)
    if dynamic_axes is None and dynamic_shapes is not None:
        input_names, dynamic_axes = _axes_from_shapes(model, args, kwargs, dynamic_shapes,
                                                      input_names)
    with _exporting():
        program = export_torchscript(model, args, f, kwargs=kwargs, registry=_as_registry(registry),
                                     input_names=input_names, dynamic_axes=dynamic_axes, **common)
    program.capture_strategy = "torchscript (fallback)"
    if isinstance(model, torch.nn.Module):
        program._module = weakref.ref(model)
    return program


def _axes_from_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                      dynamic_shapes: Any, input_names: Sequence[str] | None
                      ) -> tuple[list[str], dict[str, dict[int, str]]]:
    """dynamic_shapes -> (input names, dynamic_axes) for the TorchScript flavour."""
    resolved = resolve_inputs(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    names = list(input_names or [])
    names += [resolved.leaf_names[i].replace("[", "_").replace("]", "").replace("'", "")
              for i in tensors[len(names):]]
    axes: dict[str, dict[int, str]] = {}
    for position, index in enumerate(tensors):
        for axis in sorted(resolved.dynamic_axes.get(index, ())):
            default = f"{names[position]}_dim_{axis}"
            axes.setdefault(names[position], {})[axis] = \
                resolved.dim_names.get(index, {}).get(axis, default)
    return names, axes


def _model_name(model: Any) -> str:
    if isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)) or not callable(model):
        return type(model).__name__
    return getattr(model, "__name__", "model")


def _export_torchscript(model: Any, args: Any, f: Any, *, registry: Any, options: dict[str, Any],
                        **common: Any) -> None:
    """The dynamo=False flavour: TorchScript capture, the same op library."""
    with _exporting():
        export_torchscript(model, args, f, registry=_as_registry(registry), **common, **options)


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
    check_dynamo_export_arguments(model, export_options)
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
