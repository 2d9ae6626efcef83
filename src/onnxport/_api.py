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
from onnxport.errors import OnnxExporterError
from onnxport.options import ExportOptions
from onnxport.passes import cleanup_passes, run_passes
from onnxport.passes.convert_opset import LIBRARY_OPSET, convert_to_opset
from onnxport.program import ONNXProgram
from onnxport.translate import Registry, default_registry
from onnxport.translate.translator import Translator
from onnxport.verify.compare import verify_program
from onnxport.verify.report import ExportReport

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 18
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
    keep_initializers_as_inputs: bool = False,
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
        keep_initializers_as_inputs: List the weights as graph inputs too.
        dynamo: True for the torch.export path; False for the TorchScript path.
        external_data: Save weights to `<f>.data`; None: only above 2 GB.
        dynamic_shapes: As torch.export.export takes it.
        report: Write a markdown report to `artifacts_dir`, on success and on failure.
        optimize: Run the optimization passes (constant folding, CSE, dead code removal).
        verify: Run the model in ONNX Runtime and compare with eager PyTorch.
        artifacts_dir: Where the report goes.
        registry: An OnnxRegistry or Registry to use instead of the built-in op library.
        torchscript_options: Options of the TorchScript flavour (dynamo=False).

    Returns:
        The ONNXProgram (dynamo=True).

    Raises:
        OnnxExporterError: a subclass saying what failed, where and how to fix it.

    Example:
        >>> import torch, onnxport
        >>> program = onnxport.export(torch.nn.ReLU(), (torch.randn(2, 3),))
        >>> [n.op_type for n in program.model.graph]
        ['Relu']
    """
    if not dynamo:
        raise NotImplementedError(
            "onnxport.export(dynamo=False): the TorchScript-based exporter is not built yet; "
            "use dynamo=True (the default)")
    if torchscript_options:
        raise TypeError(f"export() got options of the TorchScript flavour with dynamo=True: "
                        f"{', '.join(sorted(torchscript_options))}")
    if isinstance(args, torch.Tensor):
        args = (args,)
    args = tuple(args)
    target_opset = opset_version or DEFAULT_OPSET
    # Translations are written for opset 18 and newer; older targets are converted down.
    opset = max(target_opset, LIBRARY_OPSET)
    table = _as_registry(registry)
    dim_names = _dim_names(dynamic_axes, dynamic_shapes)
    if dynamic_axes and dynamic_shapes is None:
        dynamic_shapes = _dynamic_axes_to_shapes(model, args, kwargs, dynamic_axes, input_names)
    name = type(model).__name__ if not callable(model) or isinstance(model, torch.nn.Module) \
        else getattr(model, "__name__", "model")
    rep = ExportReport(name) if report else None
    timings: dict[str, float] = {}
    try:
        with _exporting():
            t0 = time.perf_counter()
            captured = capture(model, args, kwargs, dynamic_shapes=dynamic_shapes,
                               has_translation=lambda t: table.lookup(t, opset) is not None)
            timings["capture"] = captured.seconds
            timings["decompose"] = captured.decompose_seconds
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
            timings["passes"] = time.perf_counter() - t2
            program = ONNXProgram(onnx_model, captured.exported_program)
            if rep is not None:
                rep.model = onnx_model
            if verify:
                t3 = time.perf_counter()
                diffs = verify_program(program, model, args, kwargs)
                timings["verify"] = time.perf_counter() - t3
                if rep is not None:
                    rep.verification = diffs
            if f is not None:
                t4 = time.perf_counter()
                program.save(f, include_initializers=export_params,
                             keep_initializers_as_inputs=keep_initializers_as_inputs,
                             external_data=external_data)
                timings["save"] = time.perf_counter() - t4
            timings["total"] = time.perf_counter() - t0
            if verbose:
                logger.info("exported %s in %.3fs: %s", name, timings["total"], timings)
    except Exception as e:
        if rep is not None:
            rep.error = e
            rep.timings = timings
            if isinstance(e, OnnxExporterError) and getattr(e, "diffs", None):
                rep.verification = e.diffs  # type: ignore[attr-defined]
            path = rep.write(os.fspath(artifacts_dir))
            logger.warning("export failed; report written to %s", path)
        raise
    if rep is not None:
        rep.timings = timings
        rep.write(os.fspath(artifacts_dir))
    return program


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
    program = export(model, model_args, kwargs=model_kwargs or None, dynamic_shapes=dynamic_shapes,
                     registry=options.onnx_registry)
    assert program is not None
    return program


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
