"""Decompose single FX nodes in place: only the ops the op library cannot translate.

`ExportedProgram.run_decompositions` re-traces the whole program (it costs more than the
capture itself, and grows with the square of the parameter count). Here each untranslated
node is traced alone with its decomposition on its FakeTensor metadata and the resulting
ATen nodes are spliced into the graph where it stood, keeping its module path and source.
A node that cannot be handled this way is left for `run_decompositions`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode
from torch.fx.experimental.proxy_tensor import make_fx

logger = logging.getLogger(__name__)

_KEPT_META = ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node")


@functools.cache
def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """torch.export's default decompositions plus torch._decomp's others, built once."""
    from torch._decomp import decomposition_table as all_decompositions

    table = dict(all_decompositions)
    table.update(torch.export.default_decompositions().items())
    return table


def decomposition_for(op: Any) -> Callable[..., Any] | None:
    """How to decompose `op`: a registered decomposition, or its CompositeImplicitAutograd
    kernel (ops such as `matrix_H` are defined by other ATen ops)."""
    found = decomposition_table().get(op)
    if found is not None:
        return found
    if isinstance(op, torch._ops.OpOverload) and torch._C._dispatch_has_kernel_for_dispatch_key(
            op.name(), "CompositeImplicitAutograd"):
        return op.decompose
    return custom_op_implementation(op)


def custom_op_implementation(op: Any) -> Callable[..., Any] | None:
    """The Python function a `torch.library.custom_op` was defined with, or None.

    torch.export keeps a custom op as one opaque node. Without a translation, its own body
    is traced in its place (it is inlined): this works where the body is plain torch without
    data-dependent control flow; a body that is not (e.g. `.tolist()` of a tensor) fails to
    trace, and the op stays untranslated, reported as such.
    """
    if not isinstance(op, torch._ops.OpOverload):
        return None
    from torch._library.custom_ops import OPDEFS

    definition = OPDEFS.get(op._schema.name)
    function = getattr(definition, "_init_fn", None)
    return function if callable(function) else None


def decompose_node(graph: torch.fx.Graph, node: torch.fx.Node,
                   decomposition: Callable[..., Any]) -> bool:
    """Replace `node` by the ATen nodes of its decomposition; False if it cannot be done here."""
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    node_index = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.fx.Node)]
    vals = [leaves[i].meta.get("val") for i in node_index]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return False

    def call(*tensors: Any) -> Any:
        filled = list(leaves)
        for j, i in enumerate(node_index):
            filled[i] = tensors[j]
        args, kwargs = pytree.tree_unflatten(filled, spec)
        return decomposition(*args, **kwargs)

    fake_mode = detect_fake_mode(vals)
    try:
        with fake_mode if fake_mode is not None else contextlib.nullcontext():
            sub = make_fx(call, tracing_mode="real")(*vals)
    except Exception as e:  # noqa: BLE001  (the caller falls back to run_decompositions)
        logger.info("local decomposition of %s failed: %s", node.target, e)
        return False
    if any(n.op == "get_attr" for n in sub.graph.nodes):
        return False
    _unwrap_namedtuples(sub.graph)
    output = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    is_tuple = isinstance(output, (tuple, list))
    if is_tuple and any(u.target is not operator.getitem for u in node.users):
        return False
    if not is_tuple and not isinstance(output, torch.fx.Node):
        return False
    env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for placeholder, j in zip(placeholders, node_index):
        env[placeholder] = leaves[j]
    with graph.inserting_before(node):
        for sub_node in sub.graph.nodes:
            if sub_node.op in ("placeholder", "output"):
                continue
            new = graph.node_copy(sub_node, lambda n: env[n])
            for key in _KEPT_META:
                if key in node.meta:
                    new.meta[key] = node.meta[key]
            env[sub_node] = new
    result = torch.fx.map_arg(output, lambda n: env[n])
    if is_tuple:
        for user in list(node.users):
            user.replace_all_uses_with(result[user.args[1]])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True


def _unwrap_namedtuples(graph: torch.fx.Graph) -> None:
    """Replace namedtuple constructions by plain tuples of their fields.

    Decompositions wrapped in `out_wrapper` return `torch.return_types`-style namedtuples, and
    torch.fx records building one as a `call_function` node on the namedtuple class, which no
    translation (and no ATen schema) covers. Reads of its fields become direct uses.
    """
    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not (isinstance(target, type) and issubclass(target, tuple)):
            continue
        fields = list(node.args) + [node.kwargs[f] for f in getattr(target, "_fields", ())[
            len(node.args):] if f in node.kwargs]
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(fields[user.args[1]])  # type: ignore[index]
                graph.erase_node(user)
            elif user.op == "output":
                user.args = torch.fx.map_arg(user.args, _replacing(node, tuple(fields)))
        if not node.users:
            graph.erase_node(node)


def _replacing(node: torch.fx.Node, fields: tuple[Any, ...]) -> Callable[[torch.fx.Node], Any]:
    """For map_arg: `fields` in place of `node`, every other node kept."""
    return lambda n: fields if n is node else n
