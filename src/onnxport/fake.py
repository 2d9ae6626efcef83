"""Fake mode: build and export a model without allocating its weights."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv


@dataclasses.dataclass
class ONNXFakeContext:
    """The fake mode a model was created in (pass it as ExportOptions(fake_context=...))."""

    fake_mode: FakeTensorMode


@contextlib.contextmanager
def enable_fake_mode() -> Iterator[ONNXFakeContext]:
    """Create tensors (parameters and inputs) as FakeTensors for the duration of the context.

    FakeTensors carry dtype and shape but no data, so a model too large for memory can be
    built and exported as architecture only; `ONNXProgram.apply_weights` attaches real weights
    afterwards, and `save(include_initializers=False)` saves without them.

    Example:
        >>> import torch, onnxport
        >>> with onnxport.enable_fake_mode():
        ...     model = torch.nn.Linear(4, 2)
        ...     x = torch.randn(3, 4)
        >>> program = onnxport.export(model, (x,))
        >>> sorted(program.model.graph.initializers)
        ['bias', 'weight']
    """
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True,
                               shape_env=ShapeEnv(allow_scalar_outputs=False,
                                                  allow_dynamic_output_shape_ops=False))
    with fake_mode:
        yield ONNXFakeContext(fake_mode)
