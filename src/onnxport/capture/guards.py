"""Guards torch.export recorded on the input dims but did not enforce, and that pin them.

While tracing with dynamic dims, a Python branch on a size (`if h != 8:` with `h` derived
from an input's shape) records a guard in the ShapeEnv: the program is valid only where the
guard holds. torch.export then either narrows the dim's range, specialises it, or reports a
constraint violation. Some guards it does none of (torch 2.13: `Eq((w//2), 8)` from a
floor-divided size): the program claims the dim is dynamic but computes the branch taken at
the example for every size. ONNX has no assertion to carry the guard, so an exported graph
would silently compute the wrong branch.

Not every guard the ranges leave open matters. torch's own layout checks record many (a
spatial size `!= 1` or `== 1` for a contiguity decision, whether a reshape collapses dims
as a view); they choose strides, which ONNX does not have, and are skipped. Others are identities such as `Min(a, 2a) == a` that value
ranges cannot prove, and hold for nearly every size. `pinning_guards` keeps the guards
that *pin* a dim: those that fail for most sizes in the dims' ranges and for every size far
above them (sampled), which is what a specialisation is; a periodic condition such as
`size % 8 == 0` is a constraint, not a pin, and so is a relation between dims (two inputs'
batches being equal, linear in the sizes or true at every multiple of the example's sizes). A guard through several dims' floor divisions
or products (`Eq(nh * nw, 1)`: one window of a map, Swin's last stage at 224) is judged
for each dim with the others at the example's sizes. A guard on a dim whose example size is 0 or 1 is left to the
size-oblivious capture that recorded it, which computes the general path on purpose. A guard
that holds for a range of sizes around the example's (LongT5's `ceil(s / 128) == 1`, one
local-attention block, true for 1..128) keeps the dim dynamic within that range
(`UnenforcedGuard.span`); one that holds for fewer than 16 sizes makes it static. The capture reports them as what they are, a dim the model's code
does not let be dynamic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from torch.utils._sympy.value_ranges import bound_sympy


@dataclasses.dataclass(frozen=True)
class UnenforcedGuard:
    """A condition on input dims the program assumes; `where` is the model's source line."""

    condition: str
    where: str
    symbols: frozenset[str]
    # The sizes around the example's for which the guard holds, when there are more than the
    # example's (LongT5's `ceil(s / 128) == 1` holds for 1..128): (symbol, low, high).
    span: tuple[str, int, int] | None = None


_SAMPLES = 64
# Where torch records its layout decisions: contiguity (torch/_prims_common/__init__.py) and
# whether a reshape can collapse dims as a view or must copy (torch/_prims/__init__.py).
_LAYOUT_CHECKS = ("_prims_common/", "_prims/__init__.py")
_STATIC = torch.export.Dim.STATIC


def user_input_values(program: torch.export.ExportedProgram) -> list[tuple[str, Any]]:
    """(placeholder name, example value) of each user input, in order (no weights)."""
    user = torch.export.graph_signature.InputKind.USER_INPUT
    names = [s.arg.name for s in program.graph_signature.input_specs
             if s.kind is user and hasattr(s.arg, "name")]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    return [(name, nodes[name].meta.get("val") if name in nodes else None) for name in names]


def pinning_guards(program: torch.export.ExportedProgram) -> list[UnenforcedGuard]:
    """The guards on the user inputs' symbolic dims that their ranges do not imply and that
    hold for a few sizes only."""
    symbols: set[sympy.Symbol] = set()
    env = None
    for _, val in user_input_values(program):
        if not isinstance(val, torch.Tensor):
            continue
        for d in val.shape:
            if isinstance(d, torch.SymInt):
                symbols |= d.node.expr.free_symbols
                env = d.node.shape_env
    if env is None or not symbols:
        return []
    # (torch 2.13 renamed var_to_val, which warns on every read)
    examples = getattr(env, "backed_var_to_val", None)
    hints = examples if examples is not None else env.var_to_val
    found = []
    for guard in env.guards:
        expr = guard.expr
        free = expr.free_symbols
        if not free or not free <= symbols:
            continue
        try:
            bound = bound_sympy(expr, env.var_to_range)
        except Exception:  # noqa: BLE001 - an expression value ranges cannot bound
            continue
        if bound.lower == bound.upper == sympy.true:
            continue
        sloc = str(getattr(guard, "sloc", "") or "").strip("()")
        if any(where in sloc for where in _LAYOUT_CHECKS):
            # torch's own stride and contiguity decisions (S3D's pooled map being 1x1 decides
            # whether its output counts as contiguous): they choose strides, which an ONNX
            # graph does not have, never values.
            continue
        if len(free) > 1 and _is_relation(expr, hints):
            # A relation between dims, such as two inputs' batches being equal: it holds for
            # the inputs the model is meant for and pins neither.
            continue
        for symbol in sorted(free, key=str):
            # Each dim the guard reads, varied with the dims of the same example size (two
            # inputs' batches, the sides of a square image: what the model takes together),
            # the others at the example's sizes (a guard on the product of two window counts,
            # Swin's at one window, pins both sides; RAFT's on its two images' batches pins
            # neither).
            hint = hints.get(symbol)
            alone = expr.xreplace({
                s: (symbol if hints.get(s) == hint else sympy.Integer(int(hints[s])))
                for s in free if s != symbol and hints.get(s) is not None})
            if alone.free_symbols != {symbol} or not _pins(alone, env.var_to_range):
                continue
            if hint is not None and int(hint) in (0, 1):
                # The example's size is 0 or 1: a capture treating such sizes like any other
                # (size-oblivious, as torch.onnx captures) leaves their guards unenforced by
                # design, and the program computes the general path.
                continue
            span = _holding_span(alone, symbol, int(hint)) if hint is not None else None
            found.append(UnenforcedGuard(str(expr), sloc, frozenset({str(symbol)}),
                                         (str(symbol), *span) if span else None))
    return found


@contextlib.contextmanager
def tolerant_constraint_solver() -> Iterator[None]:
    """Within this context, a guard torch.export's constraint solver cannot reduce is left as
    it is instead of aborting the capture.

    After tracing, torch.export reduces the guards on each dynamic dim with sympy to word its
    suggested fixes, and sympy gives up on some floor divisions of a dim with a
    NotImplementedError (timm's CPU-bone records `Eq(-6*x + 192*((x/16)//2), 0)`, torchvision's
    S3D `Eq((x/16)//2 - 7, 0)`), which ends the export whatever the guard says. The solver
    pops a dim's guards before reducing them, so running it again goes on with the next dim.
    The guard stays in the program's ShapeEnv, where `pinning_guards` judges it like any other,
    and a UserWarning names the dim and the guards (a periodic one, such as CPU-bone's width
    being a multiple of 32, keeps the dim dynamic: the graph holds at those sizes only).
    """
    from torch.fx.experimental.symbolic_shapes import DimConstraints as solver

    original = solver.solve

    def solve(self: Any) -> None:
        for _ in range(len(getattr(self, "_symbols_with_equalities", ())) + 1):
            pending = dict(getattr(self, "_univariate_inequalities", {}))
            try:
                return original(self)
            except NotImplementedError:
                left = getattr(self, "_univariate_inequalities", {})
                for symbol in [s for s in pending if s not in left]:
                    _warn_unreduced(self, symbol, pending[symbol])
        return original(self)

    solver.solve = solve
    try:
        yield
    finally:
        solver.solve = original


def _warn_unreduced(constraints: Any, symbol: Any, guards: Any) -> None:
    """Say which input dim's guards torch could not reduce: the graph keeps the dim dynamic
    and holds where they hold, which may be fewer sizes than the dim allows."""
    import warnings

    printer = getattr(constraints, "_dcp", None)

    def text(expr: Any) -> str:
        try:
            return printer.doprint(expr) if printer is not None else str(expr)
        except Exception:  # noqa: BLE001 - a guard the printer cannot word: sympy's own form
            return str(expr)

    dim = text(symbol)
    warnings.warn(
        f"torch.export recorded guards on the dynamic input dim {dim} that its constraint "
        f"solver cannot reduce ({'; '.join(sorted(text(g) for g in guards))}); the dim stays "
        f"dynamic, and the graph holds for the sizes where these guards hold (check the "
        f"sizes you will run with, or export at one of them)", UserWarning, stacklevel=2)


_SPAN_STEPS = 1 << 14
_SPAN_MIN = 16


def _holding_span(expr: sympy.Basic, symbol: sympy.Symbol, hint: int) -> tuple[int, int] | None:
    """(low, high): the sizes from 2 that hold `expr` around `hint`, scanned one by one (at
    most 2**14 above it), or None when fewer than 16 do (a pin)."""
    def holds(value: int) -> bool:
        try:
            return bool(expr.xreplace({symbol: sympy.Integer(value)}) is sympy.true)
        except ArithmeticError:
            # A size where the guard's own arithmetic fails (Swin's window, a floor division
            # of the size, is 0 below 32 pixels, and a remainder by it divides by zero).
            return False

    if not holds(hint):
        return None
    low = hint
    while low > 2 and holds(low - 1):
        low -= 1
    high = hint
    while high < hint + _SPAN_STEPS and holds(high + 1):
        high += 1
    # A few sizes (`w // 2 == 8` holds for 16 and 17) are a pin in practice: make it static.
    return (low, high) if high - low + 1 >= _SPAN_MIN else None


def _pins(expr: sympy.Basic, ranges: dict[sympy.Symbol, object]) -> bool:
    """Whether `expr` holds only for a few sizes: it fails for most sizes near the ranges'
    low ends and for every size sampled far above them. A periodic condition (`size % 8 ==
    0`, RAFT's, enforced by its own check) holds far away too and is not a pin."""
    rng = random.Random(0)
    symbols = sorted(expr.free_symbols, key=str)
    bounds = {}
    for symbol in symbols:
        r = ranges.get(symbol)
        low = max(_finite(getattr(r, "lower", 2), 2), 2)
        high = max(low, _finite(getattr(r, "upper", None), low + 1_000_000))
        bounds[symbol] = (low, high)

    def holds(far: bool) -> int | None:
        count = 0
        for _ in range(_SAMPLES):
            values = {}
            for symbol, (low, high) in bounds.items():
                top = min(high, low + (1_000_000 if far else 1024))
                start = low + (top - low) // 2 if far else low
                values[symbol] = sympy.Integer(rng.randint(start, top))
            try:
                value = expr.xreplace(values)
            except Exception:  # noqa: BLE001 - an expression that cannot be evaluated
                return None
            if value not in (sympy.true, sympy.false):
                return None
            count += value is sympy.true
        return count

    near = holds(far=False)
    if near is None or near * 2 >= _SAMPLES:
        return False
    return holds(far=True) == 0


def _is_relation(expr: sympy.Basic, hints: dict[Any, Any]) -> bool:
    """Whether a guard on several dims relates them rather than constrains each: linear in
    the sizes (`Eq(s0, s1)`, past + new tokens == the mask's length), or true with every size
    a multiple k of the example's (OWL-ViT's text queries per image, `text // images == 2`;
    RAFT's two images' batches). A guard through floor divisions or products of sizes that
    fails so (`Eq(rows * columns, 1)`, one window of a map) is judged for each dim."""
    symbols = sorted(expr.free_symbols, key=str)
    if isinstance(expr, sympy.core.relational.Relational):
        difference = expr.lhs - expr.rhs
        if not difference.atoms(sympy.Function):
            try:
                if sympy.Poly(difference, *symbols).total_degree() <= 1:
                    return True
            except sympy.PolynomialError:
                pass
    if any(hints.get(symbol) is None for symbol in symbols):
        return False
    for k in (*range(2, 18), 31, 64, 127, 1000):
        try:
            scaled = expr.xreplace({s: sympy.Integer(k * int(hints[s])) for s in symbols})
        except ArithmeticError:
            return False
        if scaled is not sympy.true:
            return False
    return True


def _finite(value: object, default: int) -> int:
    if getattr(value, "is_finite", True) is False:
        return default
    try:
        number = int(value)  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - sympy's infinities raise several kinds
        return default
    return number if abs(number) < 1 << 40 else default


def pinned_axes(program: torch.export.ExportedProgram, guards: list[UnenforcedGuard]
                ) -> dict[int, dict[int, str]]:
    """{user input position: {axis: symbol}} for the input dims the guards read."""
    wanted = set().union(*(g.symbols for g in guards)) if guards else set()
    axes: dict[int, dict[int, str]] = {}
    for position, (_, val) in enumerate(user_input_values(program)):
        if not isinstance(val, torch.Tensor):
            continue
        for axis, d in enumerate(val.shape):
            if isinstance(d, torch.SymInt) and {str(s) for s in d.node.expr.free_symbols} & wanted:
                axes.setdefault(position, {})[axis] = str(d.node.expr)
    return axes


def with_ranged_axes(module: torch.nn.Module, args: tuple[Any, ...],
                     kwargs: dict[str, Any] | None, spec: Any,
                     ranged: dict[int, dict[int, tuple[int, int]]]) -> Any:
    """`spec` (torch.export's form) with the given axes of the given flat inputs kept
    dynamic in [low, high] only (a named Dim keeps its name, and one Dim shared by several
    axes stays shared)."""
    from torch.export.dynamic_shapes import _combine_args, _tree_map_with_path

    flat = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    position = {id(x): i for i, x in enumerate(flat)}
    combined: Any = _combine_args(module, args, kwargs)
    if isinstance(spec, (tuple, list)):
        combined = type(spec)(combined.values())
    narrowed: dict[str, Any] = {}

    def narrow(d: Any, low: int, high: int) -> Any:
        name = getattr(d, "__name__", None)
        if name is None or not hasattr(d, "min"):  # a hint (AUTO, DYNAMIC) or None
            return torch.export.Dim.DYNAMIC(min=low, max=high)
        if name not in narrowed:
            lo = max(low, int(d.min)) if isinstance(d.min, int) else low
            hi = min(high, int(d.max)) if isinstance(d.max, int) else high
            narrowed[name] = torch.export.Dim(name, min=lo, max=hi)
        return narrowed[name]

    def fix(path: Any, tensor: Any, axes: Any) -> Any:
        spans = ranged.get(position.get(id(tensor), -1), {})
        if not spans or axes is None:
            return axes
        if isinstance(axes, dict):
            return {a: (narrow(d, *spans[a]) if a in spans else d) for a, d in axes.items()}
        if isinstance(axes, (list, tuple)):
            return type(axes)(narrow(d, *spans[a]) if a in spans else d
                              for a, d in enumerate(axes))
        return axes

    return _tree_map_with_path(fix, combined, spec)


def with_static_axes(module: torch.nn.Module, args: tuple[Any, ...],
                     kwargs: dict[str, Any] | None, spec: Any,
                     static: dict[int, dict[int, str]]) -> Any:
    """`spec` (torch.export's form) with the given axes of the given flat inputs static."""
    from torch.export.dynamic_shapes import _combine_args, _tree_map_with_path

    flat = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    position = {id(x): i for i, x in enumerate(flat)}
    combined: Any = _combine_args(module, args, kwargs)
    if isinstance(spec, (tuple, list)):
        combined = type(spec)(combined.values())

    def fix(path: Any, tensor: Any, axes: Any) -> Any:
        axes_static = static.get(position.get(id(tensor), -1), {})
        if not axes_static or axes is None:
            return axes
        if isinstance(axes, dict):
            return {a: (_STATIC if a in axes_static else d) for a, d in axes.items()}
        if isinstance(axes, (list, tuple)):
            return type(axes)(_STATIC if a in axes_static else d for a, d in enumerate(axes))
        return axes

    return _tree_map_with_path(fix, combined, spec)


def narrowed_axes(program: torch.export.ExportedProgram, module: torch.nn.Module,
                  args: tuple[Any, ...], kwargs: dict[str, Any] | None, spec: Any
                  ) -> list[tuple[int, int, int, int, str]]:
    """(flat input, axis, low, high, where) of each input dim `spec` asks to be dynamic whose largest
    size torch.export capped below the spec's while capturing: the model's code assumes it (a
    position table of that many rows; a size the code divides into one window, specialised to
    1; a branch on the size); `where` the source lines of the guards that cap it. The graph
    still names the dim; above the cap the model's code may take another branch, or the graph
    fail in the runtime. (Raised lower bounds are not reported: sums of
    dims, such as past + new tokens, start above 2 without any guard.)"""
    from torch.export.dynamic_shapes import _combine_args, _tree_map_with_path

    flat = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    position = {id(x): i for i, x in enumerate(flat)}
    combined: Any = _combine_args(module, args, kwargs)
    if isinstance(spec, (tuple, list)):
        combined = type(spec)(combined.values())
    bounds: dict[tuple[int, int], tuple[int, int | None]] = {}

    def record(path: Any, tensor: Any, axes: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or axes is None:
            return axes
        items = axes.items() if isinstance(axes, dict) else (
            enumerate(axes) if isinstance(axes, (list, tuple)) else ())
        for axis, d in items:
            if d is None or d is _STATIC or isinstance(d, int):
                continue
            low = getattr(d, "min", None)
            high = getattr(d, "max", None)
            bounds[(position.get(id(tensor), -1), axis)] = (
                low if isinstance(low, int) else 0,
                high if isinstance(high, int) and high < 1 << 40 else None)
        return axes

    _tree_map_with_path(record, combined, spec)
    found = []
    ranges = program.range_constraints
    for index, (_, val) in enumerate(user_input_values(program)):
        if not isinstance(val, torch.Tensor):
            continue
        for axis, d in enumerate(val.shape):
            if (index, axis) not in bounds or not isinstance(d, torch.SymInt):
                continue
            expr = d.node.expr
            if not isinstance(expr, sympy.Symbol) or expr not in ranges:
                continue
            low, high = _finite(ranges[expr].lower, 0), _finite(ranges[expr].upper, -1)
            asked_high = bounds[(index, axis)][1]
            if high >= 0 and (asked_high is None or high < asked_high):
                found.append((index, axis, low, high, _capped_at(d, expr, high)))
    return found


def _capped_at(size: Any, symbol: sympy.Symbol, high: int) -> str:
    """The source lines of the guards that fail just above `high` (`s < 64`: diffusers'
    `if hidden_states.shape[0] >= 64`), or ""."""
    lines = []
    for guard in size.node.shape_env.guards:
        if guard.expr.free_symbols != {symbol}:
            continue
        try:
            above = guard.expr.xreplace({symbol: sympy.Integer(high + 1)})
        except ArithmeticError:
            continue
        where = str(getattr(guard, "sloc", "") or "").strip("()")
        if above is sympy.false and where and where not in lines:
            lines.append(where)
    return "; ".join(lines)
