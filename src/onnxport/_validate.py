"""Argument checks that run before any capture: a mistake costs no trace and writes nothing.

Each check raises TypeError (a value of the wrong kind) or ValueError (a value out of range,
or options that exclude each other) naming the argument and what it accepts. Checks that need
the captured model (the number of outputs) live with capture (`capture/dynamo.py`);
`dynamic_shapes` / `dynamic_axes` against the inputs are resolved by
`capture/dynamic_shapes.py`, which raises the same way.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
import onnx.defs
import torch
from torch.utils import _pytree as pytree

__all__ = ["MIN_OPSET", "max_opset", "check_export_arguments", "check_dynamo_export_arguments",
           "check_output_names", "check_destination"]

# The op library translates at opset 18 and newer; older targets are converted down with
# onnx's version converter. ONNX Runtime runs nothing older than opset 7 (its kernels start
# there; torch.onnx's TorchScript flavour has the same floor), so 7 is the lowest opset at
# which even a Linear + ReLU exports to a model ONNX Runtime can load.
MIN_OPSET = 7


def max_opset() -> int:
    """The newest opset of the default domain the installed onnx defines."""
    return onnx.defs.onnx_opset_version()


def _opset_range() -> str:
    return (f"{MIN_OPSET} to {max_opset()} (translations are written for opset 18 and newer and "
            f"converted down below it; {max_opset()} is the newest opset onnx {onnx.__version__} "
            f"defines, {MIN_OPSET} the oldest ONNX Runtime runs)")


def check_opset(opset_version: Any) -> None:
    if opset_version is None:
        return
    if isinstance(opset_version, bool) or not isinstance(opset_version, int):
        raise TypeError(f"opset_version must be an int from {_opset_range()}, got "
                        f"{type(opset_version).__name__} {opset_version!r}")
    if not MIN_OPSET <= opset_version <= max_opset():
        raise ValueError(f"opset_version={opset_version} is not supported: onnxport exports "
                         f"opsets {_opset_range()}")


def _check_names(argument: str, names: Any) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{argument} must be a list of strings, got {type(names).__name__} "
                        f"{names!r}")
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"{argument}[{i}] must be a string, got {type(name).__name__} "
                            f"{name!r}")
        if not name:
            raise ValueError(f"{argument}[{i}] is an empty string: graph values need a name")
    seen: set[str] = set()
    duplicates = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
    if duplicates:
        raise ValueError(f"{argument} holds {', '.join(map(repr, dict.fromkeys(duplicates)))} "
                         f"more than once: every graph {argument.split('_')[0]} needs its own "
                         f"name")
    return list(names)


def check_destination(f: Any, argument: str = "f") -> None:
    """A destination must be a writable file path in an existing directory, or a binary file
    object; raises ValueError / TypeError naming `argument` otherwise (for ONNXProgram.save)."""
    _check_path(argument, f)


def _check_path(argument: str, f: Any) -> None:
    if f is None:
        return
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not path:
            raise ValueError(f"{argument} is an empty path")
        if os.path.isdir(path):
            raise ValueError(f"{argument}={path!r} is a directory: give the path of the .onnx "
                             f"file to write")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            what = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise ValueError(f"{argument}={path!r}: the directory {parent!r} {what}; create it "
                             f"first or save elsewhere")
        return
    if not callable(getattr(f, "write", None)):
        raise TypeError(f"{argument} must be a file path (str or os.PathLike) or a binary file "
                        f"object with write(), got {type(f).__name__}")


def _flat_inputs(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                 dynamic_shapes: Any) -> int | None:
    """How many graph inputs the example inputs make at most (None: not known yet)."""
    if isinstance(model, torch.export.ExportedProgram):
        kind = torch.export.graph_signature.InputKind
        return sum(1 for s in model.graph_signature.input_specs if s.kind is kind.USER_INPUT)
    leaves = pytree.tree_leaves((args, kwargs or {}))
    count = sum(1 for leaf in leaves if isinstance(leaf, (torch.Tensor, torch.SymInt,
                                                          torch.SymFloat, torch.SymBool)))
    if dynamic_shapes is not None:
        # A Python number marked dynamic becomes a graph input too.
        count += sum(1 for leaf in leaves if isinstance(leaf, (int, float))
                     and not isinstance(leaf, bool))
    return count


def _program_outputs(program: torch.export.ExportedProgram) -> int:
    kind = torch.export.graph_signature.OutputKind
    specs = program.graph_signature.output_specs
    values = [getattr(s.arg, "value", 0) for s in specs if s.kind is kind.USER_OUTPUT]
    return sum(1 for v in values if v is not None)


def check_output_names(output_names: Sequence[str] | None, outputs: int,
                       where: str = "the model returns") -> None:
    """`output_names` may name at most as many outputs as the captured model has."""
    if output_names is not None and len(output_names) > outputs:
        raise ValueError(f"output_names has {len(output_names)} names "
                         f"({', '.join(map(repr, output_names))}), but {where} {outputs} "
                         f"output{'' if outputs == 1 else 's'}: give at most {outputs}")


_DYNAMO_ONLY = {"custom_translation_table": None, "report": False, "verify": False,
                "profile": False, "dump_exported_program": False, "fallback": False,
                "target": "onnx"}


def _check_target(target: Any, optimize: Any) -> None:
    from onnxport.passes import TARGETS

    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(map(repr, TARGETS))}, got {target!r}")
    if target != "onnx" and not optimize:
        raise TypeError(f"target={target!r} rewrites the optimized graph: it needs optimize=True")


def check_export_arguments(
    model: Any, args: Any, f: Any, *, kwargs: Any = None, dynamo: bool = True,
    input_names: Any = None, output_names: Any = None, opset_version: Any = None,
    dynamic_axes: Any = None, dynamic_shapes: Any = None, external_data: Any = None,
    **dynamo_only: Any,
) -> None:
    """Check `export()`'s arguments before anything runs.

    `dynamo_only` takes the options only the dynamo flavour has (custom_translation_table,
    report, verify, profile, dump_exported_program, fallback, target, optimize).

    Raises:
        TypeError: an argument of the wrong kind, or options that exclude each other.
        ValueError: an argument out of range; the message names it and what is accepted.
    """
    if model is None:
        raise TypeError("model is None: pass an nn.Module, a function or a "
                        "torch.export.ExportedProgram")
    if isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
        raise ValueError(f"model is a {type(model).__name__}, which ONNX cannot express: "
                         f"export the wrapped module, model.module")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of example inputs (or one tensor), got "
                        f"{type(args).__name__}; keyword inputs go in kwargs=")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict of keyword inputs, got {type(kwargs).__name__}")
    if not isinstance(dynamo, bool):
        raise TypeError(f"dynamo must be True or False, got {type(dynamo).__name__} {dynamo!r}")
    check_opset(opset_version)
    inputs = _check_names("input_names", input_names)
    outputs = _check_names("output_names", output_names)
    if inputs and outputs:
        both = [n for n in inputs if n in outputs]
        if both:
            raise ValueError(f"{', '.join(map(repr, both))} is in both input_names and "
                             f"output_names: a graph value has one name")
    _check_path("f", f)
    if external_data and f is not None and not isinstance(f, (str, os.PathLike)):
        raise TypeError("external_data=True needs a file path as f (the weights go to "
                        "<f>.data beside it), not a file object")
    if dynamic_axes is not None and not isinstance(dynamic_axes, Mapping):
        raise TypeError(f"dynamic_axes must be a dict {{input or output name: {{axis: name}} or "
                        f"[axis, ...]}}, got {type(dynamic_axes).__name__}")
    _check_target(dynamo_only.get("target", "onnx"), dynamo_only.get("optimize", True))
    if not dynamo:
        _check_dynamo_only(dynamo_only)
    from onnxport.capture.dynamic_shapes import split_trailing_kwargs

    exportable = any(c.__name__ == "ExportableModule" for c in type(model).__mro__)
    flat_args, flat_kwargs = tuple(args), kwargs
    if not isinstance(model, torch.export.ExportedProgram):
        flat_args, flat_kwargs = split_trailing_kwargs(flat_args, dict(kwargs) if kwargs else None)
    if exportable and not flat_args and not flat_kwargs:
        return  # it supplies its own inputs and names; checked when they are resolved
    if inputs is not None:
        _check_input_name_count(model, inputs, flat_args, flat_kwargs, dynamic_shapes, dynamo)
    if isinstance(model, torch.export.ExportedProgram):
        check_output_names(outputs, _program_outputs(model), "the ExportedProgram returns")
    elif not dynamo and dynamic_axes and not isinstance(
            model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        # The dynamo flavour resolves dynamic_axes against the inputs before capture; the
        # TorchScript flavour would ignore an unknown name or axis: resolve it the same way.
        from onnxport.capture.dynamic_shapes import forward_signature, resolve_inputs

        if forward_signature(model) is not None:
            resolve_inputs(model, flat_args, flat_kwargs, dynamic_axes=dynamic_axes,
                           input_names=inputs, output_names=outputs)


def _check_input_name_count(model: Any, inputs: list[str], flat_args: tuple[Any, ...],
                            flat_kwargs: Any, dynamic_shapes: Any, dynamo: bool) -> None:
    """No more input_names than the graph has inputs (with dynamo=False: also the scripted
    model's number arguments and the weights, which its names go on to name)."""
    count = _flat_inputs(model, flat_args, flat_kwargs, dynamic_shapes)
    numbers = 0
    weights = 0
    if not dynamo:
        # A scripted model takes the Python numbers given for its int / float / bool
        # parameters as graph inputs too; tracing bakes them in (none for other models).
        from onnxport.capture.torchscript import normalize_args, script_number_inputs

        numbers = len(script_number_inputs(model, *normalize_args(flat_args, flat_kwargs)))
    if not dynamo and isinstance(model, torch.nn.Module):
        # The TorchScript flavour's input_names go on to name the weights (torch.onnx's
        # AlexNet example names 16 of them).
        weights = len(model.state_dict())
    if count is not None and len(inputs) > count + numbers + weights:
        count += numbers
        what = (f"{count} graph input{'' if count == 1 else 's'} (one per tensor in args "
                "and kwargs" + (", and per int/float/bool argument of the scripted "
                                "model" if numbers else "") + ")"
                + (f" and {weights} weights" if weights else ""))
        hint = ""
        if not dynamo and not numbers and not isinstance(
                model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)) and any(
                isinstance(leaf, (int, float)) for leaf in pytree.tree_leaves(
                    (flat_args, flat_kwargs or {}))):
            hint = ("; torch.jit.trace bakes the Python numbers in args into the graph as "
                    "constants (script the model, torch.jit.script, to make its int/float/"
                    "bool arguments graph inputs)")
        raise ValueError(f"input_names has {len(inputs)} names "
                         f"({', '.join(map(repr, inputs))}), but the inputs given make "
                         f"{what}: give at most {count + weights}{hint}")


def _check_dynamo_only(dynamo_only: dict[str, Any]) -> None:
    """With dynamo=False: fallback is an error, the other dynamo-only options a warning."""
    given = [k for k, default in _DYNAMO_ONLY.items()
             if k in dynamo_only and dynamo_only[k] not in (default, None)]
    if "fallback" in given:
        raise TypeError("fallback=True falls back to dynamo=False when dynamo=True fails; "
                        "with dynamo=False there is nothing to fall back from")
    if given:
        # torch.onnx ignores them with dynamo=False; code written for it must keep working.
        warnings.warn(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to "
                      f"dynamo=True; ignored with dynamo=False", UserWarning, stacklevel=4)


def check_dynamo_export_arguments(model: Any, export_options: Any) -> None:
    """Check `dynamo_export()`'s arguments before anything runs."""
    from onnxport.options import ExportOptions

    if model is None:
        raise TypeError("model is None: pass an nn.Module, a function or a "
                        "torch.export.ExportedProgram")
    if export_options is not None and not isinstance(export_options, ExportOptions):
        raise TypeError(f"export_options must be an onnxport.ExportOptions, got "
                        f"{type(export_options).__name__}")
