"""Every core ATen overload (`torch.Tag.core`) has a translation at opset 18 and a test.

A core overload is tested when an OpTest lists it in `covers` (tests/ops/cases/*.py) or when
TESTED_ELSEWHERE names the hand-written test that dispatches it. UNTRANSLATABLE holds the
overloads with no translation, each with the reason; an entry that gains a translation must
be removed (the test says so).
"""

from __future__ import annotations

import ast
import functools
import pathlib

import numpy as np
import onnx_ir as ir
import pytest
import torch

import onnxport
from onnxport.translate import default_registry
from onnxport.translate.registry import target_name
from tests.ops.op_db import OP_TESTS
from tests.ops.test_strided_edge import _run_direct

OPSET = 18
ROOT = pathlib.Path(__file__).resolve().parents[2]
A = torch.ops.aten

UNTRANSLATABLE: dict[str, str] = {}

_HERE = "tests/ops/test_core_coverage.py"
_ELEMENTWISE = "tests/ops/test_elementwise_edge.py::test_explicit_overloads_are_dispatched"

TESTED_ELSEWHERE: dict[str, str] = {
    # Reached only after run_decompositions() or through FX plumbing.
    "aten._adaptive_avg_pool2d.default": f"{_HERE}::test_decomposed_adaptive_pools",
    "aten._adaptive_avg_pool3d.default": f"{_HERE}::test_decomposed_adaptive_pools",
    "aten.sym_size.int": f"{_HERE}::test_symbolic_size_queries",
    "aten.sym_numel.default": f"{_HERE}::test_symbolic_size_queries",
    "aten.sym_storage_offset.default": f"{_HERE}::test_symbolic_size_queries",
    "aten._native_batch_norm_legit_no_training.default":
        "tests/ops/test_nn_edge.py::test_decomposed_program_core_aten_level",
    "aten.alias.default": _ELEMENTWISE,
    "aten.copy.default": _ELEMENTWISE,
    "aten.empty.memory_format": "tests/ops/test_shape_edge.py::test_empty_gives_shape_and_dtype",
    "aten.empty_strided.default": "tests/ops/test_shape_edge.py::test_empty_gives_shape_and_dtype",
    # Storage-level ops without a usable OpInfo (ops/strided.py).
    "aten._local_scalar_dense.default": "tests/ops/test_strided_edge.py::test_local_scalar_dense",
    "aten.atan2.out": "tests/ops/test_strided_edge.py::test_atan2_out_returns_the_result",
    "aten.col2im.default": "tests/ops/test_strided_edge.py::test_col2im_matches_fold",
    "aten.resize_.default": "tests/ops/test_strided_edge.py::test_resize_keeps_leading_elements",
    "aten.sym_is_contiguous.default": "tests/ops/test_strided_edge.py::test_sym_is_contiguous",
    "aten.sym_stride.int": "tests/ops/test_strided_edge.py::test_sym_stride_int_contiguous_strides",
    # Random ops: checked by distribution, not by value (ops/random.py).
    "aten.rand.default": "tests/ops/test_random.py::test_rand",
    "aten.randn.default": "tests/ops/test_random.py::test_randn",
    "aten.randperm.default": "tests/ops/test_random.py::test_randperm",
    # Backward ops (ops/backward.py).
    "aten._adaptive_avg_pool2d_backward.default":
        "tests/ops/test_backward_ops.py::test_adaptive_avg_pool2d_backward",
    "aten.avg_pool2d_backward.default": "tests/ops/test_backward_ops.py::test_avg_pool2d_backward",
    "aten.convolution_backward.default":
        "tests/ops/test_backward_ops.py::test_convolution_backward_2d",
    "aten.embedding_dense_backward.default":
        "tests/ops/test_backward_ops.py::test_embedding_dense_backward",
    "aten.native_group_norm_backward.default":
        "tests/ops/test_backward_ops.py::test_native_group_norm_backward",
    "aten.native_layer_norm_backward.default":
        "tests/ops/test_backward_ops.py::test_native_layer_norm_backward",
}


@functools.cache
def core_overloads() -> tuple[torch._ops.OpOverload, ...]:
    """Every aten overload tagged core, from the full schema list (not only loaded packets)."""
    found: dict[str, torch._ops.OpOverload] = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        packet = getattr(torch.ops.aten, schema.name[len("aten::"):], None)
        overload = getattr(packet, schema.overload_name or "default", None) if packet else None
        if isinstance(overload, torch._ops.OpOverload) and torch.Tag.core in overload.tags:
            found[target_name(overload)] = overload
    return tuple(found[name] for name in sorted(found))


CORE = core_overloads()


def test_core_list_is_not_trivially_empty() -> None:
    assert len(CORE) > 150


@pytest.mark.parametrize("target", CORE, ids=target_name)
def test_core_overload_has_translation(target: torch._ops.OpOverload) -> None:
    name = target_name(target)
    has_translation = default_registry().lookup(target, OPSET) is not None
    if name in UNTRANSLATABLE:
        assert not has_translation, f"{name} now has a translation: remove it from UNTRANSLATABLE"
        return
    assert has_translation, f"{name} has no translation at opset {OPSET}"


@pytest.mark.parametrize("target", CORE, ids=target_name)
def test_core_overload_is_tested(target: torch._ops.OpOverload) -> None:
    name = target_name(target)
    if name in UNTRANSLATABLE:
        return
    covered = {c for entry in OP_TESTS for c in entry.covers}
    assert target in covered or name in TESTED_ELSEWHERE, (
        f"{name} is in no OpTest `covers`; add one, or name its test in TESTED_ELSEWHERE")


def _module_functions(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("name", sorted(TESTED_ELSEWHERE))
def test_tested_elsewhere_names_an_existing_test(name: str) -> None:
    names = {target_name(t) for t in CORE}
    assert name in names, f"{name} is not a core overload"
    file, _, function = TESTED_ELSEWHERE[name].partition("::")
    path = ROOT / file
    assert path.is_file(), f"{file} does not exist"
    assert function.startswith("test_") and function in _module_functions(path), (
        f"{file} has no test function {function}")


def test_untranslatable_entries_are_core_overloads() -> None:
    names = {target_name(t) for t in CORE}
    assert set(UNTRANSLATABLE) <= names


# -- hand-written tests for core overloads that only decomposed programs contain ------------
def test_decomposed_adaptive_pools() -> None:
    class Pools(torch.nn.Module):
        def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.nn.functional.adaptive_avg_pool2d(x, (2, 3)),
                    torch.nn.functional.adaptive_avg_pool3d(v, (2, 1, 3)))

    x, v = torch.randn(3, 3, 6, 7), torch.randn(2, 3, 4, 5, 6)
    program = torch.export.export(Pools(), (x, v)).run_decompositions()
    targets = {n.target for n in program.graph.nodes if n.op == "call_function"}
    assert {A._adaptive_avg_pool2d.default, A._adaptive_avg_pool3d.default} <= targets
    onnx_program = onnxport.export(program, (x, v))
    for got, want in zip(onnx_program(x, v), Pools()(x, v)):
        torch.testing.assert_close(got, want)


def test_symbolic_size_queries() -> None:
    # torch.export folds these into size arithmetic, so the translations are run directly.
    x = np.zeros((3, 4, 5), dtype=np.float32)
    for dims in ([3, 4, 5], ["a", "b", "c"]):
        size = _run_direct(A.sym_size.int, [(x, dims)], 1, out_dtype=ir.DataType.INT64)
        numel = _run_direct(A.sym_numel.default, [(x, dims)], out_dtype=ir.DataType.INT64)
        offset = _run_direct(A.sym_storage_offset.default, [(x, dims)],
                             out_dtype=ir.DataType.INT64)
        assert (int(size), int(numel), int(offset)) == (4, 60, 0)
