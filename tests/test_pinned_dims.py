"""A dim the model's code pins, through a guard torch.export records but does not enforce.

`if x.shape[-1] // 2 != 8:` with that axis dynamic: torch 2.13's export records the guard
`Eq((s//2), 8)` and neither specialises the dim nor reports it, so its program (and
torch.onnx's graph) computes the branch taken at the example for every width. onnxport finds
such guards (capture/guards.py), makes the dims static with a warning naming them, and the
graph refuses other widths instead of computing the wrong branch.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import onnxport


class _Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] // 2 != 8:
            return x * 2
        return x + 1


class _Benign(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.unsqueeze(1) if x.shape[1] != 1 else x
        return y.reshape(x.shape[0], -1) * 3


def test_pinned_dim_is_made_static_with_a_warning() -> None:
    x = torch.randn(2, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnxport.export(_Branches(), (x,), dynamic_shapes={"x": {0: "batch", 1: "w"}},
                                  dynamo=True)
    assert program is not None
    messages = [str(w.message) for w in caught]
    assert any("input 'x' axis 1 asked to be dynamic" in m and "Eq((x.size(1)//2), 8)" in m
               for m in messages)
    assert any("input 'x' axis 1 ('w') was asked to be dynamic" in m for m in messages)
    dims = [str(d) for d in program.model.graph.inputs[0].shape]
    assert dims == ["batch", "16"]
    for batch in (2, 5):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), _Branches()(x))
    with pytest.raises(Exception, match="invalid dimensions"):
        program(torch.randn(2, 10))


def test_torch_onnx_computes_the_example_branch_at_every_width() -> None:
    # The same call through torch.onnx keeps the dim dynamic and is wrong at width 10: what
    # onnxport's check prevents.
    import onnxruntime

    x = torch.randn(2, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_Branches(), (x,), dynamic_shapes={"x": {1: "w"}},
                                    dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    y = torch.randn(2, 10)
    (out,) = session.run(None, {session.get_inputs()[0].name: y.numpy()})
    assert not np.allclose(out, _Branches()(y).numpy())


def test_guards_that_hold_for_most_sizes_keep_the_dim_dynamic() -> None:
    x = torch.randn(3, 4)
    program = onnxport.export(_Benign(), (x,), dynamic_shapes={"x": {0: "batch", 1: "n"}},
                              dynamo=True)
    assert program is not None
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["batch", "n"]
    for shape in ((3, 4), (2, 7)):
        x = torch.randn(*shape)
        torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), _Benign()(x))


def test_a_size_where_the_guard_cannot_be_computed_does_not_hold() -> None:
    # Swin's guards take a remainder by a window that is 0 below 32 pixels: those sizes are
    # outside the guard's span, not a ZeroDivisionError that ends the export.
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod

    from onnxport.capture.guards import _holding_span

    x = sympy.Symbol("x", integer=True, positive=True)
    window = FloorDiv(x, 32)
    assert _holding_span(sympy.Ne(Mod(x, window), x + 1), x, 100)[0] == 32


class _OneWindow(torch.nn.Module):
    """Pads the length to whole windows of 7; at the example's 7, one window."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        windows = (x.shape[2] + 6) // 7
        y = torch.nn.functional.pad(x, (0, windows * 7 - x.shape[2]))
        y = y.view(x.shape[0], x.shape[1], windows, 7).sum(-1)
        return y if windows == 1 else y * 2


def test_a_range_torch_export_narrows_is_named_in_a_warning() -> None:
    # torch.export specialises the window count to 1, so it caps the length at 7 in the
    # program's range constraints and keeps the dim symbolic: the graph computes the one-window
    # branch at every length. The warning names the dim and the range it holds in.
    import onnxruntime as ort

    model, x = _OneWindow(), torch.randn(2, 3, 7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnxport.export(model, (x,), dynamic_shapes={"x": {0: "batch", 2: "length"}},
                                  dynamo=True)
    narrowed = [str(w.message) for w in caught if "capped the size" in str(w.message)]
    assert len(narrowed) == 1 and "input 'x' axis 2: 2..7" in narrowed[0], narrowed
    assert "axis 0" not in narrowed[0]  # the batch keeps its whole range
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    inside = torch.randn(3, 3, 5)
    np.testing.assert_allclose(session.run(None, {"x": inside.numpy()})[0],
                               model(inside).numpy(), rtol=1e-6)
    outside = torch.randn(2, 3, 14)
    with pytest.raises(Exception):  # noqa: B017 - any ORT failure: the graph's view cannot hold
        got = session.run(None, {"x": outside.numpy()})[0]
        np.testing.assert_allclose(got, model(outside).numpy(), rtol=1e-6)


class _OneWindowMap(torch.nn.Module):
    """Branches on a map being one window of `window`: a guard on both height and width."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = (x.shape[2] + self.window - 1) // self.window
        columns = (x.shape[3] + self.window - 1) // self.window
        if rows * columns == 1:
            return x * 2
        return x + 1


@pytest.mark.parametrize("window", [7, 32])
def test_a_guard_on_two_dims_pins_each(window: int) -> None:
    # `Eq(rows * columns, 1)` reads height and width; torch.export neither enforces it nor
    # narrows their ranges, so the graph computed the one-window branch at every size. Each
    # dim is judged with the other at the example's size: window 7 holds for 6 heights (the
    # dims become static), window 32 for 31 (they stay dynamic within 2..32).
    import onnxruntime as ort

    model, x = _OneWindowMap(window), torch.randn(2, 3, window, window)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnxport.export(model, (x,), dynamo=True, dynamic_shapes={
            "x": {0: "batch", 2: "height", 3: "width"}})
    assert any("branches on the size" in str(w.message) for w in caught)
    shape = [d if isinstance(d, int) else str(d) for d in program.model.graph.inputs[0].shape]
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    if window == 7:
        assert shape == ["batch", 3, 7, 7]
        return
    assert shape == ["batch", 3, "height", "width"]
    assert any("2..32" in str(w.message) for w in caught)
    inside = torch.randn(3, 3, 20, 30)
    np.testing.assert_allclose(session.run(None, {"x": inside.numpy()})[0],
                               model(inside).numpy())
