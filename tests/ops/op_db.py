"""OpInfo-driven op tests: which OpInfo entries test which translations, and known gaps.

Adding an op (docs/adding_an_op.md):
1. Read the ATen schema (`torch.ops.aten.<op>.<overload>._schema`) and the ONNX spec.
2. Write the translation in `src/onnxport/ops/<family>.py` with `@register(aten.<op>.<overload>)`.
3. Add an `OpTest("<opinfo name>", covers=(aten.<op>.<overload>,))` to `tests/ops/cases/<family>.py`.
4. Run `pytest tests/ops -k <opinfo name>`; add edge cases the spec mentions.
5. Mark real gaps with `.xfail(reason=...)` or `.skip(when=..., reason=...)`, never silently.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from onnxport.verify.compare import as_complex_like


@dataclasses.dataclass(frozen=True)
class Gap:
    """A known failure: xfail (expected to fail, strict unless `strict=False`: a rounding
    difference whose size depends on the CPU's kernels) or skip (not run)."""

    reason: str
    dtypes: tuple[torch.dtype, ...] | None = None
    when: Callable[[Any], bool] | None = None
    is_skip: bool = False
    strict: bool = True

    def applies(self, dtype: torch.dtype, sample: Any = None) -> bool:
        if self.dtypes is not None and dtype not in self.dtypes:
            return False
        if self.when is not None:
            return sample is not None and bool(self.when(sample))
        return True


@dataclasses.dataclass(frozen=True)
class OpTest:
    """One OpInfo entry and the translations its samples must reach."""

    name: str
    covers: tuple[Any, ...] = ()
    variant: str = ""
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    tolerance: dict[torch.dtype, tuple[float, float]] = dataclasses.field(default_factory=dict)
    gaps: tuple[Gap, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.name}.{self.variant}" if self.variant else self.name

    def xfail(self, *, reason: str, dtypes: Any = None, when: Any = None,
              strict: bool = True) -> OpTest:
        return dataclasses.replace(self, gaps=(*self.gaps, Gap(reason, _tuple(dtypes), when,
                                                                strict=strict)))

    def skip(self, *, reason: str, dtypes: Any = None, when: Any = None) -> OpTest:
        return dataclasses.replace(self, gaps=(*self.gaps, Gap(reason, _tuple(dtypes), when, True)))


def _tuple(x: Any) -> tuple[torch.dtype, ...] | None:
    return None if x is None else tuple(x)


class SampleModule(torch.nn.Module):
    """Calls an OpInfo's op on a sample; tensor leaves are inputs, the rest is baked in."""

    def __init__(self, op: Any, leaves: list[Any], spec: Any, tensor_index: list[int]) -> None:
        super().__init__()
        self.op, self.leaves, self.spec, self.tensor_index = op, leaves, spec, tensor_index

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for j, i in enumerate(self.tensor_index):
            leaves[i] = tensors[j]
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.op(inp, *args, **kwargs)


def sample_module(op: Any, sample: Any) -> tuple[SampleModule, tuple[torch.Tensor, ...]]:
    """A module calling `op` on `sample`, and the sample's tensors (its inputs)."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    tensor_index = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return SampleModule(op, leaves, spec, tensor_index), tuple(leaves[i] for i in tensor_index)


# Allocations whose contents are undefined: their values cannot be compared either.
_UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                            "new_empty_strided"})


def _draws_or_allocates(target: Any) -> bool:
    tags = getattr(target, "tags", ())
    packet = getattr(target, "_overloadpacket", None)
    return torch.Tag.nondeterministic_seeded in tags or (
        packet is not None and packet.__name__ in _UNINITIALIZED)


def random_outputs(exported_program: torch.export.ExportedProgram) -> list[bool]:
    """For each user output: does its value depend on a random draw or uninitialized memory?

    Such outputs can only match eager PyTorch in shape and dtype (a seeded eager draw and an
    ONNX Runtime draw are different numbers); the rest must match in value.
    """
    tainted: set[torch.fx.Node] = set()
    for node in exported_program.graph.nodes:
        if node.op == "call_function" and (
                _draws_or_allocates(node.target) or tainted.intersection(node.all_input_nodes)):
            tainted.add(node)
    output = next(n for n in exported_program.graph.nodes if n.op == "output")
    specs = exported_program.graph_signature.output_specs
    leaves = pytree.tree_leaves(output.args[0])
    return [leaf in tainted for leaf, spec in zip(leaves, specs)
            if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT]


def assert_outputs_match(actual: list[Any], expected: list[torch.Tensor], random: list[bool],
                         rtol: float | None = None, atol: float | None = None) -> None:
    """Values match eager's (torch's tolerances, equal_nan); random outputs in shape and dtype."""
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    random = random if len(random) == len(expected) else [False] * len(expected)
    for a, e, r in zip(actual, expected, random):
        # Complex outputs come back from ONNXProgram as their real (..., 2) pairs.
        a = as_complex_like(torch.as_tensor(a), e)
        if r:
            assert (a.shape, a.dtype) == (e.shape, e.dtype), (
                f"random output: {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}")
        else:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False)


_OP_CALL = re.compile(r'g\.op\(\s*"([A-Za-z_:.]+)"')


def emitted_ops(fn: Any) -> list[str]:
    """ONNX op types a translation emits: `g.op("X"` in its source, and op names it closes over."""
    ops: set[str] = set()
    try:
        ops.update(_OP_CALL.findall(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError):
        pass
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, str) and value[:1].isupper() and value.isalnum():
            ops.add(value)
    return sorted(ops)


def load_cases() -> list[OpTest]:
    """Every OpTest from tests/ops/cases/*.py (each module defines CASES)."""
    from tests.ops import cases

    out: list[OpTest] = []
    for info in sorted(pkgutil.iter_modules(cases.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{cases.__name__}.{info.name}")
        out.extend(getattr(module, "CASES", []))
    return out


OP_TESTS = load_cases()
