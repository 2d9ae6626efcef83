"""OpInfo cases for the remaining core ATen ops: strided views, scatters, pool backward.

col2im, item/_local_scalar_dense, sym_stride, the random ops and the other backward ops
have no usable OpInfo: tests/ops/test_core_coverage.py names their hand-written tests.
"""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

ALL = (torch.float32, torch.int64, torch.bool, torch.float16)


_VIEW_REASON = ("storage_offset=0 reads the storage before the input view's own elements "
                "(the view starts at offset 5); an exported input holds only the view's "
                "elements, so the translation raises a TranslationError")

CASES = [
    OpTest("as_strided", covers=(aten.as_strided.default,), dtypes=ALL),
    # Every partial_views sample is a view into a larger storage.
    OpTest("as_strided", variant="partial_views", covers=(aten.as_strided.default,), dtypes=ALL)
        .xfail(when=lambda s: s.kwargs.get("storage_offset") == 0, reason=_VIEW_REASON),
    OpTest("select_scatter", covers=(aten.select_scatter.default,), dtypes=ALL),
    OpTest("masked_scatter", covers=(aten.masked_scatter.default,), dtypes=ALL),
    OpTest("max_pool2d_with_indices_backward",
           covers=(aten.max_pool2d_with_indices_backward.default,),
           dtypes=(torch.float32, torch.float16)),
]
