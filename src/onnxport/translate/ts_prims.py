"""`prim::` nodes of the TorchScript flavour, and the `aten::` nodes on Python values.

Constants, lists, tuples and dicts (as Python containers of values), module attributes
(`prim::GetAttr`: weights become initializers named by their path), `prim::If` and
`prim::Loop` (as ONNX If/Loop, or evaluated when the condition or trip count is known; lists
a loop appends to become ONNX sequences), and the `aten::` list and identity ops that never
reach the op library (`_SPECIAL`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.translate.builder import GraphBuilder
from onnxport.translate.translator import _identity
from onnxport.translate.ts_graph import _all_nodes, _mark_scalar, _type_info
from onnxport.translate.ts_scalars import (
    _TORCH_TO_CODE, _derive_index, _dim, _getitem, _len, _numel, _range_length, _scalar_binary,
    _shape_as_tensor, _size, _tensor, _to_scalar, cast,
)
from onnxport.translate.ts_symbolic import _python_op

if TYPE_CHECKING:
    from onnxport.translate.ts_context import ScriptTranslation

_INT64_MAX = 9223372036854775807


class _Obj:
    """A module (or other object) reached through prim::GetAttr, with its attribute path."""

    __slots__ = ("obj", "path")

    def __init__(self, path: str, obj: Any) -> None:
        self.path = path
        self.obj = obj


_ELEM_RANK = "onnxport.sequence_element_rank"


# -- prim:: nodes ----------------------------------------------------------------------------
def _constant(t: ScriptTranslation, node: torch._C.Node) -> None:
    out = node.output()
    value = out.toIValue()
    if isinstance(value, torch.Tensor):
        value = t.g.const(value) if value.numel() <= 16 else t._initializer(
            t.g.unique_name(f"const_{out.debugName()}"), value)
    t._set(out, value)


def _list_construct(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), [t._get(v) for v in node.inputs()])


def _dict_construct(t: ScriptTranslation, node: torch._C.Node) -> None:
    items = [t._get(v) for v in node.inputs()]
    t._set(node.output(), dict(zip(items[0::2], items[1::2])))


def _tuple_construct(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), tuple(t._get(v) for v in node.inputs()))


def _unpack(t: ScriptTranslation, node: torch._C.Node) -> None:
    seq = t._get(node.input())
    outs = list(node.outputs())
    if isinstance(seq, ir.Value):
        seq = [t.g.op("SequenceAt", seq, t.g.const(i, ir.DataType.INT64)) for i in range(len(outs))]
    for out, value in zip(outs, seq):
        t._set(out, value)


def _tuple_index(t: ScriptTranslation, node: torch._C.Node) -> None:
    seq, index = (t._get(v) for v in node.inputs())
    t._set(node.output(), seq[index])


def _get_attr(t: ScriptTranslation, node: torch._C.Node) -> None:
    parent = t._get(node.input())
    name = node.s("name")
    if not isinstance(parent, _Obj):
        raise TranslationError(f"prim::GetAttr '{name}' on a value that is not a module")
    if name == "training" and t.captured.training is not None:
        t._set(node.output(), t.captured.training)
        return
    obj = getattr(parent.obj, name)
    path = f"{parent.path}.{name}" if parent.path else name
    if isinstance(obj, torch.Tensor):
        t._set(node.output(), t._initializer(path, obj))
    elif isinstance(obj, (torch.nn.Module, torch.jit.ScriptModule)) or hasattr(obj, "_c"):
        t._set(node.output(), _Obj(path, obj))
    else:
        t._set(node.output(), obj)


def _num_to_tensor(t: ScriptTranslation, node: torch._C.Node) -> None:
    value = t._get(node.input())
    if not isinstance(value, ir.Value):
        value = t.g.const(value, ir.DataType.INT64 if isinstance(value, int)
                          and not isinstance(value, bool) else None)
    t._set(node.output(), value)


def _device(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), torch.device("cpu"))


def _dtype(t: ScriptTranslation, node: torch._C.Node) -> None:
    x = t._get(node.input())
    t._set(node.output(), _TORCH_TO_CODE[_dtypes.to_torch(x.dtype)])


def _append(t: ScriptTranslation, node: torch._C.Node) -> None:
    seq, item = (t._get(v) for v in node.inputs())
    if isinstance(item, ir.Value) and item.dtype is not None:
        t._appended_dtypes.setdefault(node.inputsAt(0).unique(), item.dtype)
        if item.shape is not None:
            t._appended_ranks.setdefault(node.inputsAt(0).unique(), len(item.shape))
    if isinstance(seq, ir.Value) and isinstance(seq.type, ir.SequenceType):
        new = t.g.op("SequenceInsert", seq, cast(t.g, item, seq.type.elem_type.dtype))
        new.type = seq.type
        new.meta.update(seq.meta)
        t._set(node.inputsAt(0), new)
        t._set(node.output(), new)
        return
    if isinstance(seq, list) and t.g.graph.name == "scratch":
        seq.append(item)
        t._set(node.output(), seq)
        return
    if not isinstance(seq, list) or t.g.parent is not None:
        raise TranslationError("appending to a list inside data-dependent control flow is not "
                               "supported (build the list in a loop with a constant trip count)")
    seq.append(item)
    t._set(node.output(), seq)


def _if(t: ScriptTranslation, node: torch._C.Node) -> None:
    cond = t._get(node.input())
    blocks = list(node.blocks())
    outs = list(node.outputs())
    if not isinstance(cond, ir.Value):
        results = t.translate_block(t.g, blocks[0 if cond else 1], [])
        for out, value in zip(outs, results):
            t._set(out, value)
        return
    g = t.g
    subs = [g.subgraph([], name) for name in ("then_branch", "else_branch")]
    then_results, else_results = (t.translate_block(sub, block, []) for sub, block in zip(subs, blocks))
    # Each TorchScript output becomes: a Python value both branches agree on (no If output),
    # one If output per element of a list both branches build with the same length, or one.
    layout: list[tuple[str, Any]] = []
    pairs: list[tuple[Any, Any, torch._C.Value | None]] = []
    for out, a, b in zip(outs, then_results, else_results):
        if not isinstance(a, (ir.Value, list, tuple)) and not isinstance(b, (ir.Value, list, tuple)) \
                and type(a) is type(b) and a == b:
            layout.append(("same", a))
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
            layout.append(("list", (type(a), len(a))))
            pairs.extend((x, y, None) for x, y in zip(a, b))
        elif isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            raise TranslationError("the branches of an `if` build lists of different lengths")
        else:
            layout.append(("one", None))
            pairs.append((a, b, out))
    for sub, index in zip(subs, (0, 1)):
        sub.graph.outputs.extend(_owned(sub, p[index], p[2]) for p in pairs)
        if not pairs:
            # ONNX If needs at least one output.
            sub.graph.outputs.append(_identity(sub, sub.const(0, ir.DataType.INT64)))
    results = g.op("If", cast(g, cond, ir.DataType.BOOL), then_branch=subs[0].graph,
                   else_branch=subs[1].graph, outputs=max(len(pairs), 1))
    results = list(results) if isinstance(results, tuple) else [results]
    for res, a, b in zip(results, subs[0].graph.outputs, subs[1].graph.outputs):
        res.dtype = a.dtype or b.dtype
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            res.shape = ir.Shape([x if x == y else None for x, y in zip(a.shape, b.shape)])
        if res.shape is not None and len(res.shape) == 0:
            _mark_scalar(res)
    it = iter(results)
    for out, (kind, extra) in zip(outs, layout):
        if kind == "same":
            t._set(out, extra)
        elif kind == "list":
            seq_type, n = extra
            t._set(out, seq_type(next(it) for _ in range(n)))
        else:
            t._set(out, t._finish(out, next(it), t.info(out)))


def _owned(sub: GraphBuilder, value: Any, out: torch._C.Value | None = None) -> ir.Value:
    """`value` as an output of `sub`'s graph (a constant, or an Identity of an outer value)."""
    if not isinstance(value, ir.Value):
        dtype = _type_info(out.type())[0] if out is not None else None
        value = sub.const(value, dtype)
    producer = value.producer()
    if producer is not None and producer.graph is sub.graph and not value.is_graph_output():
        return value
    result = sub.op("Identity", value)
    result.dtype, result.shape = value.dtype, value.shape
    return result


def _mutates_lists(block: Any) -> bool:
    return any(n.kind() in _LIST_MUTATIONS for n in _all_nodes(block))


_LIST_MUTATIONS = frozenset({"aten::append", "aten::insert", "aten::pop", "aten::_set_item",
                             "aten::extend", "aten::clear"})


def _loop(t: ScriptTranslation, node: torch._C.Node) -> None:
    g = t.g
    inputs = [t._get(v) for v in node.inputs()]
    trip, cond, carried = inputs[0], inputs[1], inputs[2:]
    block = next(iter(node.blocks()))
    outs = list(node.outputs())
    if not isinstance(trip, ir.Value) and not isinstance(cond, ir.Value) and \
            (_mutates_lists(block) or any(isinstance(c, list) for c in carried)):
        # A loop with a known trip count that builds a Python list: unrolled, so the list
        # stays a list of values (ONNX sequences would need the mutation made functional).
        index = 0
        while cond and index < trip:
            results = t.translate_block(g, block, [index, *carried])
            cond, carried = results[0], results[1:]
            if isinstance(cond, ir.Value):
                raise TranslationError("a loop that builds a list and stops on a tensor "
                                       "condition is not supported")
            index += 1
        for out, value in zip(outs, carried):
            t._set(out, value)
        return
    carried_values = []
    for value, out in zip(carried, outs):
        if isinstance(value, list):
            raise TranslationError("a list carried through a loop is not supported (use a tensor)")
        if not isinstance(value, ir.Value):
            value = g.const(value, _type_info(out.type())[0])
        carried_values.append(value)
    # Lists the body appends to become ONNX sequences carried through the loop.
    lists = _appended_lists(t, block)
    sequences = [_as_sequence(t, lv, _element_dtype(t, node, block, lv)) for lv in lists]
    sub = g.subgraph([], "loop_body")
    iteration = ir.Value(name=g.unique_name("loop_iteration"),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("loop_condition"),
                         type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    body_in = []
    for value in carried_values:
        rank = len(value.shape) if value.shape is not None else None
        inner = ir.Value(name=g.unique_name(f"{value.name}_in"), type=ir.TensorType(value.dtype),
                         shape=ir.Shape([None] * rank) if rank is not None else None)
        if rank == 0:
            _mark_scalar(inner)
        outer_hint = t._hints.get(id(value)) or (
            [int(d) for d in value.shape] if value.shape is not None
            and all(isinstance(d, int) for d in value.shape) else None)
        if outer_hint is not None:
            t._hints[id(inner)] = outer_hint
        body_in.append(inner)
    seq_in = [ir.Value(name=g.unique_name(f"{seq.name}_in"), type=seq.type) for seq in sequences]
    for seq, inner in zip(sequences, seq_in):
        inner.meta.update(seq.meta)
    for lv, inner in zip(lists, seq_in):
        t._set(lv, inner)
    sub.graph.inputs.extend([iteration, condition, *body_in, *seq_in])
    _mark_scalar(iteration)
    results = t.translate_block(sub, block, [iteration, *body_in])
    again, updated = results[0], results[1:]
    updated = [*updated, *(t._get(lv) for lv in lists)]
    body_in = [*body_in, *seq_in]
    carried_values = [*carried_values, *sequences]
    sub.graph.outputs.append(_owned(sub, cast(sub, again, ir.DataType.BOOL)
                                    if isinstance(again, ir.Value) else bool(again)))
    for value, inner in zip(updated, body_in):
        if isinstance(value, ir.Value) and value.dtype is not None and value.dtype != inner.dtype \
                and not isinstance(inner.type, ir.SequenceType):
            value = sub.op("Cast", value, to=inner.dtype)
        owned = _owned(sub, value if isinstance(value, ir.Value) else sub.const(value, inner.dtype))
        sub.graph.outputs.append(owned)
    max_trip = trip if isinstance(trip, ir.Value) else g.const(int(trip), ir.DataType.INT64)
    if not isinstance(trip, ir.Value) and trip >= _INT64_MAX:
        max_trip = None
    first = cast(g, cond, ir.DataType.BOOL) if isinstance(cond, ir.Value) else g.const(bool(cond))
    results = g.op("Loop", max_trip and cast(g, max_trip, ir.DataType.INT64), first,
                   *carried_values, body=sub.graph, outputs=max(len(carried_values), 1))
    results = results if isinstance(results, tuple) else (results,)
    for lv, res, seq in zip(lists, results[len(outs):], sequences):
        res.type = seq.type
        res.meta.update(seq.meta)
        t._set(lv, res)
    for out, res, value in zip(outs, results, carried_values):
        res.dtype = value.dtype
        if value.shape is not None:
            res.shape = ir.Shape([None] * len(value.shape))
            if len(value.shape) == 0:
                _mark_scalar(res)
        t._set(out, t._finish(out, res, t.info(out)))


def _appended_lists(t: ScriptTranslation, block: Any) -> list[torch._C.Value]:
    """The lists defined before `block` that it appends to (TorchScript lists are mutable)."""
    found: dict[int, torch._C.Value] = {}
    for n in _all_nodes(block):
        if n.kind() == "aten::append":
            lv = n.inputsAt(0)
            if lv.unique() in t.env:
                found.setdefault(lv.unique(), lv)
    return list(found.values())


def _element_dtype(t: ScriptTranslation, node: torch._C.Node, block: Any,
                   lv: torch._C.Value) -> ir.DataType:
    current = t._get(lv)
    if isinstance(current, ir.Value) and isinstance(current.type, ir.SequenceType):
        return current.type.elem_type.dtype
    if isinstance(current, list) and current and isinstance(current[0], ir.Value) \
            and current[0].dtype is not None:
        return current[0].dtype
    # An empty list: translate the body once, aside, to see what it appends.
    t._appended_dtypes.pop(lv.unique(), None)
    outer_env = dict(t.env)
    scratch = t.g.subgraph([], "scratch")
    inputs = [t._get(v) for v in node.inputs()]
    fake = [_mark_scalar(ir.Value(name="scratch_iter", type=ir.TensorType(ir.DataType.INT64),
                                  shape=ir.Shape([])))]
    for value in inputs[2:]:
        if isinstance(value, ir.Value):
            stand_in = ir.Value(name="scratch", type=value.type, shape=value.shape)
            stand_in.meta.update(value.meta)
            if id(value) in t._hints:
                t._hints[id(stand_in)] = t._hints[id(value)]
            fake.append(stand_in)
        else:
            fake.append(value)
    t._set(lv, [])
    try:
        t.translate_block(scratch, block, fake)
    finally:
        t.env = outer_env
    dtype = t._appended_dtypes.get(lv.unique())
    if dtype is None:
        raise TranslationError("cannot tell the dtype of the tensors a loop appends to a list")
    return dtype


def _as_sequence(t: ScriptTranslation, lv: torch._C.Value, dtype: ir.DataType) -> ir.Value:
    current = t._get(lv)
    if isinstance(current, ir.Value):
        return current
    g = t.g
    if not current:
        seq = g.op("SequenceEmpty", dtype=int(dtype))
        rank = t._appended_ranks.get(lv.unique())
    else:
        seq = g.op("SequenceConstruct", *[cast(g, v, dtype) for v in current])
        rank = len(current[0].shape) if current[0].shape is not None else None
    seq.type = ir.SequenceType(ir.TensorType(dtype))
    if rank is not None:
        seq.meta[_ELEM_RANK] = rank
    return seq


def _passthrough(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), t._get(node.input()))


def _ignore(t: ScriptTranslation, node: torch._C.Node) -> None:
    for out in node.outputs():
        t._set(out, None)


def _raise_exception(t: ScriptTranslation, node: torch._C.Node) -> None:
    # A branch that raises: ONNX has no exceptions; the branch yields nothing useful.
    for out in node.outputs():
        t._set(out, None)


def _is_none(t: ScriptTranslation, node: torch._C.Node) -> None:
    a, b = (t._get(v) for v in node.inputs())
    if isinstance(a, ir.Value) and isinstance(b, ir.Value):
        same = a is b
    elif isinstance(a, ir.Value) or isinstance(b, ir.Value):
        same = False  # a value is never None
    else:
        same = a is b or a == b
    t._set(node.output(), same if node.kind() == "aten::__is__" else not same)


def _unchecked_cast(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), t._get(node.input()))


def _python_list(t: ScriptTranslation, node: torch._C.Node, op: str) -> list[Any]:
    items = t._get(node.inputsAt(0))
    if not isinstance(items, (list, tuple)):
        raise TranslationError(f"{op} of a list that is a tensor value in the graph (a list "
                               "built in data-dependent control flow)")
    return list(items)


def _slice(t: ScriptTranslation, node: torch._C.Node) -> None:
    """aten::slice.t (a list's items[start:end:step]) on the Python list; a tensor's slice
    is the op library's."""
    if not isinstance(node.inputsAt(0).type(), torch._C.ListType):
        t._aten(node)
        return
    items = _python_list(t, node, "slicing")
    bounds = [t._get(v) for v in list(node.inputs())[1:]]
    if any(isinstance(b, ir.Value) for b in bounds):
        raise TranslationError("slicing a list with bounds computed in the graph")
    t._set(node.output(), items[slice(*bounds)])


def _list_copy(t: ScriptTranslation, node: torch._C.Node) -> None:
    t._set(node.output(), _python_list(t, node, "list()"))


def _contains(t: ScriptTranslation, node: torch._C.Node) -> None:
    items, item = (t._get(v) for v in node.inputs())
    if isinstance(item, ir.Value) or not isinstance(items, (list, tuple, dict)) \
            or any(isinstance(i, ir.Value) for i in items):
        raise TranslationError("`in` on values computed in the graph")
    t._set(node.output(), item in items)


def _format(t: ScriptTranslation, node: torch._C.Node) -> None:
    """aten::format: a message (TorchScript's are for exceptions); graph values by name."""
    text, *args = (t._get(v) for v in node.inputs())
    shown = [f"<{a.name}>" if isinstance(a, ir.Value) else a for a in args]
    t._set(node.output(), str(text).format(*shown))


_PRIM: dict[str, Callable[[ScriptTranslation, torch._C.Node], None]] = {
    "prim::Constant": _constant,
    "prim::ListConstruct": _list_construct,
    "prim::ListUnpack": _unpack,
    "prim::TupleConstruct": _tuple_construct,
    "prim::DictConstruct": _dict_construct,
    "prim::TupleUnpack": _unpack,
    "prim::TupleIndex": _tuple_index,
    "prim::GetAttr": _get_attr,
    "prim::NumToTensor": _num_to_tensor,
    "prim::If": _if,
    "prim::Loop": _loop,
    "prim::device": _device,
    "prim::dtype": _dtype,
    "prim::unchecked_cast": _unchecked_cast,
    "prim::RaiseException": _raise_exception,
    "prim::Uninitialized": _ignore,
    "prim::PythonOp": _python_op,
    "prim::min": _scalar_binary("Min", min),
    "prim::max": _scalar_binary("Max", max),
}


_SPECIAL: dict[str, Callable[[ScriptTranslation, torch._C.Node], None]] = {
    "aten::size": _size,
    "aten::dim": _dim,
    "aten::numel": _numel,
    "aten::_shape_as_tensor": _shape_as_tensor,
    "aten::tensor": _tensor,
    "aten::Int": _to_scalar(ir.DataType.INT64, int),
    "aten::IntImplicit": _to_scalar(ir.DataType.INT64, int),
    "aten::slice": _slice,
    "aten::list": _list_copy,
    "aten::__contains__": _contains,
    "aten::format": _format,
    "aten::Float": _to_scalar(ir.DataType.FLOAT, float),
    "aten::Bool": _to_scalar(ir.DataType.BOOL, bool),
    "aten::ScalarImplicit": _to_scalar(None, lambda v: v),
    "aten::__getitem__": _getitem,
    "aten::append": _append,
    "aten::len": _len,
    "aten::__range_length": _range_length,
    "aten::__derive_index": _derive_index,
    "aten::__is__": _is_none,
    "aten::__isnot__": _is_none,
    "aten::warn": _ignore,
    "aten::detach": _passthrough,
    "aten::__not__": lambda t, n: t._set(n.output(), (not t._get(n.input())) if not isinstance(
        t._get(n.input()), ir.Value) else t.g.op("Not", t._get(n.input()))),
}
