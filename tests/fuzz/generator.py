"""Small random nn.Modules from a grammar of ops, deterministic per seed.

`generate(seed)` returns a `Case`: a `FuzzModule` (an interpreter of a list of steps, so node
names follow its submodules: `/linear3/Gemm`), example inputs, and a readable listing of the
program (`case.source`) for repros. The grammar covers elementwise ops, matmul/linear, conv,
reductions, reshape/transpose/cat/slice/index, softmax/layernorm, comparisons/where, in-place
ops on intermediates, Python scalars (also from shapes), buffers, dtype casts; shapes with
size-1 and empty dims; float32, float16, int64 and bool values; and nested tuple/list/dict
outputs. Dim 0 of every input is the batch (made dynamic by the dynamic variants).

Seeds from WIDE_FROM on draw from a wider grammar (seeds below keep the cases they always
had, so old REGRESSIONS/FIXED seeds reproduce): pooling (max/avg 1d/2d/3d with kernel, stride,
padding, dilation, ceil_mode, count_include_pad, divisor_override, indices; adaptive avg/max),
parametrised unary ops, cumsum/flip/roll/pad, conv with dilation and groups, inputs up to
rank 5; and dynamic-shape cases past "dim 0 dynamic": ops that fold the batch into another
dim or guard on it (torch.export then suggests fixes, or must keep a guard as a run-time
assert), a dim the model specialises, several dynamic dims (`Case.dynamic`), and the dim
given as `Dim.DYNAMIC`, a named `Dim` or a string (`Case.dim_style`).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch
from torch import nn

F32, F16, I64, BOOL = torch.float32, torch.float16, torch.int64, torch.bool
FLOATS = (F32, F16)
WIDE_FROM = 10000  # the first seed of the wider grammar
DIM_STYLES = ("DYNAMIC", "named", "string")


@dataclasses.dataclass
class Val:
    shape: list[int]
    dtype: torch.dtype
    root: int  # the value this one is a view of (itself if it owns its memory)
    kind: str = "tmp"  # "input", "buffer" or "tmp" (an intermediate)


@dataclasses.dataclass
class Case:
    seed: int
    module: nn.Module
    args: tuple[torch.Tensor, ...]
    source: str
    ops: list[str]
    # The dynamic variants' spec: per input {axis: dim name}, and how the dims are given:
    # "DYNAMIC" (Dim.DYNAMIC), "named" (one Dim per name) or "string" (the name).
    dynamic: list[dict[int, str]] = dataclasses.field(default_factory=list)
    dim_style: str = "DYNAMIC"

    def inputs_with_batch(self, batch: int) -> tuple[torch.Tensor, ...]:
        """The inputs with dim 0 resized to `batch` (fresh data, same seed)."""
        g = torch.Generator().manual_seed(self.seed * 7919 + batch)
        return tuple(_random_tensor([batch, *a.shape[1:]], a.dtype, g) for a in self.args)


def _random_tensor(shape: list[int], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == BOOL:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == I64:
        return torch.randint(-4, 5, shape, generator=g)
    return torch.randn(shape, generator=g).to(dtype)


class FuzzModule(nn.Module):
    """Runs `steps`: each (result index, op name, argument value indices, parameters)."""

    def __init__(self, steps: list[tuple[str, list[int], dict[str, Any]]], n_inputs: int,
                 outputs: Any) -> None:
        super().__init__()
        self.steps = steps
        self.n_inputs = n_inputs
        self.outputs = outputs

    def forward(self, x0: torch.Tensor, x1: torch.Tensor | None = None) -> Any:
        values: list[Any] = [x0] if x1 is None else [x0, x1]
        for op, refs, params in self.steps:
            values.append(_OPS[op](self, [values[i] for i in refs], **params))
        return _structure(self.outputs, values)


def _structure(spec: Any, values: list[Any]) -> Any:
    kind, body = spec
    if kind == "v":
        return values[body]
    if kind == "tuple":
        return tuple(_structure(s, values) for s in body)
    if kind == "list":
        return [_structure(s, values) for s in body]
    return {k: _structure(s, values) for k, s in body}


def _sub(m: nn.Module, name: str) -> Any:
    return getattr(m, name)


# Every op: (module, argument values, **params) -> value.
_OPS: dict[str, Any] = {
    "relu": lambda m, a: torch.relu(a[0]),
    "sigmoid": lambda m, a: torch.sigmoid(a[0]),
    "tanh": lambda m, a: torch.tanh(a[0]),
    "gelu": lambda m, a: nn.functional.gelu(a[0]),
    "exp": lambda m, a: torch.exp(a[0]),
    "sin": lambda m, a: torch.sin(a[0]),
    "sqrt_abs": lambda m, a: torch.sqrt(torch.abs(a[0])),
    "abs": lambda m, a: torch.abs(a[0]),
    "neg": lambda m, a: -a[0],
    "not": lambda m, a: torch.logical_not(a[0]),
    "add": lambda m, a: a[0] + a[1],
    "sub": lambda m, a: a[0] - a[1],
    "mul": lambda m, a: a[0] * a[1],
    "div": lambda m, a: a[0] / (a[1].abs() + 1),
    "maximum": lambda m, a: torch.maximum(a[0], a[1]),
    "minimum": lambda m, a: torch.minimum(a[0], a[1]),
    "and": lambda m, a: a[0] & a[1],
    "scalar_add": lambda m, a, s: a[0] + s,
    "scalar_mul": lambda m, a, s: a[0] * s,
    "scalar_rsub": lambda m, a, s: s - a[0],
    "scalar_pow": lambda m, a, s: a[0] ** s,
    "add_last_dim": lambda m, a: a[0] + a[0].shape[-1],
    "add_batch": lambda m, a: a[0] + a[0].shape[0],
    "linear": lambda m, a, mod: _sub(m, mod)(a[0]),
    "matmul_self": lambda m, a: a[0] @ a[0].transpose(-1, -2),
    "conv": lambda m, a, mod: _sub(m, mod)(a[0]),
    "sum": lambda m, a, dim, keepdim: a[0].sum(dim, keepdim=keepdim),
    "mean": lambda m, a, dim, keepdim: a[0].mean(dim, keepdim=keepdim),
    "amax": lambda m, a, dim, keepdim: a[0].amax(dim, keepdim=keepdim),
    "amin": lambda m, a, dim, keepdim: a[0].amin(dim, keepdim=keepdim),
    "argmax": lambda m, a, dim, keepdim: a[0].argmax(dim, keepdim=keepdim),
    "any": lambda m, a, dim, keepdim: a[0].any(dim, keepdim=keepdim),
    "flatten": lambda m, a: a[0].flatten(1),
    "reshape_batch": lambda m, a: a[0].reshape(a[0].shape[0], -1),
    "unsqueeze": lambda m, a, dim: a[0].unsqueeze(dim),
    "squeeze": lambda m, a, dim: a[0].squeeze(dim),
    "transpose": lambda m, a, d0, d1: a[0].transpose(d0, d1),
    "permute": lambda m, a, perm: a[0].permute(*perm),
    "cat": lambda m, a, dim: torch.cat([a[0], a[1]], dim),
    "slice_from": lambda m, a, dim, start: a[0].narrow(dim, start, a[0].shape[dim] - start),
    "slice_step": lambda m, a: a[0][..., ::2],
    "select": lambda m, a, dim, index: a[0].select(dim, index),
    "index_select": lambda m, a, dim, buf: a[0].index_select(dim, _sub(m, buf)),
    "softmax": lambda m, a, dim: torch.softmax(a[0], dim),
    "log_softmax": lambda m, a, dim: torch.log_softmax(a[0], dim),
    "layernorm": lambda m, a, mod: _sub(m, mod)(a[0]),
    "gt_scalar": lambda m, a, s: a[0] > s,
    "lt": lambda m, a: a[0] < a[1],
    "eq_scalar": lambda m, a, s: a[0] == s,
    "where": lambda m, a: torch.where(a[0], a[1], a[2]),
    "masked_fill": lambda m, a, s: a[1].masked_fill(a[0], s),
    "add_buffer": lambda m, a, buf: a[0] + _sub(m, buf),
    "to_float": lambda m, a: a[0].float(),
    "to_half": lambda m, a: a[0].half(),
    "to_long": lambda m, a: a[0].long(),
    "to_bool": lambda m, a: a[0].bool(),
    "iadd": lambda m, a, s: a[0].add_(s),
    "imul": lambda m, a, s: a[0].mul_(s),
    "irelu": lambda m, a: a[0].relu_(),
    "iclamp": lambda m, a, lo, hi: a[0].clamp_(lo, hi),
    "isetitem": lambda m, a, s: _setitem(a[0], s),
    "imasked_fill": lambda m, a, s: a[1].masked_fill_(a[0], s),
    # the wider grammar (seeds >= WIDE_FROM)
    "pool": lambda m, a, fn, kw: _pool(fn, a[0], kw),
    "leaky_relu": lambda m, a, slope: nn.functional.leaky_relu(a[0], slope),
    "elu": lambda m, a, alpha: nn.functional.elu(a[0], alpha),
    "hardtanh": lambda m, a, lo, hi: nn.functional.hardtanh(a[0], lo, hi),
    "clamp": lambda m, a, lo, hi: a[0].clamp(lo, hi),
    "cumsum": lambda m, a, dim: a[0].cumsum(dim),
    "flip": lambda m, a, dims: a[0].flip(dims),
    "roll": lambda m, a, shift, dim: a[0].roll(shift, dim),
    "pad": lambda m, a, pads, mode: nn.functional.pad(a[0], pads, mode=mode),
    "fold_pairs": lambda m, a: a[0].reshape(-1, 2, *a[0].shape[1:]),
    "fold_merge": lambda m, a: a[0].reshape(-1, *a[0].shape[2:]),
    "unflatten_batch": lambda m, a: a[0].unflatten(0, (2, -1)),
    "fold_flat": lambda m, a, width: a[0].reshape(-1, width),
    "select_batch": lambda m, a, index: a[0][index],
    "batch_branch": lambda m, a, size: a[0] * 2 if a[0].shape[0] != size else a[0] - 1,
    "specialize": lambda m, a, buf: a[0] + _sub(m, buf),
}


def _pool(fn: str, x: torch.Tensor, kw: dict[str, Any]) -> Any:
    out = getattr(nn.functional, fn)(x, **kw)
    return out[0] + out[1].to(out[0].dtype) if isinstance(out, tuple) else out


def _setitem(t: torch.Tensor, s: Any) -> torch.Tensor:
    t[..., 0] = s
    return t


class _Builder:
    def __init__(self, seed: int) -> None:
        self.wide = seed >= WIDE_FROM
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.vals: list[Val] = []
        self.steps: list[tuple[str, list[int], dict[str, Any]]] = []
        self.lines: list[str] = []
        self.subs: dict[str, nn.Module] = {}
        self.buffers: dict[str, torch.Tensor] = {}

    # -- helpers ---------------------------------------------------------------------------
    def pick(self, pred: Any = lambda v: True, prefer_recent: bool = True) -> int | None:
        found = [i for i, v in enumerate(self.vals) if pred(v)]
        if not found:
            return None
        if prefer_recent and self.rng.random() < 0.6:
            return found[-1]
        return self.rng.choice(found)

    def scalar(self, dtype: torch.dtype) -> Any:
        if dtype in (I64, BOOL):
            return self.rng.choice([-2, 0, 1, 3])
        return self.rng.choice([0.5, -1.25, 2.0, 3, 0.0])

    def add(self, op: str, refs: list[int], shape: list[int], dtype: torch.dtype, *,
            view_of: int | None = None, **params: Any) -> int:
        index = len(self.vals)
        root = self.vals[view_of].root if view_of is not None else index
        self.vals.append(Val(list(shape), dtype, root))
        self.steps.append((op, refs, params))
        args = ", ".join([f"v{r}" for r in refs] + [f"{k}={v!r}" for k, v in params.items()])
        self.lines.append(f"v{index} = {op}({args})  # {list(shape)} {str(dtype)[6:]}")
        return index

    def new_sub(self, prefix: str, module: nn.Module) -> str:
        name = f"{prefix}{len(self.subs)}"
        self.subs[name] = module
        return name

    def new_buffer(self, tensor: torch.Tensor) -> str:
        name = f"buf{len(self.buffers)}"
        self.buffers[name] = tensor
        return name

    # -- the grammar -------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.rng
        families = ["unary", "binary", "scalar", "linear", "matmul", "conv", "reduce", "layout",
                    "cat", "slice", "index", "softmax", "layernorm", "compare", "where", "buffer",
                    "cast", "inplace", "shape_scalar"]
        weights = [8, 7, 6, 5, 2, 3, 5, 7, 3, 4, 3, 3, 2, 4, 3, 3, 3, 6, 2]
        if self.wide:
            families += ["pool", "param_unary", "shift", "fold", "batch_guard"]
            weights += [12, 5, 4, 4, 3]
        family = rng.choices(families, weights=weights)[0]
        getattr(self, f"_{family}")()

    def _unary(self) -> None:
        i = self.pick()
        assert i is not None
        v = self.vals[i]
        if v.dtype in FLOATS:
            op = self.rng.choice(["relu", "sigmoid", "tanh", "gelu", "exp", "sin", "sqrt_abs",
                                  "abs", "neg"])
        elif v.dtype == I64:
            op = self.rng.choice(["abs", "neg"])
        else:
            op = "not"
        self.add(op, [i], v.shape, v.dtype)

    def _binary(self) -> None:
        i = self.pick()
        assert i is not None
        v = self.vals[i]
        same = [j for j, w in enumerate(self.vals) if w.dtype == v.dtype and w.shape == v.shape]
        j = self.rng.choice(same)
        if v.dtype == BOOL:
            self.add("and", [i, j], v.shape, v.dtype)
            return
        ops = ["add", "sub", "mul", "maximum", "minimum"] + (["div"] if v.dtype in FLOATS else [])
        self.add(self.rng.choice(ops), [i, j], v.shape, v.dtype)

    def _scalar(self) -> None:
        i = self.pick(lambda v: v.dtype != BOOL)
        if i is None:
            return self._cast()
        v = self.vals[i]
        op = self.rng.choice(["scalar_add", "scalar_mul", "scalar_rsub", "scalar_pow"])
        s = self.scalar(v.dtype) if op != "scalar_pow" else self.rng.choice([2, 3])
        dtype = v.dtype
        if isinstance(s, float) and dtype == I64:
            dtype = F32
        self.add(op, [i], v.shape, dtype, s=s)
        return None

    def _shape_scalar(self) -> None:
        i = self.pick(lambda v: v.dtype in FLOATS + (I64,) and len(v.shape) >= 1)
        if i is None:
            return self._unary()
        v = self.vals[i]
        op = self.rng.choice(["add_last_dim", "add_batch"])
        self.add(op, [i], v.shape, v.dtype)
        return None

    def _linear(self) -> None:
        i = self.pick(lambda v: v.dtype in FLOATS and len(v.shape) >= 1)
        if i is None:
            return self._cast()
        v = self.vals[i]
        out = self.rng.choice([1, 3, 4])
        lin = nn.Linear(v.shape[-1], out, bias=self.rng.random() < 0.8).to(v.dtype)
        name = self.new_sub("linear", lin)
        self.add("linear", [i], [*v.shape[:-1], out], v.dtype, mod=name)
        return None

    def _matmul(self) -> None:
        i = self.pick(lambda v: v.dtype == F32 and len(v.shape) >= 2)
        if i is None:
            return self._linear()
        v = self.vals[i]
        self.add("matmul_self", [i], [*v.shape[:-1], v.shape[-2]], v.dtype)
        return None

    def _conv(self) -> None:
        i = self.pick(lambda v: v.dtype == F32 and len(v.shape) in (3, 4) and v.shape[1] > 0
                      and all(s >= 3 for s in v.shape[2:]))
        if i is None:
            return self._linear()
        v = self.vals[i]
        rank = len(v.shape) - 2
        k = self.rng.choice([1, 2, 3])
        stride = self.rng.choice([1, 1, 2])
        pad = self.rng.choice([0, 1])
        out = self.rng.choice([1, 2, 4])
        dilation, groups = 1, 1
        if self.wide:
            dilation = self.rng.choice([1, 1, 2])
            if dilation * (k - 1) + 1 > min(v.shape[2:]) + 2 * pad:
                dilation = 1
            if v.shape[1] % 2 == 0 and self.rng.random() < 0.3:
                groups, out = 2, 2 * self.rng.choice([1, 2])
        cls = nn.Conv1d if rank == 1 else nn.Conv2d
        conv = cls(v.shape[1], out, k, stride=stride, padding=pad, dilation=dilation,
                   groups=groups)
        name = self.new_sub("conv", conv)
        spatial = [(s + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for s in v.shape[2:]]
        self.add("conv", [i], [v.shape[0], out, *spatial], v.dtype, mod=name)
        return None

    def _reduce(self) -> None:
        i = self.pick(lambda v: len(v.shape) >= 1)
        assert i is not None
        v = self.vals[i]
        dim = self.rng.randrange(-len(v.shape), len(v.shape))
        keepdim = self.rng.random() < 0.4
        if v.dtype == BOOL:
            op, dtype = "any", BOOL
        elif self.rng.random() < 0.25:
            op, dtype = "argmax", I64
        else:
            op = self.rng.choice(["sum", "amax", "amin"] + (["mean"] if v.dtype in FLOATS else []))
            dtype = v.dtype
        shape = list(v.shape)
        if keepdim:
            shape[dim] = 1
        else:
            del shape[dim]
        self.add(op, [i], shape, dtype, dim=dim, keepdim=keepdim)

    def _layout(self) -> None:
        i = self.pick()
        assert i is not None
        v = self.vals[i]
        r = len(v.shape)
        choices = ["unsqueeze"]
        if r >= 2:
            choices += ["flatten", "reshape_batch", "transpose", "permute"]
        if 1 in v.shape[1:]:
            choices.append("squeeze")
        op = self.rng.choice(choices)
        if op == "unsqueeze":
            dim = self.rng.randrange(1, r + 1) if r else 0
            shape = list(v.shape)
            shape.insert(dim, 1)
            self.add(op, [i], shape, v.dtype, view_of=i, dim=dim)
        elif op in ("flatten", "reshape_batch"):
            rest = 1
            for s in v.shape[1:]:
                rest *= s
            if op == "reshape_batch" and (rest == 0 or v.shape[0] == 0):
                op = "flatten"
            self.add(op, [i], [v.shape[0], rest], v.dtype, view_of=i)
        elif op == "transpose":
            d0, d1 = self.rng.sample(range(r), 2)
            shape = list(v.shape)
            shape[d0], shape[d1] = shape[d1], shape[d0]
            self.add(op, [i], shape, v.dtype, view_of=i, d0=d0, d1=d1)
        elif op == "permute":
            perm = [0] + self.rng.sample(range(1, r), r - 1)
            self.add(op, [i], [v.shape[p] for p in perm], v.dtype, view_of=i, perm=perm)
        else:
            dim = 1 + v.shape[1:].index(1)
            self.add(op, [i], v.shape[:dim] + v.shape[dim + 1:], v.dtype, view_of=i, dim=dim)

    def _cat(self) -> None:
        i = self.pick(lambda v: len(v.shape) >= 1)
        assert i is not None
        v = self.vals[i]
        same = [j for j, w in enumerate(self.vals) if w.dtype == v.dtype and w.shape == v.shape]
        j = self.rng.choice(same)
        dim = self.rng.randrange(len(v.shape))
        shape = list(v.shape)
        shape[dim] *= 2
        self.add("cat", [i, j], shape, v.dtype, dim=dim)

    def _slice(self) -> None:
        i = self.pick(lambda v: len(v.shape) >= 2)
        if i is None:
            return self._layout()
        v = self.vals[i]
        if self.rng.random() < 0.4:
            shape = list(v.shape)
            shape[-1] = (shape[-1] + 1) // 2
            self.add("slice_step", [i], shape, v.dtype, view_of=i)
            return None
        dim = self.rng.randrange(1, len(v.shape))
        start = min(self.rng.choice([0, 1, 2]), v.shape[dim])
        shape = list(v.shape)
        shape[dim] -= start
        self.add("slice_from", [i], shape, v.dtype, view_of=i, dim=dim, start=start)
        return None

    def _index(self) -> None:
        i = self.pick(lambda v: len(v.shape) >= 2 and any(s > 0 for s in v.shape[1:]))
        if i is None:
            return self._slice()
        v = self.vals[i]
        dim = self.rng.choice([d for d in range(1, len(v.shape)) if v.shape[d] > 0])
        if self.rng.random() < 0.5:
            index = self.rng.randrange(-v.shape[dim], v.shape[dim])
            self.add("select", [i], v.shape[:dim] + v.shape[dim + 1:], v.dtype, view_of=i,
                     dim=dim, index=index)
        else:
            n = self.rng.choice([1, 2, 3])
            buf = self.new_buffer(torch.randint(0, v.shape[dim], (n,), generator=self.gen))
            shape = list(v.shape)
            shape[dim] = n
            self.add("index_select", [i], shape, v.dtype, dim=dim, buf=buf)
        return None

    def _softmax(self) -> None:
        i = self.pick(lambda v: v.dtype in FLOATS and len(v.shape) >= 1)
        if i is None:
            return self._cast()
        v = self.vals[i]
        dim = self.rng.randrange(-len(v.shape), len(v.shape))
        self.add(self.rng.choice(["softmax", "log_softmax"]), [i], v.shape, v.dtype, dim=dim)
        return None

    def _layernorm(self) -> None:
        i = self.pick(lambda v: v.dtype == F32 and len(v.shape) >= 1)
        if i is None:
            return self._softmax()
        v = self.vals[i]
        ln = nn.LayerNorm(v.shape[-1], elementwise_affine=self.rng.random() < 0.7)
        if ln.elementwise_affine:
            with torch.no_grad():
                ln.weight.normal_(generator=self.gen)
                ln.bias.normal_(generator=self.gen)
        name = self.new_sub("norm", ln)
        self.add("layernorm", [i], v.shape, v.dtype, mod=name)
        return None

    def _compare(self) -> None:
        i = self.pick(lambda v: v.dtype != BOOL)
        if i is None:
            return self._unary()
        v = self.vals[i]
        same = [j for j, w in enumerate(self.vals) if w.dtype == v.dtype and w.shape == v.shape
                and j != i]
        if same and self.rng.random() < 0.4:
            self.add("lt", [i, self.rng.choice(same)], v.shape, BOOL)
        elif v.dtype == I64 and self.rng.random() < 0.5:
            self.add("eq_scalar", [i], v.shape, BOOL, s=self.rng.choice([0, 1]))
        else:
            self.add("gt_scalar", [i], v.shape, BOOL, s=self.scalar(v.dtype))
        return None

    def _where(self) -> None:
        m = self.pick(lambda v: v.dtype == BOOL)
        if m is None:
            return self._compare()
        mask = self.vals[m]
        same = [j for j, w in enumerate(self.vals) if w.shape == mask.shape and w.dtype != BOOL]
        if not same:
            return self._compare()
        a = self.rng.choice(same)
        va = self.vals[a]
        if self.rng.random() < 0.5:
            b = self.rng.choice([j for j in same if self.vals[j].dtype == va.dtype])
            self.add("where", [m, a, b], mask.shape, va.dtype)
        else:
            self.add("masked_fill", [m, a], mask.shape, va.dtype, s=self.scalar(va.dtype))
        return None

    def _buffer(self) -> None:
        i = self.pick(lambda v: v.dtype != BOOL and len(v.shape) >= 1)
        if i is None:
            return self._cast()
        v = self.vals[i]
        shape = self.rng.choice([[v.shape[-1]], [1] * (len(v.shape) - 1) + [v.shape[-1]],
                                 [1]])
        buf = self.new_buffer(_random_tensor(shape, v.dtype, self.gen))
        self.add("add_buffer", [i], v.shape, v.dtype, buf=buf)

    def _cast(self) -> None:
        i = self.pick()
        assert i is not None
        v = self.vals[i]
        if v.dtype == F32:
            op, dtype = self.rng.choice([("to_half", F16), ("to_long", I64), ("to_bool", BOOL)])
        elif v.dtype == F16:
            op, dtype = "to_float", F32
        elif v.dtype == I64:
            op, dtype = self.rng.choice([("to_float", F32), ("to_bool", BOOL)])
        else:
            op, dtype = self.rng.choice([("to_float", F32), ("to_long", I64)])
        self.add(op, [i], v.shape, dtype)

    def _inplace(self) -> None:
        # Only on intermediates (and views of intermediates): never on inputs or buffers.
        i = self.pick(lambda v: self.vals[v.root].kind == "tmp" and v.dtype != BOOL)
        if i is None:
            return self._unary()
        v = self.vals[i]
        masks = [j for j, w in enumerate(self.vals) if w.dtype == BOOL and w.shape == v.shape]
        choices = ["iadd", "imul", "iclamp"]
        if v.dtype in FLOATS:
            choices.append("irelu")
        if v.shape and v.shape[-1] > 0:
            choices.append("isetitem")
        if masks:
            choices.append("imasked_fill")
        op = self.rng.choice(choices)
        if op in ("iadd", "imul", "isetitem"):
            s = self.scalar(v.dtype)
            if v.dtype == I64:
                s = int(s)
            self.add(op, [i], v.shape, v.dtype, view_of=i, s=s)
        elif op == "iclamp":
            lo, hi = (-1, 2) if v.dtype == I64 else (-0.5, 1.5)
            self.add(op, [i], v.shape, v.dtype, view_of=i, lo=lo, hi=hi)
        elif op == "irelu":
            self.add(op, [i], v.shape, v.dtype, view_of=i)
        else:
            self.add(op, [self.rng.choice(masks), i], v.shape, v.dtype, view_of=i,
                     s=self.scalar(v.dtype) if v.dtype != I64 else 1)
        return None

    # -- the wider grammar (seeds >= WIDE_FROM) ---------------------------------------------
    def _pool(self) -> None:
        i = self.pick(lambda v: v.dtype in FLOATS and 3 <= len(v.shape) <= 5
                      and all(s > 0 for s in v.shape[1:]))
        if i is None:
            return self._param_unary()
        v = self.vals[i]
        n = len(v.shape) - 2
        rng = self.rng
        kind = rng.choices(["max", "avg", "adaptive_avg", "adaptive_max"], weights=[5, 4, 2, 2])[0]
        if v.dtype == F16:
            kind = "max"  # torch's CPU avg/adaptive pools lack float16 kernels in some dims
        if kind.startswith("adaptive"):
            sizes = [rng.choice([1, 2, 3, s]) for s in v.shape[2:]]
            kw: dict[str, Any] = {"output_size": sizes if n > 1 else sizes[0]}
            if kind == "adaptive_max" and rng.random() < 0.3:
                kw["return_indices"] = True
        else:
            def per_axis(values: list[int]) -> Any:
                return values[0] if n == 1 or rng.random() < 0.3 else values
            kernel = [rng.choice([1, 2, 2, 3, 3]) for _ in range(n)]
            stride = [rng.choice([1, 2, 2, 3]) for _ in range(n)]
            padding = [rng.choice(range(k // 2 + 1)) for k in kernel]
            kw = {"kernel_size": per_axis(kernel),
                  "stride": per_axis(stride) if rng.random() < 0.8 else None,
                  "padding": per_axis(padding), "ceil_mode": rng.random() < 0.5}
            if isinstance(kw["kernel_size"], int):  # one value for every axis
                kw["padding"] = min(padding[0], kernel[0] // 2) if isinstance(kw["padding"], int) \
                    else [min(p, kernel[0] // 2) for p in padding]
            if kind == "max":
                if rng.random() < 0.35:
                    kw["dilation"] = per_axis([rng.choice([1, 2]) for _ in range(n)])
                if rng.random() < 0.3:
                    kw["return_indices"] = True
            else:
                kw["count_include_pad"] = rng.random() < 0.6
                if n > 1 and rng.random() < 0.15:
                    kw["divisor_override"] = rng.choice([1, 3])
        fn = f"{kind}_pool{n}d"
        try:
            meta = _pool(fn, torch.empty(v.shape, dtype=v.dtype, device="meta"), kw)
        except Exception:  # noqa: BLE001  (torch refuses these parameters for this input)
            return self._param_unary()
        self.add("pool", [i], list(meta.shape), v.dtype, fn=fn, kw=kw)
        return None

    def _param_unary(self) -> None:
        i = self.pick(lambda v: v.dtype in FLOATS)
        if i is None:
            return self._unary()
        v = self.vals[i]
        rng = self.rng
        op = rng.choice(["leaky_relu", "elu", "hardtanh", "clamp"])
        if op == "leaky_relu":
            self.add(op, [i], v.shape, v.dtype, slope=rng.choice([0.01, 0.2, -0.5, 1.5]))
        elif op == "elu":
            self.add(op, [i], v.shape, v.dtype, alpha=rng.choice([1.0, 0.5, 2.0]))
        else:
            lo = rng.choice([-1.0, -0.25, 0.0])
            hi = rng.choice([lo, lo + 0.5, 1.0, 2.0])
            self.add(op, [i], v.shape, v.dtype, lo=lo, hi=max(lo, hi))
        return None

    def _shift(self) -> None:
        i = self.pick(lambda v: len(v.shape) >= 2 and v.dtype != BOOL)
        if i is None:
            return self._unary()
        v = self.vals[i]
        rng = self.rng
        r = len(v.shape)
        op = rng.choice(["cumsum", "flip", "roll", "pad"])
        if op == "cumsum":
            self.add(op, [i], v.shape, v.dtype if v.dtype != BOOL else I64,
                     dim=rng.randrange(-r, r))
        elif op == "flip":
            self.add(op, [i], v.shape, v.dtype, dims=rng.sample(range(r), rng.randint(1, r)))
        elif op == "roll":
            self.add(op, [i], v.shape, v.dtype, shift=rng.choice([1, -2, 3]),
                     dim=rng.randrange(1, r))
        else:
            last = v.shape[-1]
            modes = ["constant"] + (["reflect", "replicate", "circular"]
                                    if v.dtype in FLOATS and r in (2, 3) and last > 2 else [])
            mode = rng.choice(modes)
            pads = [rng.choice([0, 1, 2]), rng.choice([0, 1])]
            if mode != "constant":
                pads = [min(p, last - 1) for p in pads]
            shape = list(v.shape)
            shape[-1] += sum(pads)
            self.add(op, [i], shape, v.dtype, pads=pads, mode=mode)
        return None

    def _fold(self) -> None:
        """Reshapes that fold the batch with other dims (torch.export guards on the batch)."""
        i = self.pick(lambda v: len(v.shape) >= 2 and v.shape[0] > 0
                      and all(s > 0 for s in v.shape))
        if i is None:
            return self._layout()
        v = self.vals[i]
        rng = self.rng
        b, rest = v.shape[0], v.shape[1:]
        choices = ["fold_flat"]
        if b % 2 == 0:
            choices += ["fold_pairs", "unflatten_batch"]
        if len(v.shape) >= 3:
            choices.append("fold_merge")
        op = rng.choice(choices)
        if op == "fold_pairs":
            self.add(op, [i], [b // 2, 2, *rest], v.dtype, view_of=i)
        elif op == "unflatten_batch":
            self.add(op, [i], [2, b // 2, *rest], v.dtype, view_of=i)
        elif op == "fold_merge":
            self.add(op, [i], [b * rest[0], *rest[1:]], v.dtype, view_of=i)
        else:
            total = b
            for s in rest:
                total *= s
            widths = [w for w in (2 * rest[-1], rest[-1] * b, 8, 6, 3) if w > 0 and total % w == 0]
            width = rng.choice(widths) if widths else total
            self.add(op, [i], [total // width, width], v.dtype, view_of=i, width=width)
        return None

    def _batch_guard(self) -> None:
        """Code that guards on the batch size or specialises it."""
        i = self.pick(lambda v: len(v.shape) >= 1 and v.dtype != BOOL)
        if i is None:
            return self._unary()
        v = self.vals[i]
        rng = self.rng
        b = v.shape[0]
        op = rng.choice(["select_batch", "batch_branch", "specialize"])
        if op == "select_batch" and b > 0:
            index = rng.choice([j for j in (0, 1, -1) if -b <= j < b])
            self.add(op, [i], v.shape[1:], v.dtype, view_of=i, index=index)
        elif op == "specialize":
            buf = self.new_buffer(_random_tensor(list(v.shape), v.dtype, self.gen))
            self.add(op, [i], v.shape, v.dtype, buf=buf)
        else:
            # never a size the value reaches at the harness's batches (0-3, times a cat's 2 or
            # 4): a trace (TorchScript) cannot see the branch
            self.add("batch_branch", [i], v.shape, v.dtype, size=rng.choice([97, 101]))
        return None

    def dynamic(self) -> tuple[list[dict[int, str]], str]:
        """The dynamic variants' dims: dim 0 ("batch") of every input, and in the wider
        grammar sometimes another dim too ("d<axis>"), given in one of DIM_STYLES."""
        shape = self.vals[0].shape
        axes = {0: "batch"}
        if self.wide and len(shape) >= 2 and self.rng.random() < 0.3:
            axis = self.rng.randrange(1, len(shape))
            axes[axis] = f"d{axis}"
        style = self.rng.choice(DIM_STYLES) if self.wide else "DYNAMIC"
        inputs = [v for v in self.vals if v.kind == "input"]
        return [dict(axes) for _ in inputs], style

    # -- the whole module --------------------------------------------------------------------
    def inputs(self) -> list[torch.Tensor]:
        rng = self.rng
        mode = rng.choices(["f32", "f16", "i64", "mixed"], weights=[60, 15, 10, 15])[0]
        batch = rng.choices([2, 3, 1, 0], weights=[50, 25, 18, 7])[0]
        rank = rng.choice([1, 2, 2, 3, 3, 4] + ([3, 4, 5] if self.wide else []))
        rest = [rng.choices([4, 3, 5, 1, 0, 6, 8], weights=[20, 20, 15, 15, 5, 10, 5])[0]
                for _ in range(rank - 1)]
        if self.wide and rank >= 3:
            # pooling needs channels and non-empty spatial sizes more often than not
            rest = [rng.choice([4, 5, 6, 7, 3, 2, 1]) if s == 0 and rng.random() < 0.8 else s
                    for s in rest]
        dtype = {"f32": F32, "f16": F16, "i64": I64, "mixed": F32}[mode]
        shapes = [([batch, *rest], dtype)]
        if rng.random() < 0.4:
            second = BOOL if mode == "mixed" else dtype
            shapes.append(([batch, *rest], second))
        tensors = []
        for shape, dt in shapes:
            tensors.append(_random_tensor(shape, dt, self.gen))
            self.vals.append(Val(list(shape), dt, len(self.vals), "input"))
            self.lines.append(f"v{len(self.vals) - 1} = input  # {shape} {str(dt)[6:]}")
        return tensors

    def outputs(self) -> Any:
        n = len(self.vals)
        last = ("v", n - 1)
        pool = list(range(n))
        kind = self.rng.choices(["single", "tuple", "list", "dict", "nested"],
                                weights=[35, 25, 10, 15, 15])[0]
        if kind == "single":
            return last
        extra = [("v", self.rng.choice(pool)) for _ in range(self.rng.randint(1, 2))]
        if kind == "tuple":
            return ("tuple", [last, *extra])
        if kind == "list":
            return ("list", [last, *extra])
        if kind == "dict":
            return ("dict", [("out", last)] + [(f"aux{k}", e) for k, e in enumerate(extra)])
        return ("tuple", [last, ("dict", [("inner", ("list", extra))])])


def generate(seed: int) -> Case:
    """The case for `seed`: the same module, inputs and listing every time."""
    b = _Builder(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the weights of Linear, Conv, ... are drawn from torch's RNG
        args = b.inputs()
        n_inputs = len(args)
        for _ in range(b.rng.randint(2, 7)):
            b.step()
        outputs = b.outputs()
        dynamic, style = b.dynamic() if b.wide else ([{0: "batch"} for _ in args], "DYNAMIC")
    module = FuzzModule(b.steps, n_inputs, outputs)
    for name, sub in b.subs.items():
        sub.requires_grad_(False)
        module.add_module(name, sub)
    for name, buf in b.buffers.items():
        module.register_buffer(name, buf)
    module.eval()
    ops = sorted({op for op, _, _ in b.steps})
    source = "\n".join([*b.lines, f"return {_render(outputs)}"])
    if b.wide:
        source += f"\n# dynamic variants: {dynamic} as {style}"
    return Case(seed, module, tuple(args), source, ops, dynamic, style)


def _render(spec: Any) -> str:
    kind, body = spec
    if kind == "v":
        return f"v{body}"
    if kind == "tuple":
        return "(" + ", ".join(_render(s) for s in body) + ",)"
    if kind == "list":
        return "[" + ", ".join(_render(s) for s in body) + "]"
    return "{" + ", ".join(f"{k!r}: {_render(s)}" for k, s in body) + "}"
