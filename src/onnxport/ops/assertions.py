"""Runtime assertions and other ops with no outputs: dropped from the graph.

torch.export records checks it could not discharge while tracing as nodes:
`_assert_scalar` on symbolic sizes (`torch._check(...)`, the bounds of an `.item()` or a
`nonzero` count), `_assert_async` on tensor conditions (`torch._assert_async(...)`),
`sym_constrain_range(_for_size)` on unbacked sizes, `_assert_tensor_metadata` on the inputs
of a dtype conversion. ONNX has no assertion op; these nodes compute nothing the model's
outputs read, so each translates to nothing, as torch.onnx removes them before translating.
The conditions they read become dead code and the dead-code pass removes them.

The functionalized forms (`_functional_assert_async.msg`, `_functional_sym_constrain_range*`,
after torch's `_FunctionalizeSideEffectfulOpsPass`) thread a dependency token through the
checks instead; the token is an empty tensor (`_make_dep_token`) and each check passes it on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from onnxport.translate import GraphBuilder, Tensor, aten, register


@register(aten._assert_scalar.default)
def aten__assert_scalar(g: GraphBuilder, self: Any, assert_msg: str) -> None:
    """_assert_scalar(Scalar self, str assert_msg) -> ()"""
    # Checks on symbolic sizes (e.g. 0 <= nonzero count <= numel) that hold for every input
    # the exported program accepts.
    return None


@register(aten._assert_async.default)
def aten__assert_async(g: GraphBuilder, self: Tensor) -> None:
    """_assert_async(Tensor self) -> ()"""
    return None


@register(aten._assert_async.msg)
def aten__assert_async_msg(g: GraphBuilder, self: Tensor, assert_msg: str) -> None:
    """_assert_async.msg(Tensor self, str assert_msg) -> ()"""
    return None


@register(aten.sym_constrain_range.default)
def aten_sym_constrain_range(g: GraphBuilder, size: Any, *, min: Any = None,
                             max: Any = None) -> None:
    """sym_constrain_range(Scalar size, *, int? min=None, int? max=None) -> ()"""
    # A range for torch's symbolic shape reasoning; nothing to compute.
    return None


@register(aten.sym_constrain_range_for_size.default)
def aten_sym_constrain_range_for_size(g: GraphBuilder, size: Any, *, min: Any = None,
                                      max: Any = None) -> None:
    """sym_constrain_range_for_size(Scalar size, *, int? min=None, int? max=None) -> ()"""
    return None


@register(aten._assert_tensor_metadata.default)
def aten__assert_tensor_metadata(g: GraphBuilder, a: Tensor, size: Any = None, stride: Any = None,
                                 dtype: torch.dtype | None = None, *, device: Any = None,
                                 layout: Any = None) -> None:
    """_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()"""  # noqa: E501
    # A trace-time check that torch.export already made.
    return None


@register(aten._print.default)
def aten__print(g: GraphBuilder, s: str) -> None:
    """_print(str s) -> ()"""
    # ONNX has no side effects to print with; the outputs do not depend on it.
    return None


@register(aten._make_dep_token.default)
def aten__make_dep_token(g: GraphBuilder, *, dtype: torch.dtype | None = None, layout: Any = None,
                         device: Any = None, pin_memory: bool | None = None,
                         memory_format: Any = None) -> Tensor:
    """_make_dep_token(*, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    # A token ordering side effects: `torch.empty([])` in eager, never read; zero here.
    dtype_ = g.out_dtype()
    return g.const(np.zeros((), dtype=dtype_.numpy()), dtype_)


@register(aten._functional_assert_async.msg)
def aten__functional_assert_async_msg(g: GraphBuilder, self: Tensor, assert_msg: str,
                                      dep_token: Tensor) -> Tensor:
    """_functional_assert_async.msg(Tensor self, str assert_msg, Tensor dep_token) -> Tensor"""
    return dep_token


@register(aten._functional_sym_constrain_range.default,
          aten._functional_sym_constrain_range_for_size.default)
def aten__functional_sym_constrain_range(g: GraphBuilder, size: Any, min: Any, max: Any,
                                         dep_token: Tensor) -> Tensor:
    """_functional_sym_constrain_range(Scalar size, int? min, int? max, Tensor dep_token) -> Tensor"""
    return dep_token

