"""GraphBuilder: the `g` every translation (built-in or user-written) receives.

`g.op("OpType", *inputs, **attrs)` appends one ONNX node to the graph being built and
returns its output value(s). Attributes take plain Python values or the legacy suffixed
names of torch.onnx symbolic functions (`alpha_f=1.0`, `axes_i=[0]`, `value_t=tensor`).
Python numbers, lists and tensors among the inputs become constants.

Invariants: every value the builder creates has a unique name and, where cheap to know,
a dtype; nodes whose inputs are all known constants are folded on the spot
(see `folding.py`), so shape arithmetic on static shapes never reaches the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.translate import folding
from onnxport.translate.complex import mark_complex

Tensor = ir.Value

_SUFFIX_TYPES = {
    "f": ir.AttributeType.FLOAT,
    "i": ir.AttributeType.INT,
    "s": ir.AttributeType.STRING,
    "t": ir.AttributeType.TENSOR,
    "g": ir.AttributeType.GRAPH,
    "fs": ir.AttributeType.FLOATS,
    "is": ir.AttributeType.INTS,
    "ss": ir.AttributeType.STRINGS,
    "ts": ir.AttributeType.TENSORS,
    "gs": ir.AttributeType.GRAPHS,
}

# Output dtype rules for ops whose first output does not take its first input's dtype.
_BOOL_OUTPUT = frozenset(
    "Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor IsNaN IsInf".split()
)
_INT64_OUTPUT = frozenset("Shape Size ArgMax ArgMin NonZero".split())
# Unary ops whose output has their input's shape (so helpers can ask for a rank).
_SAME_SHAPE = frozenset(
    "Abs Neg Cast CastLike Identity Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Floor Ceil Round "
    "Sign Erf Sin Cos IsNaN IsInf Not Softmax LogSoftmax".split())


@dataclasses.dataclass(slots=True)
class Scope:
    """Where the nodes being built come from: set by the translator per source node."""

    name_prefix: str = ""
    value_prefix: str = "v"
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


class GraphBuilder:
    """Builds one ONNX graph. Translations receive it as `g`."""

    def __init__(
        self,
        graph: ir.Graph,
        opset: int,
        *,
        parent: GraphBuilder | None = None,
        custom_opsets: dict[str, int] | None = None,
    ) -> None:
        self.graph = graph
        self.opset = opset
        self.parent = parent
        self.scope = Scope()
        self.custom_opsets: dict[str, int] = custom_opsets if custom_opsets is not None else {}
        self.used_domains: set[str] = set() if parent is None else parent.used_domains
        self.functions: dict[tuple[str, str, str], ir.Function] = (
            {} if parent is None else parent.functions)
        # The Translator driving this builder: control-flow translations use its `inline`.
        self.translator: Any = None if parent is None else parent.translator
        self.out_dtypes: tuple[ir.DataType | None, ...] = ()
        self.out_vals: tuple[Any, ...] = ()
        # Which outputs of the node being translated are read (all, unless the translator knows).
        self.out_read: tuple[bool, ...] = ()
        # The FX node being translated, for translations that need its arguments' metadata
        # (e.g. a graph input's strides); None outside the translator.
        self.fx_node: Any = None
        self._names: dict[str, int] = {} if parent is None else parent._names
        self._const_cache: dict[tuple[Any, ...], ir.Value] = {}

    # -- names ---------------------------------------------------------------------------
    def unique_name(self, name: str) -> str:
        """`name`, or `name_<n>` if taken; shared by nodes and values of the whole model."""
        count = self._names.get(name)
        if count is None:
            self._names[name] = 0
            return name
        while True:
            count += 1
            candidate = f"{name}_{count}"
            if candidate not in self._names:
                self._names[name] = count
                self._names[candidate] = 0
                return candidate

    def reserve_name(self, name: str) -> None:
        """Mark `name` as taken (graph inputs, initializers)."""
        self._names.setdefault(name, 0)

    # -- the op API ----------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        *inputs: Any,
        outputs: int = 1,
        domain: str | None = None,
        version: int | None = None,
        **attrs: Any,
    ) -> Any:
        """Append an ONNX node and return its output, or a tuple when `outputs` > 1.

        `op_type` may be qualified with a domain, as in `"com.microsoft::Gelu"`.
        """
        if "::" in op_type:
            domain, op_type = op_type.split("::", 1)
            if domain == "onnx":
                domain = ""
        domain = domain or ""
        if domain:
            self.used_domains.add(domain)
        like = _first_typed(inputs)
        values = [self._as_value(x, like) for x in inputs]
        # Trailing missing optional inputs are dropped rather than written as "".
        while values and values[-1] is None:
            values.pop()
        attributes = [_make_attr(k, v) for k, v in attrs.items() if v is not None]
        if not domain and outputs == 1:
            folded = folding.try_fold(op_type, values, {a.name: a.value for a in attributes})
            if folded is not None:
                # Keep the folded array's dtype: const() would narrow float64/int32 arrays.
                return self.const(folded, ir.DataType.from_numpy(folded.dtype))
        node = ir.Node(
            domain,
            op_type,
            values,
            attributes,
            num_outputs=outputs,
            version=version,
            name=self.unique_name(f"{self.scope.name_prefix}/{op_type}"),
            metadata_props=dict(self.scope.metadata) if self.scope.metadata else None,
        )
        for out in node.outputs:
            out.name = self.unique_name(f"{self.scope.value_prefix}_{op_type}")
        _infer_dtypes(node, values)
        self.graph.append(node)
        return node.outputs[0] if outputs == 1 else tuple(node.outputs)

    def onnxscript_op(self, function: Any, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """Call an onnxscript function: it becomes an ONNX function of the model, in its domain.

        Inputs bind to the function's tensor parameters in order; keyword arguments that name
        its attributes become node attributes.
        """
        proto = function.to_function_proto()
        key = (proto.domain, proto.name, getattr(proto, "overload", ""))
        if key not in self.functions:
            self.functions[key] = ir.serde.deserialize_function(proto)
            opset = getattr(function, "opset", None)
            version = getattr(opset, "version", 1)
            self.custom_opsets.setdefault(proto.domain, version)
        self.used_domains.add(proto.domain)
        for imported in proto.opset_import:
            if imported.domain:
                self.custom_opsets.setdefault(imported.domain, imported.version)
                self.used_domains.add(imported.domain)
        return self.op(proto.name, *inputs, outputs=outputs, domain=proto.domain, **attrs)

    def const(self, value: Any, dtype: ir.DataType | None = None, *, like: ir.Value | None = None) -> ir.Value:
        """A constant value; `like` gives it the dtype of another value."""
        if dtype is None and like is not None:
            dtype = like.dtype
        is_complex = _is_complex_data(value)
        if is_complex:
            # ONNX Runtime has no complex kernels: complex data is carried as real pairs.
            value = _real_pairs(value)
        array = _to_array(value, dtype)
        cacheable = array.size <= 16
        key: tuple[Any, ...] = ()
        if cacheable:
            key = (array.dtype.str, array.shape, array.tobytes(), is_complex)
            hit = self._const_cache.get(key)
            if hit is not None:
                return hit
        tensor = ir.tensor(array)
        node = ir.Node(
            "",
            "Constant",
            [],
            [ir.AttrTensor("value", tensor)],
            name=self.unique_name(f"{self.scope.name_prefix}/Constant"),
            metadata_props=dict(self.scope.metadata) if self.scope.metadata else None,
        )
        out = node.outputs[0]
        out.name = self.unique_name(f"{self.scope.value_prefix}_const")
        out.const_value = tensor
        out.dtype = tensor.dtype
        out.shape = ir.Shape(array.shape)
        if is_complex:
            mark_complex(out)
        self.graph.append(node)
        if cacheable:
            self._const_cache[key] = out
        return out

    def out_dtype(self, index: int = 0) -> ir.DataType:
        """The dtype PyTorch gives output `index` of the node being translated."""
        dtype = self.out_dtypes[index] if index < len(self.out_dtypes) else None
        if dtype is None:
            raise ValueError("the node being translated has no tensor output metadata")
        return dtype

    def out_is_read(self, index: int) -> bool:
        """Whether anything reads output `index` of the node being translated.

        A multi-output op whose caller drops an output (e.g. the vectors of `_linalg_svd`
        when only singular values are used) may return any value of the right shape for it.
        """
        return self.out_read[index] if index < len(self.out_read) else True

    def subgraph(self, inputs: Sequence[ir.Value], name: str) -> GraphBuilder:
        """A builder for a nested graph (If/Loop/Scan bodies) sharing this model's names."""
        graph = ir.Graph(list(inputs), [], nodes=[], name=name)
        child = GraphBuilder(graph, self.opset, parent=self, custom_opsets=self.custom_opsets)
        child.scope = dataclasses.replace(self.scope, metadata=dict(self.scope.metadata))
        return child

    # -- helpers -------------------------------------------------------------------------
    def _as_value(self, x: Any, like: ir.Value | None) -> ir.Value | None:
        if x is None or isinstance(x, ir.Value):
            return x
        if isinstance(x, (list, tuple)):
            if any(isinstance(item, ir.Value) for item in x):
                raise TypeError("g.op inputs: a list mixing values and numbers; build it with Concat")
            return self.const(np.asarray(x, dtype=np.int64) if _all_int(x) else np.asarray(x))
        if isinstance(x, bool):
            return self.const(x)
        if isinstance(x, (int, float)) and like is not None and like.dtype is not None:
            return self.const(x, like.dtype)
        return self.const(x)


def _first_typed(inputs: Sequence[Any]) -> ir.Value | None:
    for x in inputs:
        if isinstance(x, ir.Value) and x.dtype is not None:
            return x
    return None


def _all_int(xs: Sequence[Any]) -> bool:
    return all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in xs)


def _is_complex_data(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_complex()
    if isinstance(value, ir.TensorProtocol):
        return value.dtype in (ir.DataType.COMPLEX64, ir.DataType.COMPLEX128)
    return np.asarray(value).dtype.kind == "c"


def _real_pairs(value: Any) -> Any:
    """Complex data as real (..., 2) pairs: a torch tensor stays a tensor (keeps float64)."""
    if isinstance(value, torch.Tensor):
        return torch.view_as_real(value.detach().cpu().resolve_conj()).contiguous()
    array = value.numpy() if isinstance(value, ir.TensorProtocol) else np.asarray(value)
    pairs = np.ascontiguousarray(np.stack([array.real, array.imag], axis=-1))
    # A Python complex number is weak like a float: float32 pairs unless a dtype is given.
    return pairs.astype(np.float32) if isinstance(value, complex) else pairs


def _to_array(value: Any, dtype: ir.DataType | None) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            array = value.float().numpy()
            dtype = dtype or ir.DataType.BFLOAT16
        else:
            array = value.numpy()
    elif isinstance(value, ir.TensorProtocol):
        array = value.numpy()
    else:
        array = np.asarray(value)
        if dtype is None:
            if array.dtype == np.float64:
                array = array.astype(np.float32)
            elif array.dtype.kind in "iu" and array.dtype != np.uint8:
                array = array.astype(np.int64)
    if dtype is not None:
        array = array.astype(dtype.numpy())
    return array


def _make_attr(name: str, value: Any) -> ir.Attr:
    head, sep, suffix = name.rpartition("_")
    if sep and suffix in _SUFFIX_TYPES and head:
        attr_type = _SUFFIX_TYPES[suffix]
        if isinstance(value, (list, tuple)) and suffix in ("f", "i", "s", "t", "g"):
            # torch.onnx's convention: `axes_i=[0, 1]` is a list of ints.
            attr_type = _SUFFIX_TYPES[suffix + "s"]
        return _typed_attr(head, attr_type, value)
    return _typed_attr(name, None, value)


def _typed_attr(name: str, attr_type: ir.AttributeType | None, value: Any) -> ir.Attr:
    if isinstance(value, torch.dtype):
        value = _dtypes.to_ir(value)
    if isinstance(value, ir.DataType):
        value = int(value)
    if isinstance(value, torch.Tensor):
        value = ir.tensor(_to_array(value, None)) if value.dtype != torch.bfloat16 else ir.tensor(value)
    if isinstance(value, np.ndarray):
        value = ir.tensor(value)
    if attr_type is None:
        return ir.convenience.convert_attribute(name, value)
    if attr_type is ir.AttributeType.FLOAT:
        return ir.AttrFloat32(name, float(value))
    if attr_type is ir.AttributeType.INT:
        return ir.AttrInt64(name, int(value))
    if attr_type is ir.AttributeType.STRING:
        return ir.AttrString(name, value.decode() if isinstance(value, bytes) else str(value))
    if attr_type is ir.AttributeType.FLOATS:
        return ir.AttrFloat32s(name, [float(v) for v in value])
    if attr_type is ir.AttributeType.INTS:
        return ir.AttrInt64s(name, [int(v) for v in value])
    if attr_type is ir.AttributeType.STRINGS:
        return ir.AttrStrings(name, [str(v) for v in value])
    if attr_type is ir.AttributeType.TENSOR:
        return ir.AttrTensor(name, value if isinstance(value, ir.TensorProtocol) else ir.tensor(value))
    return ir.convenience.convert_attribute(name, value, attr_type=attr_type)


def _infer_dtypes(node: ir.Node, inputs: Sequence[ir.Value | None]) -> None:
    """Cheap dtype rules for node outputs; the translator overrides them with FX metadata."""
    op_type = node.op_type
    first = next((v.dtype for v in inputs if v is not None and v.dtype is not None), None)
    dtype: ir.DataType | None
    if node.domain:
        return
    if op_type in _BOOL_OUTPUT:
        dtype = ir.DataType.BOOL
    elif op_type in _INT64_OUTPUT:
        dtype = ir.DataType.INT64
    elif op_type in ("Cast", "RandomNormal", "RandomUniform", "EyeLike", "RandomNormalLike",
                     "RandomUniformLike", "Multinomial", "Bernoulli"):
        attr = node.attributes.get("to") or node.attributes.get("dtype")
        dtype = ir.DataType(attr.as_int()) if attr is not None else first
    elif op_type == "CastLike":
        dtype = inputs[1].dtype if inputs[1] is not None else None
    elif op_type == "Where":
        dtype = inputs[1].dtype if inputs[1] is not None else None
    elif op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        dtype = attr.as_tensor().dtype if attr is not None else ir.DataType.FLOAT
    elif op_type in ("If", "Loop", "Scan", "SequenceAt", "SplitToSequence", "ConcatFromSequence"):
        return
    else:
        dtype = first
    if dtype is not None:
        node.outputs[0].dtype = dtype
    if op_type in _SAME_SHAPE and inputs and inputs[0] is not None and inputs[0].shape is not None:
        node.outputs[0].shape = inputs[0].shape.copy()
    if op_type in ("TopK", "MaxPool", "Unique") and len(node.outputs) > 1:
        for out in node.outputs[1:]:
            out.dtype = ir.DataType.INT64
    elif op_type in ("Split", "LayerNormalization", "Dropout") and len(node.outputs) > 1:
        node.outputs[1].dtype = ir.DataType.BOOL if op_type == "Dropout" else dtype
        for out in node.outputs[2:]:
            out.dtype = dtype
        if op_type == "Split":
            for out in node.outputs:
                out.dtype = dtype
