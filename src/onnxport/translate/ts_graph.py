"""What a TorchScript graph says, for the TorchScript node loop (`translate/torchscript.py`).

The OpOverload of a node (from its schema), its module scope and user source line, the nodes
of nested blocks and inlined autograd.Function subgraphs; the dtype and sizes of a value
(from its TorchScript type, or for untyped script graphs by running the op on meta tensors),
and the mark on 0-d values that stand for Python numbers.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import Any

import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.capture.inplace import functional_variant

_TORCH_DIR = os.path.dirname(torch.__file__)


@functools.cache
def overload_of(schema: str) -> Any:
    """The OpOverload a node schema string names, or None."""
    parsed = torch._C.parse_schema(schema)
    namespace, _, name = parsed.name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, parsed.overload_name or "default")
    except (AttributeError, RuntimeError):
        return None


def _node_overload(node: torch._C.Node) -> Any:
    try:
        schema = node.schema()
    except RuntimeError:
        return None
    if schema == "(no schema)":
        return None
    return overload_of(schema)


def _dispatch_overload(node: torch._C.Node) -> tuple[Any, bool]:
    """(the overload to translate, whether it is an in-place op translated functionally)."""
    overload = _node_overload(node)
    functional = functional_variant(overload) if overload is not None else None
    return (functional, True) if functional is not None else (overload, False)


def _scope_path(node: torch._C.Node) -> tuple[str, str]:
    """(module path, node-name prefix) from a node's tracing scope."""
    scope = node.scopeName()
    if not scope:
        return "", ""
    paths = [p.split("__module.", 1)[-1] for p in scope.split("/") if p]
    paths = [p for p in paths if p]
    if paths and paths[0] == "model":
        paths = paths[1:]
    paths = [p.removeprefix("model.") for p in paths]
    parts: list[str] = []
    previous = ""
    for path in paths:
        parts.append(path[len(previous) + 1:] if previous and path.startswith(previous + ".") else path)
        previous = path
    return (paths[-1] if paths else ""), ("/" + "/".join(parts) if parts else "")


def _source(node: torch._C.Node) -> str:
    """The first user frame of a node's source range: `file:line`."""
    try:
        text = node.sourceRange()
    except RuntimeError:
        return ""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(_TORCH_DIR) and "(" in line and "): " in line:
            return line
    first = text.splitlines()[0].strip() if text else ""
    return first if first.startswith("/") or ":" in first else ""


def _has_symbolic(node: torch._C.Node) -> bool:
    return getattr(getattr(node.pyobj(), "__self__", None), "symbolic", None) is not None


def _all_nodes(block: Any, inline_functions: bool = True) -> Iterable[torch._C.Node]:
    """Nodes of a block, of its nested blocks and of inlined autograd.Function subgraphs."""
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub, inline_functions)
        if inline_functions and node.kind() == "prim::PythonOp" and \
                node.hasAttribute("Subgraph") and not _has_symbolic(node):
            yield from _all_nodes(node.g("Subgraph"), inline_functions)


def _type_info(ty: Any) -> tuple[ir.DataType | None, list[int] | None]:
    """(dtype, static sizes) of a TorchScript value type, where known."""
    if isinstance(ty, torch._C.TensorType):
        dtype = ty.dtype()
        sizes = ty.sizes()
        return (_dtypes.to_ir(dtype) if dtype is not None else None,
                list(sizes) if sizes is not None and all(s is not None for s in sizes) else None)
    if isinstance(ty, torch._C.IntType):
        return ir.DataType.INT64, []
    if isinstance(ty, torch._C.FloatType):
        return ir.DataType.FLOAT, []
    if isinstance(ty, torch._C.BoolType):
        return ir.DataType.BOOL, []
    return None, None


def _returns_alias(node: torch._C.Node) -> bool:
    overload = _node_overload(node)
    if overload is None:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in overload._schema.returns)


class _OutVal:
    """What `g.out_vals` holds for a TorchScript output: `.dtype` and `.shape`.

    Dims unknown at export time (dynamic axes, script graphs) are None, so translations that
    read a static output shape see none.
    """

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: ir.DataType | None, sizes: Any, static: bool) -> None:
        self.dtype = _dtypes.to_torch(dtype) if dtype is not None else None
        if isinstance(sizes, int):
            self.shape: tuple[Any, ...] | None = (None,) * sizes
        elif sizes is None:
            self.shape = None
        else:
            self.shape = tuple(sizes) if static else (None,) * len(sizes)


def _element_outputs(node: torch._C.Node) -> list[torch._C.Value]:
    """The node's outputs; for one `Tensor[]` output unpacked by prim::ListUnpack, its elements."""
    outs = list(node.outputs())
    if len(outs) == 1 and isinstance(outs[0].type(), torch._C.ListType) and \
            isinstance(outs[0].type().getElementType(), torch._C.TensorType):
        for use in outs[0].uses():
            if use.user.kind() == "prim::ListUnpack":
                return list(use.user.outputs())
    return outs


def _debug_name(value: torch._C.Value) -> str | None:
    """A value's source-level name (`input` for `input.3`), None for numbered temporaries."""
    name = value.debugName().split(".")[0]
    return None if not name or name.isdigit() else name


def _is_tensor_type(ty: Any) -> bool:
    return isinstance(ty, torch._C.TensorType)


def _shape(sizes: Any, static: bool) -> ir.Shape | None:
    if sizes is None:
        return None
    if isinstance(sizes, int):  # a rank only
        return ir.Shape([None] * sizes)
    return ir.Shape(list(sizes) if static else [None] * len(sizes))


def _meta_infos(overload: Any, args: list[Any], kwargs: dict[str, Any],
                infos: list[tuple[Any, Any]], hints: dict[int, list[int]] | None = None
                ) -> list[tuple[Any, Any]]:
    """Output dtypes (and ranks) by running the op on meta tensors, for untyped script graphs.

    Unknown dims take the example sizes in `hints` (by value id), else 2; the outputs' example
    sizes are recorded in `hints` under the keys `-1 - i` for the caller to attach.
    """
    hints = hints if hints is not None else {}
    use_hints = True
    arguments = overload._schema.arguments

    def sizes(x: Any, position: int | str) -> Any:
        """A shape computed in the graph (aten::size), where the op takes an int[]: a list."""
        schema = arguments[position] if isinstance(position, int) and position < len(arguments) \
            else next((a for a in arguments if a.name == position), None)
        if not isinstance(x, ir.Value) or schema is None or x.shape is None \
                or len(x.shape) != 1 or not isinstance(x.shape[0], int) \
                or not isinstance(schema.type, torch.ListType) \
                or not isinstance(schema.type.getElementType(), (torch.IntType, torch.SymIntType)):
            return meta(x)
        hint = x.meta.get(SIZE_HINT) if use_hints else None
        return list(hint) if isinstance(hint, list) else [2] * x.shape[0]

    def meta(x: Any) -> Any:
        if isinstance(x, ir.Value):
            if x.dtype is None:
                raise ValueError("unknown dtype")
            shape = x.shape
            hint = hints.get(id(x)) if use_hints else None
            if hint is not None and shape is not None and len(hint) == len(shape):
                shape = ir.Shape([d if isinstance(d, int) else h for d, h in zip(shape, hint)])
            dims = [d if isinstance(d, int) else 2 for d in shape] if shape is not None else None
            if dims is None:
                raise ValueError("unknown rank")
            if len(dims) == 0 and x.dtype in (ir.DataType.INT64, ir.DataType.FLOAT,
                                                ir.DataType.BOOL) and _scalar_arg(x):
                if x.dtype == ir.DataType.INT64:  # a size: the example's, else 2 as dims
                    hint = x.meta.get(SIZE_HINT) if use_hints else None
                    return hint if isinstance(hint, int) else 2
                return {ir.DataType.FLOAT: 1.0, ir.DataType.BOOL: True}[x.dtype]
            return torch.empty(dims, dtype=_dtypes.to_torch(x.dtype), device="meta")
        if isinstance(x, list):
            return [meta(v) for v in x]
        return x

    def call() -> Any:
        return overload(*[sizes(a, i) for i, a in enumerate(args)],
                        **{k: sizes(v, k) for k, v in kwargs.items()})

    try:
        out = call()
    except Exception:  # noqa: BLE001  (the example sizes may disagree: every unknown size 2)
        use_hints = False
        try:
            out = call()
        except Exception:  # noqa: BLE001  (no metadata then: translations needing it say so)
            return infos
    outs = out if isinstance(out, (tuple, list)) else (out,)
    new = []
    for i, ((dtype, sizes), o) in enumerate(zip(infos, outs)):
        if isinstance(o, torch.Tensor):
            if use_hints:
                hints[-1 - i] = list(o.shape)
            new.append((dtype or _dtypes.to_ir(o.dtype), sizes if sizes is not None else o.dim()))
        else:
            new.append((dtype, sizes))
    return new


# meta key: the example's value of an int computed in the graph from a size (aten::size).
SIZE_HINT = "onnxport.ts_size_hint"


def _scalar_arg(x: ir.Value) -> bool:
    return bool(x.meta.get("onnxport.ts_scalar"))


def _mark_scalar(x: Any) -> Any:
    if isinstance(x, ir.Value):
        x.meta["onnxport.ts_scalar"] = True
    return x
