"""Hand-written tests for ops/strided.py: im2col, col2im, as_strided with symbolic sizes, scalars, strides.

`sym_stride.int` and `atan2.out` never survive torch.export (strides of a traced tensor fold
into sizes; out= calls are functionalized), so those translations are run directly on a
GraphBuilder and checked in ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
import onnxruntime
import pytest
import torch

import onnxport
from onnxport.translate import GraphBuilder, default_registry
from tests.helpers import Fn, export_and_compare

A = torch.ops.aten


def _check(fn: Callable[..., Any], args: tuple[Any, ...], target: Any, **kwargs: Any) -> None:
    program = export_and_compare(Fn(fn), args, **kwargs)
    targets = {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}
    assert target in targets, f"{target} was not dispatched; graph has {targets}"


def _run_direct(target: Any, inputs: list[tuple[np.ndarray, list[int | str]]], *args: Any,
                out_dtype: ir.DataType, **kwargs: Any) -> np.ndarray:
    """Call `target`'s translation on graph inputs of the given (possibly symbolic) shapes."""
    graph = ir.Graph([], [], nodes=[], name="direct")
    g = GraphBuilder(graph, 18)
    values = []
    for i, (array, dims) in enumerate(inputs):
        value = ir.Value(name=f"in{i}", type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(d)
                                         for d in dims]))
        graph.inputs.append(value)
        values.append(value)
    g.out_dtypes = (out_dtype,)
    translation = default_registry().lookup(target, 18)
    assert translation is not None
    out = translation.function(g, *values, *args, **kwargs)
    graph.outputs.append(out)
    model = ir.Model(graph, ir_version=10)
    model.opset_imports[""] = 18
    proto = ir.serde.serialize_model(model)
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {f"in{i}": a for i, (a, _) in enumerate(inputs)})
    return np.asarray(result)


# -- col2im ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("output_size", "kernel", "dilation", "padding", "stride"), [
    ((5, 6), (2, 3), (1, 2), (1, 1), (2, 1)),
    ((4, 4), (2, 2), (1, 1), (0, 0), (2, 2)),
    ((7, 5), (3, 3), (2, 1), (2, 0), (1, 2)),
    ((6, 6), (1, 1), (1, 1), (0, 0), (1, 1)),
])
@pytest.mark.parametrize("is_batched", [True, False])
def test_col2im_matches_fold(output_size: Any, kernel: Any, dilation: Any, padding: Any,
                             stride: Any, is_batched: bool) -> None:
    image = torch.randn(2, 3, *output_size)
    cols = torch.nn.functional.unfold(image, kernel, dilation, padding, stride)
    cols = torch.randn_like(cols) if is_batched else torch.randn_like(cols[0])

    def fn(c: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.fold(c, output_size, kernel, dilation, padding, stride)

    _check(fn, (cols,), A.col2im.default)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_col2im_dtypes(dtype: torch.dtype) -> None:
    cols = torch.randn(1, 2 * 4, 9, dtype=dtype)

    def fn(c: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.fold(c, (4, 4), (2, 2))

    _check(fn, (cols,), A.col2im.default)


# -- im2col ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "kernel", "dilation", "padding", "stride"), [
    ((2, 4, 8, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 3, 11, 10), (2, 3), (2, 1), (0, 2), (2, 3)),
    ((2, 32, 13, 1), (9, 1), (1, 1), (4, 0), (1, 1)),  # ConvBERT's span-based convolution
    ((3, 2, 5, 5), (1, 1), (1, 1), (0, 0), (1, 1)),
    ((4, 7, 7), (3, 3), (1, 1), (0, 0), (2, 2)),  # unbatched
])
def test_im2col_matches_unfold_at_another_size(shape: Any, kernel: Any, dilation: Any,
                                               padding: Any, stride: Any) -> None:
    """Exported with dynamic batch, height and width, the graph matches eager at the example's
    size and at a larger one (the slice bounds do not depend on the size)."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.unfold(x, kernel, dilation, padding, stride)

    x = torch.randn(*shape)
    rank = len(shape)
    dims = {0: "batch", rank - 2: "height", rank - 1: "width"}
    program = export_and_compare(Fn(fn), (x,), dynamic_shapes=((dims,),))
    assert A.im2col.default in {n.target for n in program.exported_program.graph.nodes}
    bigger = torch.randn(*[s + 1 if i in dims else s for i, s in enumerate(shape)])
    torch.testing.assert_close(program(bigger)[0], fn(bigger))


# -- as_strided ------------------------------------------------------------------------------
def test_as_strided_overlapping_and_broadcast_strides() -> None:
    x = torch.arange(24.0).reshape(4, 6)

    def fn(x: torch.Tensor) -> Any:
        windows = torch.as_strided(x, (3, 4, 3), (6, 1, 1))   # overlapping windows
        repeated = torch.as_strided(x, (2, 5), (0, 2), 3)      # stride 0 repeats a row
        return windows, repeated, torch.as_strided(x, (0, 3), (1, 1))

    _check(fn, (x,), A.as_strided.default)


def test_as_strided_symbolic_sizes() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, (x.shape[0] - 1, 2), (x.shape[1], 1), 1)

    x = torch.randn(4, 5)
    dims = ({0: torch.export.Dim("n", min=3), 1: torch.export.Dim("m", min=3)},)
    program = export_and_compare(Fn(fn), (x,), dynamic_shapes=(dims,))
    y = torch.randn(7, 9)
    torch.testing.assert_close(program(y)[0], fn(y))


# -- scalars, strides, out= ------------------------------------------------------------------
# bool is left out: any use of a SymBool traces to torch.sym_ite, which has no translation yet.
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16])
def test_local_scalar_dense(dtype: torch.dtype) -> None:
    x = torch.randn(3, 2).to(dtype)
    s = torch.tensor([2.5]).to(dtype)

    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * A._local_scalar_dense(s)

    _check(fn, (x, s), A._local_scalar_dense.default)


def test_item_of_a_zero_dim_tensor() -> None:
    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x + s.item()

    _check(fn, (torch.randn(3), torch.tensor(4.5)), A.item.default)


def test_sym_is_contiguous() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        A.sym_is_contiguous(x)
        return x + 1

    _check(fn, (torch.randn(3, 4),), A.sym_is_contiguous.default,
           dynamic_shapes=(({0: torch.export.Dim("n", min=2)},),))


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_sym_stride_int_contiguous_strides(dim: int) -> None:
    x = np.zeros((3, 4, 5), dtype=np.float32)
    want = torch.zeros(3, 4, 5).stride(dim)
    for dims in ([3, 4, 5], ["a", "b", "c"]):
        got = _run_direct(A.sym_stride.int, [(x, dims)], dim, out_dtype=ir.DataType.INT64)
        assert got.shape == () and int(got) == want


def test_atan2_out_returns_the_result() -> None:
    y = np.random.randn(4, 3).astype(np.float32)
    x = np.random.randn(4, 3).astype(np.float32)
    # `out` only names the buffer torch would write; the translation never reads it.
    got = _run_direct(A.atan2.out, [(y, [4, 3]), (x, [4, 3])], out=None,
                      out_dtype=ir.DataType.FLOAT)
    torch.testing.assert_close(torch.from_numpy(got),
                               torch.atan2(torch.from_numpy(y), torch.from_numpy(x)))


@pytest.mark.parametrize("size", [(2, 3), (3, 4), (12,), (0,)])
def test_resize_keeps_leading_elements(size: tuple[int, ...]) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.resize_(*size)
        return y

    program = export_and_compare(Fn(fn), (torch.randn(3, 4),))
    targets = {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}
    assert targets & {A.resize_.default, A.resize.default}


def test_resize_growing_keeps_old_elements() -> None:
    # torch leaves the new elements uninitialized: only the old ones can be compared.
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.resize_(4, 5)
        return y

    x = torch.randn(3, 4)
    (full,) = onnxport.export(Fn(fn), (x,))(x)
    assert full.shape == (4, 5)
    torch.testing.assert_close(full.flatten()[:12], (x * 2).flatten())


# -- inputs that are views into a larger storage ---------------------------------------------

def test_as_strided_of_a_view_input_counts_from_its_storage_offset() -> None:
    """An explicit storage_offset is relative to the storage, not to the view's first element."""
    base = torch.randn(20)
    view = base[5:15]
    _check(lambda x: torch.as_strided(x, (2, 3), (3, 1), 7), (view,), A.as_strided.default)
    _check(lambda x: torch.as_strided(x, (2, 3), (1, 2)), (view,), A.as_strided.default)


def test_as_strided_of_a_transposed_input() -> None:
    """A non-contiguous input arrives as its elements in row-major order, not as its storage."""
    x = torch.randn(4, 3).t()
    _check(lambda x: torch.as_strided(x, (3, 2), (1, 4), 1), (x,), A.as_strided.default)


def test_as_strided_outside_the_input_view_is_a_clear_error() -> None:
    view = torch.randn(20)[5:15]
    with pytest.raises(onnxport.errors.TranslationError, match="outside the elements"):
        onnxport.export(Fn(lambda x: torch.as_strided(x, (2, 2), (1, 2), 0)), (view,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_as_strided_scatter_dtypes_and_offset(dtype: torch.dtype) -> None:
    x = torch.randn(3, 4).to(dtype)
    src = torch.randn(2, 2).to(dtype)
    _check(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 4), 2), (x, src),
           A.as_strided_scatter.default)


def test_as_strided_scatter_keeps_self_strides() -> None:
    """torch scatters into a clone of self that keeps self's (transposed) strides."""
    x = torch.randn(4, 3).t()
    src = torch.randn(2, 2)
    _check(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 2)), (x, src),
           A.as_strided_scatter.default)
