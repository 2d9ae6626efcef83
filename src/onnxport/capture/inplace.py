"""In-place ATen ops that can be translated as their functional variant without a re-trace.

torch.export's graph keeps in-place ops (`add_`, `relu_`, `copy_`, `masked_fill_`, ...).
Functionalizing the whole program (`run_decompositions`) costs more than the capture, so the
translator handles the safe case itself: the mutated tensor is an intermediate that no view
shares, so translating `add_(x, y)` as `add(x, y)` and reading `x` as the result afterwards
is exact. Anything else (mutated inputs or buffers, views) still goes through
`run_decompositions`.
"""

from __future__ import annotations

from typing import Any

import torch


def functional_variant(target: Any) -> torch._ops.OpOverload | None:
    """`aten.add.Tensor` for `aten.add_.Tensor` (and `aten.copy` for `copy_`), else None."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    schema = target._schema
    if not schema.is_mutable or not schema.arguments:
        return None
    first = schema.arguments[0].alias_info
    if first is None or not first.is_write:
        return None
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments[1:]):
        return None
    base = schema.name.split("::")[-1]
    if not base.endswith("_") or base.startswith("_"):
        return None
    packet = getattr(getattr(torch.ops, target.namespace), base[:-1], None)
    if packet is None:
        return None
    return getattr(packet, target._overloadname, None)


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in target._schema.returns)


def _head(node: torch.fx.Node) -> Any:
    """The tensor a chain of in-place ops mutates."""
    while isinstance(node, torch.fx.Node) and functional_variant(node.target) is not None:
        node = node.args[0]  # type: ignore[assignment]
    return node


def is_safe_inplace(node: torch.fx.Node) -> bool:
    """Whether `node` mutates an intermediate tensor that no view aliases."""
    if functional_variant(node.target) is None:
        return False
    head = _head(node)
    if not isinstance(head, torch.fx.Node) or head.op != "call_function" or _is_view(head):
        return False
    group = [head]
    seen = {head}
    while group:
        member = group.pop()
        last = not any(functional_variant(u.target) is not None and u.args[0] is member
                       for u in member.users)
        for user in member.users:
            if _is_view(user) and not last:
                # (a view of the last write in the chain sees no later write: safe)
                return False
            if functional_variant(user.target) is not None and user.args[0] is member \
                    and user not in seen:
                seen.add(user)
                group.append(user)
    return True


def effective_target(node: torch.fx.Node) -> Any:
    """What the translator dispatches on: the functional variant of a safe in-place op
    (`detach_` always: it changes no data, views of the tensor included)."""
    if node.target is torch.ops.aten.detach_.default:
        return torch.ops.aten.detach.default
    if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable \
            and is_safe_inplace(node):
        return functional_variant(node.target)
    return node.target
