"""User symbolic functions of the TorchScript flavour (torch.onnx's `register_custom_op_symbolic`).

A symbolic function `fn(g, *inputs)` translates one TorchScript node (`aten::elu`,
`custom_ops::foo`, ...). It receives a `GraphContext` `g` (the GraphBuilder's `op`,
`onnxscript_op`, `const`, `opset` ...) and the node's inputs in order: tensors as
`SymbolicValue`s (an `ir.Value` with torch's `type()` / `setType()`), constants as Python
values. It returns a value, a tuple of values, or None for a node without outputs.

Registered functions apply to `export(dynamo=False)` for their opset and above; the
TorchScript translator consults them before the op library.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.translate.builder import GraphBuilder

# symbolic name ("domain::op") -> {opset version: function}
_SYMBOLICS: dict[str, dict[int, Callable[..., Any]]] = {}


def _check_name(symbolic_name: str) -> None:
    domain, sep, op = symbolic_name.partition("::")
    if not sep or not domain or not op or "::" in op:
        raise ValueError(f"symbolic name must be '<domain>::<op>', got {symbolic_name!r}")


def register_custom_op_symbolic(symbolic_name: str, symbolic_fn: Callable[..., Any],
                                opset_version: int) -> None:
    """Use `symbolic_fn(g, *inputs)` for `symbolic_name` at `opset_version` and above."""
    _check_name(symbolic_name)
    if not callable(symbolic_fn):
        raise TypeError("symbolic_fn must be callable")
    _SYMBOLICS.setdefault(symbolic_name, {})[int(opset_version)] = symbolic_fn


def unregister_custom_op_symbolic(symbolic_name: str, opset_version: int) -> None:
    """Remove what `register_custom_op_symbolic` registered for this name and opset."""
    _check_name(symbolic_name)
    versions = _SYMBOLICS.get(symbolic_name, {})
    versions.pop(int(opset_version), None)
    if not versions:
        _SYMBOLICS.pop(symbolic_name, None)


def lookup_symbolic(kind: str, opset: int) -> Callable[..., Any] | None:
    """The symbolic registered for `kind` at the highest version <= `opset`, or None."""
    versions = _SYMBOLICS.get(kind)
    if not versions:
        return None
    usable = [v for v in versions if v <= opset]
    return versions[max(usable)] if usable else None


class SymbolicType:
    """A value's type as torch.onnx symbolic functions see it (`X.type()`)."""

    def __init__(self, dtype: ir.DataType | None, shape: ir.Shape | None) -> None:
        self.dtype = dtype
        self.shape = shape

    def scalarType(self) -> str | None:  # noqa: N802  (torch's name)
        if self.dtype is None:
            return None
        from onnxport._jit_scalar_type import JitScalarType
        return JitScalarType.from_onnx_type(self.dtype).scalar_name()

    def dtype_(self) -> torch.dtype | None:
        return _dtypes.to_torch(self.dtype) if self.dtype is not None else None

    def sizes(self) -> list[int | None] | None:
        if self.shape is None:
            return None
        return [d if isinstance(d, int) else None for d in self.shape]

    def varyingSizes(self) -> list[int | None] | None:  # noqa: N802
        return self.sizes()

    def dim(self) -> int | None:
        return len(self.shape) if self.shape is not None else None

    def with_dtype(self, dtype: torch.dtype) -> SymbolicType:
        return SymbolicType(_dtypes.to_ir(dtype), self.shape)

    def with_sizes(self, sizes: list[int | None]) -> SymbolicType:
        return SymbolicType(self.dtype, ir.Shape(list(sizes)))

    def __repr__(self) -> str:
        return f"SymbolicType({self.dtype}, {self.shape})"


class SymbolicValue:
    """An `ir.Value` with the torch._C.Value methods symbolic functions use."""

    __slots__ = ("value",)

    def __init__(self, value: ir.Value) -> None:
        object.__setattr__(self, "value", value)

    def type(self) -> SymbolicType:
        return SymbolicType(self.value.dtype, self.value.shape)

    def setType(self, ty: SymbolicType | Any) -> SymbolicValue:  # noqa: N802
        """Record the dtype/shape of this value (shape inference for custom ops)."""
        if isinstance(ty, SymbolicValue):
            ty = ty.type()
        if isinstance(ty, SymbolicType):
            if ty.dtype is not None:
                self.value.dtype = ty.dtype
            if ty.shape is not None:
                self.value.shape = ty.shape
        return self

    def isCompleteTensor(self) -> bool:  # noqa: N802
        shape = self.value.shape
        return self.value.dtype is not None and shape is not None and \
            all(isinstance(d, int) for d in shape)

    def debugName(self) -> str:  # noqa: N802
        return self.value.name or ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.value, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.value, name, value)

    def __repr__(self) -> str:
        return f"SymbolicValue({self.value!r})"


def unwrap(x: Any) -> Any:
    """`ir.Value`s in place of SymbolicValues, in nested tuples/lists too."""
    if isinstance(x, SymbolicValue):
        return x.value
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(v) for v in x)
    return x


def wrap(x: Any) -> Any:
    if isinstance(x, ir.Value):
        return SymbolicValue(x)
    if isinstance(x, tuple):
        return tuple(wrap(v) for v in x)
    if isinstance(x, list):
        return [wrap(v) for v in x]
    return x


class GraphContext:
    """The `g` of a symbolic function: a GraphBuilder taking and returning SymbolicValues."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder

    def op(self, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """`g.op("Domain::Op", *inputs, attr_f=..., outputs=N)`: see GraphBuilder.op."""
        attrs = {k: unwrap(v) for k, v in attrs.items()}
        if op_type == "Constant" and len(attrs) == 1 and not inputs:
            # g.op("Constant", value_t=...) is a constant of the builder.
            ((name, value),) = attrs.items()
            if name in ("value_t", "value"):
                return wrap(self.builder.const(value))
        return wrap(self.builder.op(op_type, *unwrap(inputs), outputs=outputs, **attrs))

    def onnxscript_op(self, function: Any, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """Call an onnxscript function (an ONNX function of the model, in its own domain)."""
        return wrap(self.builder.onnxscript_op(function, *unwrap(inputs), outputs=outputs,
                                               **{k: unwrap(v) for k, v in attrs.items()}))

    def const(self, value: Any, dtype: ir.DataType | None = None, *, like: Any = None) -> Any:
        return wrap(self.builder.const(value, dtype, like=unwrap(like)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.builder, name)


def call_symbolic(fn: Callable[..., Any], builder: GraphBuilder, args: list[Any],
                  kwargs: dict[str, Any] | None = None) -> Any:
    """Call a user symbolic function; returns ir.Values (or nested tuples of them).

    A function taking fewer positional inputs than the node has (`elu(g, input, alpha)` for
    `aten::elu(self, alpha, scale, input_scale)`) gets the leading ones, as in torch.onnx's
    documented examples.
    """
    args = _fit(fn, wrap(list(args)))
    result = fn(GraphContext(builder), *args, **(kwargs or {}))
    return unwrap(result)


def _fit(fn: Callable[..., Any], args: list[Any]) -> list[Any]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return args
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return args
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    limit = max(len(positional) - 1, 0)  # minus g
    return args[:limit] if len(args) > limit else args


# -- parse_args -----------------------------------------------------------------------------

def _python_value(x: Any, desc: str) -> Any:
    if isinstance(x, SymbolicValue):
        x = x.value
    if isinstance(x, ir.Value):
        if x.const_value is None:
            raise TranslationError(f"parse_args: expected a constant for '{desc}', "
                                   f"got the computed value {x.name}")
        return x.const_value.numpy()
    return x


def parse_arg(value: Any, desc: str) -> Any:
    """One argument converted per its parse_args code."""
    if desc in ("v", "none"):
        return value
    if value is None:
        return None
    if desc == "is" and isinstance(value, (list, tuple)) and \
            any(isinstance(v, (ir.Value, SymbolicValue)) for v in value):
        return [int(np.asarray(_python_value(v, desc)).item()) for v in value]
    raw = _python_value(value, desc)
    if desc == "t":
        return torch.as_tensor(np.asarray(raw)) if not isinstance(raw, torch.Tensor) else raw
    if desc in ("i", "f", "b"):
        scalar = np.asarray(raw)
        if scalar.size != 1:
            raise TranslationError(f"parse_args: expected a scalar for '{desc}', got {raw!r}")
        item = scalar.reshape(()).item()
        return {"i": int, "f": float, "b": bool}[desc](item)
    if desc in ("is", "fs"):
        items = np.asarray(raw).reshape(-1).tolist()
        return [int(v) for v in items] if desc == "is" else [float(v) for v in items]
    if desc == "s":
        return raw if isinstance(raw, str) else str(raw)
    raise ValueError(f"parse_args: unknown type code {desc!r}")


def parse_args(*arg_descriptors: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a symbolic function so its inputs arrive as Python values per type code.

    Codes: 'v' value as is, 'i' int, 'is' int list, 'f' float, 'fs' float list, 'b' bool,
    's' str, 't' torch.Tensor, 'none' as is. A code other than 'v'/'none' needs a constant.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(g: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) > len(arg_descriptors):
                raise TypeError(f"{fn.__name__}: {len(args)} inputs, "
                                f"{len(arg_descriptors)} parse_args codes")
            parsed = [parse_arg(a, d) for a, d in zip(args, arg_descriptors)]
            return fn(g, *parsed, **kwargs)

        # call_symbolic fits inputs to the signature of what is registered: the wrapper
        # takes as many as there are codes.
        wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("g", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for i in range(len(arg_descriptors))])
        return wrapper

    return decorator
