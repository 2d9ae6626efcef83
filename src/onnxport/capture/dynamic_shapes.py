"""Dynamic-shape specs in every form torch.onnx takes, resolved against the inputs given.

Two spellings reach `export`:

* `dynamic_shapes`, as torch.export takes it, plus what torch.onnx adds: per axis a `Dim`,
  `Dim.AUTO` / `DYNAMIC` / `STATIC`, `None`, an int, or a **string** that names the ONNX
  dimension; a dict keyed by `forward`'s parameter names or a tuple/list by position, nested
  like the inputs (lists, dicts, registered pytree classes such as a KV cache).
* `dynamic_axes`, the TorchScript-era form `{input: {axis: name} | [axis, ...]}`, whose keys
  are graph input names (`input_names`, or the default names) or `forward`'s parameters.

`resolve_inputs` turns either into what torch.export takes (strings become `Dim.DYNAMIC`) and
a table of the user's dimension names per graph input, keyed by the input's position among
the flattened inputs, the order in which torch.export lists its user inputs. The translator
gives those names to the symbolic dims of the ONNX graph.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

Dim = torch.export.Dim


@dataclasses.dataclass
class ResolvedInputs:
    """The inputs to capture with, the spec torch.export takes, and the user's dim names.

    Attributes:
        args, kwargs: What the model is called with (a trailing dict of `args` moved to kwargs).
        dynamic_shapes: The spec for torch.export (None: every dim static).
        dim_names: {flat input index: {axis: name}} for the dims the user named.
        dynamic_axes: {flat input index: axes asked to be dynamic}, for error messages.
        leaf_names: The readable name of each flat input (`x`, `past_key_values[0][1]`).
        generated_names: The (flat input index, axis) pairs of `dim_names` the user did not
            name (a list in dynamic_axes: `<input>_dynamic_axes_<k>`).
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    dynamic_shapes: Any = None
    dim_names: dict[int, dict[int, str]] = dataclasses.field(default_factory=dict)
    dynamic_axes: dict[int, set[int]] = dataclasses.field(default_factory=dict)
    leaf_names: list[str] = dataclasses.field(default_factory=list)
    generated_names: set[tuple[int, int]] = dataclasses.field(default_factory=set)


def split_trailing_kwargs(args: tuple[Any, ...], kwargs: dict[str, Any] | None
                          ) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """torch.onnx's rule: a dict last in `args` holds keyword inputs, unless kwargs is given."""
    if not kwargs and args and isinstance(args[-1], dict):
        return tuple(args[:-1]), dict(args[-1])
    return tuple(args), kwargs


def forward_signature(model: Any) -> inspect.Signature | None:
    """The signature the inputs bind to: `forward`'s for a module, the function's own."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        return inspect.signature(forward)
    except (TypeError, ValueError):
        return None


def resolve_inputs(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    dynamic_shapes: Any = None,
    dynamic_axes: Mapping[str, Any] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> ResolvedInputs:
    """Resolve `dynamic_shapes` or `dynamic_axes` against the inputs actually given.

    Raises:
        ValueError: the spec names an input that is not given, an axis out of range, or has
            a shape that does not match the input's structure; says which and what is given.
        TypeError: an entry of a type no spec form takes.
    """
    resolved = ResolvedInputs(tuple(args), kwargs)
    if isinstance(model, torch.export.ExportedProgram):
        return resolved  # its shapes were fixed when it was exported
    inputs = _TopInputs(model, resolved.args, kwargs)
    resolved.leaf_names = inputs.leaf_names
    if dynamic_shapes is not None:
        if dynamic_axes:
            # Both given: dynamic_shapes decides what is dynamic; dynamic_axes only names dims
            # (those dynamic_shapes leaves unnamed).
            names_only = ResolvedInputs(resolved.args, kwargs, leaf_names=inputs.leaf_names)
            _from_dynamic_axes(inputs, dynamic_axes, input_names, output_names, names_only)
            resolved.dim_names = names_only.dim_names
            resolved.generated_names = names_only.generated_names
        resolved.dynamic_shapes = _from_dynamic_shapes(inputs, dynamic_shapes, resolved)
    elif dynamic_axes:
        resolved.dynamic_shapes = _from_dynamic_axes(inputs, dynamic_axes, input_names,
                                                     output_names, resolved)
    return resolved


def warn_unused_dim_names(program: torch.export.ExportedProgram, inputs: ResolvedInputs, *,
                          stacklevel: int = 2) -> None:
    """Warn, as torch.onnx does, for each axis name the ONNX graph will not use: the axis
    shares its symbol (torch.export proved it equal) with an axis named differently earlier
    among the inputs, whose name the dimension takes. Generated names are not warned about.

    Also warn, naming it, for each axis asked to be dynamic that the program has static (the
    model specialised it and no capture strategy kept it dynamic)."""
    dim_names, leaf_names = inputs.dim_names, inputs.leaf_names
    user = torch.export.graph_signature.InputKind.USER_INPUT
    specs = {s.arg.name: s for s in program.graph_signature.input_specs if hasattr(s.arg, "name")}
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"
                    and (node.name not in specs or specs[node.name].kind is user)]
    _warn_static_dims(placeholders, inputs, stacklevel + 1)
    if not dim_names:
        return
    kept: dict[str, tuple[str, str]] = {}
    for index, node in enumerate(placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or index not in dim_names:
            continue
        for axis, name in sorted(dim_names[index].items()):
            size = val.shape[axis] if axis < val.dim() else None
            if not isinstance(size, torch.SymInt) or not size.node.expr.is_Symbol:
                continue
            leaf = leaf_names[index] if index < len(leaf_names) else node.name
            where = f"input {leaf!r} axis {axis}"
            first = kept.setdefault(str(size.node.expr), (name, where))
            if first[0] != name and (index, axis) not in inputs.generated_names:
                # torch.onnx's opening words (code filters on them), then where each axis is.
                warnings.warn(f"# The axis name: {name} will not be used, since it shares the "
                              f"same shape constraints with another axis: {first[0]}. ({name}: "
                              f"{where}; {first[0]}: {first[1]}; the ONNX dimension is named "
                              f"{first[0]!r})", UserWarning, stacklevel=stacklevel + 1)


def _warn_static_dims(placeholders: list[Any], inputs: ResolvedInputs, stacklevel: int) -> None:
    for index, axes in sorted(inputs.dynamic_axes.items()):
        val = placeholders[index].meta.get("val") if index < len(placeholders) else None
        if not isinstance(val, torch.Tensor):
            continue
        leaf = inputs.leaf_names[index] if index < len(inputs.leaf_names) else f"input {index}"
        for axis in sorted(axes):
            size = val.shape[axis] if axis < val.dim() else None
            if isinstance(size, torch.SymInt) and size.node.expr.is_number:
                size = int(size)  # a symbol strict capture specialised
            if not isinstance(size, int):
                continue
            name = inputs.dim_names.get(index, {}).get(axis)
            named = f" ({name!r})" if name and (index, axis) not in inputs.generated_names else ""
            warnings.warn(f"input {leaf!r} axis {axis}{named} was asked to be dynamic, but the "
                          f"model's code specialises it to {size} and no capture strategy kept it "
                          f"dynamic: the ONNX input has that axis fixed to {size}",
                          UserWarning, stacklevel=stacklevel + 1)


# -- the inputs, as torch.export flattens them ------------------------------------------------

class _TopInputs:
    """`forward`'s bound arguments, and where each one's leaves are among the flat inputs."""

    def __init__(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        kwargs = kwargs or {}
        signature = forward_signature(model)
        self.bound: dict[str, Any] = {}
        self.kinds: dict[str, Any] = {}
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"the inputs do not fit forward{signature}: {e}") from e
            self.bound = dict(bound.arguments)
            self.kinds = {n: p.kind for n, p in signature.parameters.items()}
        else:
            self.bound = {f"args_{i}": a for i, a in enumerate(args)} | dict(kwargs)
        # torch.export lists its user inputs as pytree leaves of (args, kwargs), in that order.
        flat = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]
        positional = [n for n, k in self.kinds.items()
                      if k in (inspect.Parameter.POSITIONAL_ONLY,
                               inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        var_args = next((n for n, k in self.kinds.items()
                         if k is inspect.Parameter.VAR_POSITIONAL), None)
        var_kwargs = next((n for n, k in self.kinds.items()
                           if k is inspect.Parameter.VAR_KEYWORD), None)
        self.indices: dict[str, list[int]] = {name: [] for name in self.bound}
        self.leaf_names: list[str] = []
        for index, (path, _) in enumerate(flat):
            top, where, rest = path[0].idx, path[1], path[2:]
            if top == 0:
                i = where.idx
                if signature is None:
                    name = f"args_{i}"
                elif i < len(positional):
                    name = positional[i]
                else:
                    name = var_args or f"args_{i}"
                    rest = (where, *rest)
            else:
                key = where.key
                name = key if key in self.bound else (var_kwargs or key)
                if name != key:
                    rest = (where, *rest)
            self.indices.setdefault(name, []).append(index)
            self.leaf_names.append(name + pytree.keystr(rest) if rest else name)

    def names(self) -> list[str]:
        return list(self.bound)


def _children(node: Any) -> tuple[list[Any], list[Any] | None] | None:
    """A pytree node's children and their keys (None for a leaf); None for None."""
    if pytree.tree_is_leaf(node):
        return None
    node_type = pytree._get_node_type(node)
    children, context = pytree.SUPPORTED_NODES[node_type].flatten_fn(node)
    keys = list(context) if isinstance(context, (list, tuple)) and len(context) == len(children) \
        and not isinstance(node, (list, tuple)) else None
    return list(children), keys


def _child_spec(spec: Any, i: int, key: Any, where: str) -> Any:
    if spec is None:
        return None
    if isinstance(spec, Mapping) and not _is_axes(spec):
        return spec.get(key) if key is not None else spec.get(i)
    if isinstance(spec, (list, tuple)):
        if i >= len(spec):
            raise ValueError(f"dynamic_shapes for {where} has {len(spec)} entries; the input has "
                             f"more elements than that")
        return spec[i]
    raise TypeError(f"dynamic_shapes for {where}: expected a list, tuple or dict matching the "
                    f"input's structure, got {type(spec).__name__}")


def _is_axes(spec: Any) -> bool:
    return isinstance(spec, Mapping) and all(isinstance(k, int) and not isinstance(k, bool)
                                             for k in spec)


def _walk(value: Any, spec: Any, where: str, counter: list[int],
          on_leaf: Callable[[Any, Any, str, int], Any], *, build: bool = False) -> Any:
    """Visit `value`'s leaves in pytree order with their part of `spec`; rebuild the spec.

    `on_leaf(leaf, leaf_spec, where, local_index)` returns the leaf's spec for torch.export.
    The result follows `spec`'s containers; with `build`, it follows `value`'s instead (dicts
    as dicts, tuples as tuples, other nodes as lists), None where no leaf below has a spec.
    """
    parts = _children(value)
    if parts is None:
        if value is None:
            return None if build else spec
        index = counter[0]
        counter[0] += 1
        return on_leaf(value, spec, where, index)
    children, keys = parts
    rebuilt = []
    for i, child in enumerate(children):
        key = keys[i] if keys is not None else None
        label = f"{where}[{key!r}]" if key is not None else f"{where}[{i}]"
        sub = None if build else _child_spec(spec, i, key, where)
        rebuilt.append(_walk(child, sub, label, counter, on_leaf, build=build))
    if build:
        if all(r is None for r in rebuilt):
            return None
        if isinstance(value, dict) and keys is not None:
            return dict(zip(keys, rebuilt))
        return tuple(rebuilt) if isinstance(value, tuple) else rebuilt
    if spec is None:
        return None
    if isinstance(spec, Mapping) and not _is_axes(spec) and keys is not None:
        return type(spec)(zip(keys, rebuilt)) if isinstance(spec, dict) else dict(zip(keys, rebuilt))
    if isinstance(spec, tuple):
        return tuple(rebuilt)
    return rebuilt


# -- dynamic_shapes ---------------------------------------------------------------------------

def _from_dynamic_shapes(inputs: _TopInputs, spec: Any, out: ResolvedInputs) -> Any:
    names = inputs.names()
    if isinstance(spec, Mapping):
        unknown = [k for k in spec if k not in inputs.bound]
        if unknown:
            raise ValueError(
                f"dynamic_shapes names {', '.join(map(repr, unknown))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not among the inputs given "
                f"({', '.join(names) or 'none'}): key dynamic_shapes by forward's parameter names")
        tops = [(name, spec.get(name)) for name in names]
    elif isinstance(spec, (list, tuple)):
        if len(spec) != len(names):
            raise ValueError(
                f"dynamic_shapes has {len(spec)} entries, but {len(names)} inputs were given "
                f"({', '.join(names) or 'none'}): give one entry per input, in order (None for "
                f"a static one), or a dict keyed by parameter name")
        tops = list(zip(names, spec))
    else:
        raise TypeError(f"dynamic_shapes must be a dict, tuple or list, got {type(spec).__name__}")

    rebuilt: dict[str, Any] = {}
    for name, sub in tops:
        indices = inputs.indices.get(name, [])

        def on_leaf(leaf: Any, leaf_spec: Any, where: str, local: int,
                    indices: list[int] = indices) -> Any:
            return _leaf_spec(leaf, leaf_spec, where, indices[local], out)

        rebuilt[name] = _walk(inputs.bound[name], sub, name, [0], on_leaf)
    if isinstance(spec, Mapping):
        return {k: rebuilt[k] for k in spec} if len(spec) == len(names) else \
            {k: rebuilt[k] for k in names}
    return type(spec)(rebuilt[k] for k in names)


def _leaf_spec(leaf: Any, spec: Any, where: str, index: int, out: ResolvedInputs) -> Any:
    """One input's spec for torch.export; records the names it gives and the dynamic axes."""
    if spec is None:
        return None
    if not isinstance(leaf, torch.Tensor):
        if isinstance(spec, str):
            return Dim.DYNAMIC
        return spec
    rank = leaf.dim()
    if isinstance(spec, (list, tuple)):
        if len(spec) != rank:
            raise ValueError(f"dynamic_shapes for input {where!r} lists {len(spec)} dims, but the "
                             f"input has {rank} (shape {tuple(leaf.shape)})")
        items = dict(enumerate(spec))
    elif _is_axes(spec):
        items = dict(spec)
    else:
        raise TypeError(f"dynamic_shapes for input {where!r}: expected a dict {{axis: dim}} or a "
                        f"list with one entry per dim, got {type(spec).__name__}")
    converted: dict[int, Any] = {}
    for axis, dim in items.items():
        if not -rank <= axis < rank:
            raise ValueError(f"dynamic_shapes for input {where!r} names axis {axis}, but the input "
                             f"has {rank} dims (shape {tuple(leaf.shape)})")
        axis %= max(rank, 1)
        if isinstance(dim, str):
            out.dim_names.setdefault(index, {})[axis] = dim
            dim = Dim.DYNAMIC
        elif _is_named_dim(dim):
            out.dim_names.setdefault(index, {})[axis] = dim.__name__
        elif not (dim is None or isinstance(dim, int) or _is_hint(dim)):
            raise TypeError(f"dynamic_shapes for input {where!r} axis {axis}: expected a Dim, "
                            f"Dim.AUTO/DYNAMIC/STATIC, a string, an int or None, got "
                            f"{type(dim).__name__}")
        if dim is not None and not isinstance(dim, int) and dim is not Dim.STATIC:
            out.dynamic_axes.setdefault(index, set()).add(axis)
        converted[axis] = dim
    if isinstance(spec, (list, tuple)):
        return type(spec)(converted[i] for i in range(rank))
    return converted


def _is_hint(dim: Any) -> bool:
    return type(dim).__name__ == "_DimHint"


def _is_named_dim(dim: Any) -> bool:
    """A torch.export Dim (or a Dim derived from one, such as 2 * d), which has a name."""
    return not _is_hint(dim) and isinstance(getattr(dim, "__name__", None), str) \
        and hasattr(dim, "min")


# -- dynamic_axes -----------------------------------------------------------------------------

def _from_dynamic_axes(inputs: _TopInputs, dynamic_axes: Mapping[str, Any],
                       input_names: Sequence[str] | None, output_names: Sequence[str] | None,
                       out: ResolvedInputs) -> Any:
    """{input: axes} -> a dynamic_shapes spec; keys are graph input names or parameters."""
    leaves = pytree.tree_leaves((out.args, out.kwargs or {}))
    tensor_indices = [i for i, leaf in enumerate(leaves)
                      if isinstance(leaf, (torch.Tensor, torch.SymInt, torch.SymFloat))]
    by_name: dict[str, int] = {}
    for position, index in enumerate(tensor_indices):
        default = _default_input_name(out.leaf_names[index])
        by_name.setdefault(default, index)
        if input_names and position < len(input_names):
            by_name[input_names[position]] = index
    per_leaf: dict[int, dict[int, Any]] = {}
    for key, axes in dynamic_axes.items():
        if key in by_name:
            indices = [by_name[key]]
        elif key in inputs.indices:
            indices = [i for i in inputs.indices[key] if i in tensor_indices]
        elif output_names and key in output_names:
            continue
        else:
            known = sorted(set(by_name) | set(inputs.names()))
            raise ValueError(f"dynamic_axes names {key!r}, which is neither a graph input nor a "
                             f"parameter of the inputs given ({', '.join(known) or 'none'})"
                             + ("" if output_names else
                                "; name outputs in output_names to give their axes"))
        if isinstance(axes, Mapping):
            named = {int(a): str(n) for a, n in axes.items()}
        elif isinstance(axes, (list, tuple)):
            named = {int(a): f"{key}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
        elif axes is None:
            continue
        else:
            raise TypeError(f"dynamic_axes[{key!r}] must be a dict {{axis: name}} or a list of "
                            f"axes, got {type(axes).__name__}")
        for index in indices:
            leaf = leaves[index]
            rank = leaf.dim() if isinstance(leaf, torch.Tensor) else 0
            for axis, dim_name in named.items():
                if not -rank <= axis < rank:
                    raise ValueError(f"dynamic_axes[{key!r}] names axis {axis}, but input "
                                     f"{out.leaf_names[index]!r} has {rank} dims")
                axis %= max(rank, 1)
                per_leaf.setdefault(index, {})[axis] = Dim.DYNAMIC
                out.dim_names.setdefault(index, {})[axis] = dim_name
                if not isinstance(axes, Mapping):
                    out.generated_names.add((index, axis))
                out.dynamic_axes.setdefault(index, set()).add(axis)
    if not per_leaf:
        return None
    spec: dict[str, Any] = {}
    for name in inputs.names():
        indices = inputs.indices.get(name, [])

        def on_leaf(leaf: Any, _spec: Any, where: str, local: int,
                    indices: list[int] = indices) -> Any:
            return per_leaf.get(indices[local])

        spec[name] = _walk(inputs.bound[name], None, name, [0], on_leaf, build=True)
    return spec


def _default_input_name(leaf_name: str) -> str:
    """The graph input name torch.export gives a flat input: `c['z']` -> `c_z`, `b[0]` -> `b_0`."""
    out = leaf_name.replace("['", "_").replace("']", "").replace("[", "_").replace("]", "")
    return out.replace(".", "_")
