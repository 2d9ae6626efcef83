"""OpInfo cases for reductions into indexed slots: index_reduce, put, segment_reduce,
histogram(dd), nonzero_static."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

CASES = [
    *(OpTest("index_reduce", variant=reduce, covers=(aten.index_reduce.default,),
             dtypes=(torch.float32, torch.int64, torch.float16))
      for reduce in ("prod", "mean", "amax", "amin")),
    OpTest("put", covers=(aten.put.default,),
           dtypes=(torch.float32, torch.int64, torch.bool, torch.float16)),
    OpTest("nonzero_static", covers=(aten.nonzero_static.default,),
           dtypes=(torch.float32, torch.int64, torch.bool, torch.float16)),
    *(OpTest("_segment_reduce", variant=variant, covers=(aten.segment_reduce.default,),
             dtypes=(torch.float32, torch.float64, torch.float16))
      for variant in ("lengths", "offsets")),
    OpTest("histogram", covers=(aten.histogram.bin_ct, aten.histogram.bins_tensor),
           dtypes=(torch.float32, torch.float64)),
    OpTest("histogramdd", covers=(aten.histogramdd.default, aten.histogramdd.int_bins,
                                  aten.histogramdd.TensorList_bins),
           dtypes=(torch.float32, torch.float64)),
]
