"""OpInfo cases for shape manipulation: views, transposes, broadcasting, cat, splits, slices."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

F32, I64, BOOL, F16 = torch.float32, torch.int64, torch.bool, torch.float16
ALL = (F32, I64, BOOL, F16)

CASES = [
    OpTest("view", covers=(aten.view.default,), dtypes=ALL),
    OpTest("reshape", covers=(aten.reshape.default,), dtypes=ALL),
    OpTest("view_as", covers=(aten.view_as.default,), dtypes=ALL),
    OpTest("reshape_as", covers=(aten.reshape_as.default,), dtypes=ALL),
    OpTest("flatten", covers=(aten.flatten.using_ints,), dtypes=ALL),
    OpTest("unflatten", covers=(aten.unflatten.int,), dtypes=ALL),
    OpTest("permute", covers=(aten.permute.default,), dtypes=ALL),
    OpTest("transpose", covers=(aten.transpose.int,), dtypes=ALL),
    OpTest("t", covers=(aten.t.default,), dtypes=ALL),
    OpTest("T", covers=(aten.numpy_T.default,), dtypes=ALL),
    OpTest("mT", covers=(aten.mT.default,), dtypes=ALL),
    OpTest("movedim", covers=(aten.movedim.intlist, aten.movedim.int), dtypes=ALL),
    OpTest("expand", covers=(aten.expand.default,), dtypes=ALL),
    OpTest("expand_as", covers=(aten.expand_as.default,), dtypes=ALL),
    OpTest("broadcast_to", covers=(aten.broadcast_to.default,), dtypes=ALL),
    OpTest("squeeze", covers=(aten.squeeze.default, aten.squeeze.dim), dtypes=ALL),
    OpTest("squeeze", variant="multiple", covers=(aten.squeeze.dims,), dtypes=ALL),
    OpTest("unsqueeze", covers=(aten.unsqueeze.default,), dtypes=ALL),
    OpTest("cat", covers=(aten.cat.default,), dtypes=ALL),
    OpTest("stack", covers=(aten.stack.default,), dtypes=ALL),
    OpTest("hstack", covers=(aten.hstack.default,), dtypes=ALL),
    OpTest("vstack", covers=(aten.vstack.default,), dtypes=ALL),
    OpTest("split", covers=(aten.split.Tensor,), dtypes=ALL),
    OpTest("split", variant="list_args", covers=(aten.split_with_sizes.default,), dtypes=ALL),
    OpTest("split_with_sizes", covers=(aten.split_with_sizes.default,), dtypes=ALL),
    OpTest("chunk", covers=(aten.chunk.default,), dtypes=ALL),
    OpTest("unbind", covers=(aten.unbind.int,), dtypes=ALL),
    OpTest("tensor_split", covers=(aten.tensor_split.sections, aten.tensor_split.indices,
                                   aten.tensor_split.tensor_indices_or_sections), dtypes=ALL)
    .skip(when=lambda s: isinstance(s.args[0], torch.Tensor) and s.args[0].dim() == 0,
          reason="torch.export cannot capture a 0-d tensor number of sections (data-dependent "
                 "output count)"),
    OpTest("slice", covers=(aten.slice.Tensor,), dtypes=ALL),
    OpTest("select", covers=(aten.select.int,), dtypes=ALL),
    OpTest("narrow", covers=(aten.narrow.default, aten.narrow.Tensor), dtypes=ALL)
    .skip(when=lambda s: isinstance(s.args[1], torch.Tensor),
          reason="torch.export cannot capture narrow with a tensor start (pending unbacked "
                 "symbol)"),
    OpTest("flip", covers=(aten.flip.default,), dtypes=ALL),
    OpTest("roll", covers=(aten.roll.default,), dtypes=ALL),
]

CASES += [
    OpTest("hsplit", covers=(aten.hsplit.int, aten.hsplit.array), dtypes=ALL),
    OpTest("vsplit", covers=(aten.vsplit.int, aten.vsplit.array), dtypes=ALL),
    OpTest("dsplit", covers=(aten.dsplit.int, aten.dsplit.array), dtypes=ALL),
    OpTest("atleast_1d", covers=(aten.atleast_1d.default, aten.atleast_1d.Sequence), dtypes=ALL),
    OpTest("atleast_2d", covers=(aten.atleast_2d.default, aten.atleast_2d.Sequence), dtypes=ALL),
    OpTest("atleast_3d", covers=(aten.atleast_3d.default, aten.atleast_3d.Sequence), dtypes=ALL),
    OpTest("unsafe_chunk", covers=(aten.unsafe_chunk.default,), dtypes=ALL),
    OpTest("unsafe_split", covers=(aten.unsafe_split.Tensor,), dtypes=ALL),
    OpTest("narrow_copy", covers=(aten.narrow_copy.default,), dtypes=ALL),
    OpTest("slice_scatter", covers=(aten.slice_scatter.default,), dtypes=ALL),
    OpTest("diagonal_scatter", covers=(aten.diagonal_scatter.default,), dtypes=ALL),
    OpTest("tril_indices", covers=(aten.tril_indices.default,), dtypes=(I64,)),
    OpTest("triu_indices", covers=(aten.triu_indices.default,), dtypes=(I64,)),
]

# Composite ops that torch.export or its decomposition table lowers onto the translations
# above: no `covers`, these check the compositions end to end.
CASES += [
    OpTest(name, dtypes=ALL)
    for name in ("dstack", "column_stack", "fliplr", "flipud", "diag", "msort", "index_copy",
                 "index_fill", "select_scatter", "diag_embed", "block_diag")
] + [
    OpTest("take", dtypes=ALL)
    .skip(when=lambda s: s.args[0].dim() == 0,
          reason="take's decomposition guards on a 0-d index's value (data-dependent)"),
    OpTest("unravel_index", dtypes=(I64,))
    .skip(when=lambda s: tuple(s.args[0]) == (),
          reason="an empty shape gives no outputs: the ONNX model has none and ORT rejects it"),
]
