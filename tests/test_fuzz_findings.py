"""What the widened fuzz found (issue 27 item 7), each case exported by torch.onnx and by
onnxport with the same call, and the results compared: the graph inputs (names and which
dims are dynamic), ONNX Runtime's outputs (against eager, at the example's batch and at
another), the checker with shape inference, and the warnings.

* max_pool in ceil mode where torch drops the last window (it would start in the right
  padding): the file must pass `check_model(full_check=True)` (seed 10298).
* from the 5000-seed run: a dilated ceil-mode max_pool window that holds only padding
  (-inf and torch's index, seeds 11994 and 14247); adaptive_max_pool of a batch of 0 (seed
  11420 and four more).
* a dim the user asked to be dynamic stays dynamic wherever torch.onnx keeps it (the
  suggested-fix retry made it static: seeds 10122 and friends; strict capture specialised it
  silently: seed 10117); where no strategy keeps it (the model specialises it, or its size
  1 changes what the model computes: seed 10144), it becomes static only with a warning that
  names it.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Callable
from typing import Any

import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

import onnxport

Dim = torch.export.Dim


class _M(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


def _export(exporter: str, model: torch.nn.Module, x: torch.Tensor, dynamo: bool,
            **kwargs: Any) -> tuple[bytes, list[str]]:
    """The file and the warnings of one export."""
    buf = io.BytesIO()
    logging.getLogger("torch").setLevel(logging.ERROR)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export = onnxport.export if exporter == "onnxport" else torch.onnx.export
        export(model, (x,), buf, dynamo=dynamo, **kwargs)
    return buf.getvalue(), [str(w.message) for w in caught
                            if issubclass(w.category, UserWarning)
                            and "deprecated" not in str(w.message)]


def _inputs(data: bytes) -> list[tuple[str, list[Any]]]:
    model = onnx.load_from_string(data)
    return [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
            for i in model.graph.input]


def _run(data: bytes, x: torch.Tensor) -> list[Any]:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


def _assert_eager(data: bytes, model: torch.nn.Module, x: torch.Tensor) -> None:
    expected = model(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = _run(data, x)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(torch.from_numpy(a), e)


def _checks(data: bytes) -> bool:
    try:
        onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    except onnx.checker.ValidationError:
        return False
    return True


# -- max_pool in ceil mode ------------------------------------------------------------------

_POOLS = [
    # seed 10298: the middle axis's last window would start in the right padding
    ("max_pool3d", (3, 1, 3, 3, 3), {"kernel_size": 2, "stride": [2, 3, 2], "padding": 0,
                                     "ceil_mode": True}),
    ("max_pool1d", (2, 3, 4), {"kernel_size": 1, "stride": 2, "ceil_mode": True}),
    ("max_pool1d", (2, 3, 7), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True,
                               "return_indices": True}),
    ("max_pool2d", (2, 2, 5, 6), {"kernel_size": [2, 3], "stride": [3, 2], "padding": [1, 1],
                                  "dilation": [1, 2], "ceil_mode": True}),
]


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("fn,shape,kw", _POOLS, ids=[f"{f}-{s}" for f, s, _ in _POOLS])
def test_max_pool_ceil_mode_like_torch_onnx(fn: str, shape: tuple[int, ...], kw: dict[str, Any],
                                            dynamo: bool) -> None:
    model = _M(lambda x: getattr(F, fn)(x, **kw))
    x = torch.randn(*shape)
    names = {} if dynamo else {"input_names": ["x"]}
    mine, mine_warned = _export("onnxport", model, x, dynamo, **names)
    theirs, _ = _export("torch.onnx", model, x, dynamo, **names)
    assert _checks(mine), "onnxport's file fails the checker with shape inference"
    assert _inputs(mine) == _inputs(theirs)
    _assert_eager(mine, model, x)
    # torch.onnx's file runs in ONNX Runtime (whose kernel drops the window) even where its
    # ceil-mode node fails the checker (its dynamo flavour, for the dropped-window cases).
    for a, b in zip(_run(mine, x), _run(theirs, x)):
        assert a.shape == b.shape
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b))
    assert mine_warned == []


# -- found by the 5000-seed run (seeds 10000-14999) ----------------------------------------

# A dilated window in ceil mode can hold padding only: torch gives -inf and, as index, its
# start moved past the left padding (seeds 11994, 14247); MaxPool gives the lowest float.
_EMPTY_WINDOWS = [
    ("max_pool1d", (3, 4, 1), {"kernel_size": 3, "padding": 1, "dilation": 2,
                               "ceil_mode": True, "return_indices": True}),
    ("max_pool3d", (2, 6, 1, 4, 4), {"kernel_size": [2, 3, 3], "padding": [1, 0, 0],
                                     "dilation": [2, 1, 1], "ceil_mode": True}),
    ("max_pool2d", (1, 2, 1, 5), {"kernel_size": [3, 2], "padding": [1, 0],
                                  "dilation": [2, 1], "ceil_mode": True,
                                  "return_indices": True}),
]


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("fn,shape,kw", _EMPTY_WINDOWS,
                         ids=[f"{f}-{s}" for f, s, _ in _EMPTY_WINDOWS])
def test_max_pool_window_of_padding_only(fn: str, shape: tuple[int, ...], kw: dict[str, Any],
                                         dynamo: bool) -> None:
    model = _M(lambda x: getattr(F, fn)(x, **kw))
    x = torch.randn(*shape)
    expected = model(x)
    assert torch.isinf(expected[0] if isinstance(expected, tuple) else expected).any()
    mine, _ = _export("onnxport", model, x, dynamo, **({} if dynamo else {"input_names": ["x"]}))
    assert _checks(mine)
    _assert_eager(mine, model, x)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("out,indices", [([3, 3], True), ([5, 3], False)])
def test_adaptive_max_pool_of_an_empty_batch(out: list[int], indices: bool,
                                             dynamo: bool) -> None:
    """Seeds 11420 and friends: a batch of 0 through adaptive_max_pool with uneven windows
    made a Reshape to [0, 0, -1], which ONNX refuses. (torch.onnx's TorchScript flavour
    refuses uneven adaptive windows at any batch.)"""
    model = _M(lambda x: F.adaptive_max_pool2d(x, out, return_indices=indices))
    x = torch.randn(0, 3, 5, 8)
    mine, _ = _export("onnxport", model, x, dynamo, **({} if dynamo else {"input_names": ["x"]}))
    assert _checks(mine)
    _assert_eager(mine, model, x)


# -- dims asked to be dynamic ---------------------------------------------------------------

# (model, example, another batch): torch.onnx keeps dim 0 dynamic in each
_KEPT = {
    # seed 10122: unflatten(0, (2, -1)) of a batch of 2 derives a size 1; the suggested fix
    # was `batch = 2`
    "unflatten_batch": (lambda x: x.unflatten(0, (2, -1)).logical_not(), torch.randn(2, 4, 8) > 0,
                        torch.randn(6, 4, 8) > 0),
    # reshapes that fold the batch: guards on batch % k, kept as run-time asserts
    "fold_flat": (lambda x: x.reshape(-1, 8) * 2, torch.randn(2, 4), torch.randn(6, 4)),
    "fold_pairs": (lambda x: x.reshape(-1, 2, 4).sum(1), torch.randn(4, 4), torch.randn(8, 4)),
    "fold_odd": (lambda x: x.reshape(-1, 3) + 1, torch.randn(3, 4), torch.randn(6, 4)),
    # a branch on the batch size (a guard torch.export cannot express as a range)
    "batch_branch": (lambda x: x * 2 if x.shape[0] != 4 else x - 1, torch.randn(2, 4),
                     torch.randn(3, 4)),
}


@pytest.mark.parametrize("case", sorted(_KEPT))
def test_dynamic_batch_stays_dynamic_like_torch_onnx(case: str) -> None:
    fn, x, other = _KEPT[case]
    model = _M(fn)
    spec = {"dynamic_shapes": ({0: Dim("batch")},)}
    mine, mine_warned = _export("onnxport", model, x, True, **spec)
    theirs, _ = _export("torch.onnx", model, x, True, **spec)
    assert _inputs(theirs)[0][1][0] == "batch"  # torch.onnx keeps it (the premise)
    assert _inputs(mine) == _inputs(theirs)
    assert _checks(mine)
    for y in (x, other):
        _assert_eager(mine, model, y)
        for a, b in zip(_run(mine, y), _run(theirs, y)):
            assert (a == b).all() if a.dtype == bool else torch.allclose(
                torch.from_numpy(a), torch.from_numpy(b))
    assert not [w for w in mine_warned if "dynamic" in w], mine_warned


class _StrictSpecialises(torch.nn.Module):
    """Seed 10117: dims 0 and 1 dynamic; non-strict capture rejects the spec (a guard on dim
    1), strict capture accepted it by specialising dim 1 to 3, silently."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm0 = torch.nn.LayerNorm(1)

    def forward(self, x: torch.Tensor) -> Any:
        v1 = x[..., ::2]
        v2 = F.leaky_relu(v1, 1.5)
        v3 = v2.narrow(1, 2, v2.shape[1] - 2)
        v4 = self.norm0(v1)
        v6 = v4[0]
        return v6, v6, v3


def test_strict_capture_does_not_specialise_a_dim_torch_onnx_keeps() -> None:
    model = _StrictSpecialises().eval()
    x = torch.randn(2, 3, 1)
    spec = {"dynamic_shapes": ({0: Dim("batch"), 1: Dim("d1")},)}
    mine, mine_warned = _export("onnxport", model, x, True, **spec)
    theirs, _ = _export("torch.onnx", model, x, True, **spec)
    assert _inputs(theirs)[0][1][:2] == ["batch", "d1"]  # the premise
    assert _inputs(mine) == _inputs(theirs)
    for y in (x, torch.randn(3, 5, 1)):
        with torch.no_grad():
            _assert_eager(mine, model, y)
    assert not [w for w in mine_warned if "static" in w or "specialises" in w], mine_warned


@pytest.mark.parametrize("style", ["named", "string"])
def test_a_dim_no_strategy_keeps_is_static_with_a_warning_naming_it(style: str) -> None:
    """The model adds a buffer of the example's full shape: batch is specialised by any
    capture. Both exporters make it static; onnxport's warning names the input, the axis and
    the user's name (torch.onnx's dynamo flavour warns of nothing)."""

    class Specialise(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("buf", torch.ones(2, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.buf

    model = Specialise()
    x = torch.randn(2, 4)
    if style == "named":
        spec = {"dynamic_shapes": ({0: Dim("batch")},)}
        mine, mine_warned = _export("onnxport", model, x, True, **spec)
        theirs, _ = _export("torch.onnx", model, x, True, **spec)
        assert [s for _, s in _inputs(mine)] == [s for _, s in _inputs(theirs)] == [[2, 4]]
        _assert_eager(mine, model, x)
        named = [w for w in mine_warned if re.search(r"'x' axis 0 \('batch'\)", w)]
        assert named, mine_warned
    else:
        # a string is Dim.DYNAMIC, for which torch.export refuses the specialisation: both
        # exporters refuse, onnxport naming the input and dim
        spec = {"dynamic_shapes": ({0: "batch"},)}
        with pytest.raises(onnxport.OnnxExporterError, match=r"input 'x' dim 0"):
            _export("onnxport", model, x, True, **spec)
        with pytest.raises(torch.onnx.errors.OnnxExporterError):
            _export("torch.onnx", model, x, True, **spec)


def test_a_dim_whose_size_one_changes_the_rank_is_static_with_a_warning() -> None:
    """Seed 10144: `unflatten(0, (2, -1))` of a batch of 2 and `squeeze(1)`: the output's rank
    depends on the batch (1 → squeezed), which no ONNX graph with a dynamic batch can say.
    Capture treating size 1 like any other gives a program whose shapes differ from eager's
    at the example itself, so onnxport keeps the suggested fix (`batch = 2`, static) and
    warns naming the dim; torch.onnx keeps `batch` and its file matches eager only where the
    derived size is 1."""
    model = _M(lambda x: x.unflatten(0, (2, -1)).squeeze(1))
    x = torch.randn(2, 3, 1)
    assert model(x).dim() != model(torch.randn(4, 3, 1)).dim()  # the premise
    spec = {"dynamic_shapes": ({0: Dim("batch")},)}
    mine, mine_warned = _export("onnxport", model, x, True, **spec)
    theirs, _ = _export("torch.onnx", model, x, True, **spec)
    assert _inputs(mine) == [("x", [2, 3, 1])]
    assert _inputs(theirs) == [("x", ["batch", 3, 1])]
    _assert_eager(mine, model, x)
    for a, b in zip(_run(mine, x), _run(theirs, x)):
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b))
    assert [w for w in mine_warned if re.search(r"'x' axis 0 \('batch'\)", w)], mine_warned


def test_a_dim_whose_fix_torch_cannot_word() -> None:
    """Seeds 13045 and 14241: the model folds the batch (`reshape(-1, 3)`); torch.export's
    non-strict capture crashes while wording its suggested fix ("Cannot create Dim with
    inconsistent min=1, max=1"), and strict capture reports a constraint violation. onnxport
    read only the first error and raised a CaptureError naming nothing; it now reads the
    other strategy's violation and captures with the guards as run-time asserts: the batch
    stays dynamic and the file matches eager at another batch."""
    from tests.fuzz.generator import generate

    case = generate(13045)
    x = case.args[0]
    mine, _ = _export("onnxport", case.module, x, True, dynamic_shapes=({0: Dim("batch")},))
    assert _inputs(mine)[0][1][0] == "batch"
    assert _checks(mine)
    for y in (x, torch.cat([x, x])):
        with torch.no_grad():
            expected = torch.utils._pytree.tree_leaves(case.module(y))
        for a, e in zip(_run(mine, y), expected):
            torch.testing.assert_close(torch.from_numpy(a), e)
