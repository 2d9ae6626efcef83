"""custom_translation_table written as torch.onnx documents it (issue 27 item 1).

Each form is exported through torch.onnx (dynamo=True) and onnxport with the same table; both
models run in ONNX Runtime, and their outputs are compared with each other and with the math
the translation states, their op types where the graphs are meant to match.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import onnxruntime as ort
import onnxscript
import pytest
import torch
from onnxscript import FLOAT, INT64
from onnxscript import opset18 as op

import onnxport
from onnxport._onnxscript import is_onnxport_translation, user_translation
from onnxport.translate import GraphBuilder

# -- custom operators --------------------------------------------------------------------------


@torch.library.custom_op("onnxport_ct::add", mutates_args=())
def ct_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


@ct_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


torch.library.define("onnxport_ct::addsub", "(Tensor x, Tensor y, float alpha=1.0) -> Tensor")


@torch.library.impl("onnxport_ct::addsub", "CompositeExplicitAutograd")
def _(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return x + alpha * y


@torch.library.register_fake("onnxport_ct::addsub")
def _(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return torch.empty_like(x)


# -- translations in torch.onnx's forms ---------------------------------------------------------

def custom_add(self, other):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return op.Sub(self, other)


def custom_add_typed(self: FLOAT, other: FLOAT) -> FLOAT:
    return op.Sub(self, other)


def custom_add_alpha(self, other, *, alpha: float = 1.0):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return op.Sub(self, op.Mul(other, op.CastLike(alpha, other)))


@onnxscript.script()
def script_add(self: FLOAT, other: FLOAT) -> FLOAT:
    return op.Sub(self, other)


@onnxscript.script()
def script_add_untyped(self, other):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return op.Sub(self, other)


def custom_gelu(self, approximate: str = "none"):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    scale = 1.702 if approximate == "none" else 1.5
    return op.Mul(self, op.Sigmoid(op.Mul(self, op.Constant(value_float=scale))))


def custom_gelu_untyped(self, approximate="none"):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return custom_gelu(self, approximate)


def custom_addsub(x, y, alpha: float = 1.0):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return op.Sub(x, op.Mul(y, op.Constant(value_float=alpha)))


def add_float(self: FLOAT, other: FLOAT) -> FLOAT:
    return op.Sub(self, other)


def add_int(self: INT64, other: INT64) -> INT64:
    return op.Mul(self, other)


def gelu_exact(self):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    return op.Relu(self)


def gelu_tanh(self, approximate: str):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    assert approximate == "tanh"
    return op.Tanh(self)


# -- helpers -----------------------------------------------------------------------------------

def _torch_onnx(model: torch.nn.Module, args: tuple[Any, ...], table: dict[Any, Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            return torch.onnx.export(model, args, dynamo=True, verbose=False,
                                     custom_translation_table=table)
        finally:
            logging.disable(logging.NOTSET)


def _onnxport(model: torch.nn.Module, args: tuple[Any, ...], table: dict[Any, Any]) -> Any:
    return onnxport.export(model, args, dynamo=True, custom_translation_table=table)


def _run(program: Any, args: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return session.run(None, feeds)


def _op_types(program: Any) -> list[str]:
    """The graph's op types, calls of model-local functions expanded, Constants left out."""
    functions = program.model.functions

    def expand(nodes: Any) -> list[str]:
        found = []
        for node in nodes:
            key = (node.domain, node.op_type, node.overload)
            if key in functions:
                found += expand(functions[key])
            elif node.op_type != "Constant":
                found.append(node.op_type)
        return found

    return expand(program.model.graph)


def _both(model: torch.nn.Module, args: tuple[torch.Tensor, ...], table: dict[Any, Any],
          expected: Any, *, same_ops: bool = True) -> tuple[Any, Any]:
    """Export with both exporters, compare outputs (with each other and `expected`) and ops."""
    theirs = _torch_onnx(model, args, table)
    ours = _onnxport(model, args, table)
    (their_out,) = _run(theirs, args)
    (our_out,) = _run(ours, args)
    np.testing.assert_allclose(our_out, their_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(our_out, expected.numpy(), rtol=1e-5, atol=1e-6)
    if same_ops:
        assert _op_types(ours) == _op_types(theirs)
    else:
        assert set(_op_types(ours)) == set(_op_types(theirs))
    return theirs, ours


class Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class AddAlpha(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(x, y, alpha=2)


X, Y = torch.randn(2, 3), torch.randn(2, 3)


# -- the forms ---------------------------------------------------------------------------------

@pytest.mark.parametrize("function", [custom_add, custom_add_typed], ids=["plain", "annotated"])
def test_plain_function_for_add_tensor(function: Any) -> None:
    theirs, ours = _both(Add(), (X, Y), {torch.ops.aten.add.Tensor: function}, X - Y)
    assert _op_types(ours) == ["Sub"]
    assert not ours.model.functions  # traced: the ops are in the graph itself


def test_add_alpha_not_declared_is_left_out() -> None:
    # torch.onnx passes alpha=2 to a function without such a parameter and fails;
    # onnxport passes only the attributes the function declares.
    with pytest.raises(Exception):  # noqa: B017, PT011
        _torch_onnx(AddAlpha(), (X, Y), {torch.ops.aten.add.Tensor: custom_add})
    ours = _onnxport(AddAlpha(), (X, Y), {torch.ops.aten.add.Tensor: custom_add})
    np.testing.assert_allclose(_run(ours, (X, Y))[0], (X - Y).numpy(), rtol=1e-6)


def test_keyword_only_attribute_is_passed_by_name() -> None:
    _both(AddAlpha(), (X, Y), {torch.ops.aten.add.Tensor: custom_add_alpha}, X - 2 * Y)
    # left to its default, the function's default applies
    _both(Add(), (X, Y), {torch.ops.aten.add.Tensor: custom_add_alpha}, X - Y)


def test_onnxscript_script_function() -> None:
    theirs, ours = _both(Add(), (X, Y), {torch.ops.aten.add.Tensor: script_add}, X - Y)
    # onnxport keeps it as a model-local ONNX function; torch.onnx inlines it
    assert [n.op_type for n in ours.model.graph] == ["script_add"]
    assert [n.op_type for n in theirs.model.graph] == ["Sub"]


def test_onnxscript_script_function_without_annotations() -> None:
    # torch.onnx 2.13 fails on it (its InlinePass); onnxport exports it.
    with pytest.raises(Exception, match="InlinePass"):
        _torch_onnx(Add(), (X, Y), {torch.ops.aten.add.Tensor: script_add_untyped})
    ours = _onnxport(Add(), (X, Y), {torch.ops.aten.add.Tensor: script_add_untyped})
    assert _op_types(ours) == ["Sub"]
    np.testing.assert_allclose(_run(ours, (X, Y))[0], (X - Y).numpy(), rtol=1e-6)


class Gelus(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate="tanh") + torch.nn.functional.gelu(y)


@pytest.mark.parametrize("function", [custom_gelu, custom_gelu_untyped],
                         ids=["annotated", "unannotated"])
def test_attribute_with_default(function: Any) -> None:
    expected = X * torch.sigmoid(1.5 * X) + Y * torch.sigmoid(1.702 * Y)
    _both(Gelus(), (X, Y), {torch.ops.aten.gelu.default: function}, expected)


def test_list_of_overloads_chosen_by_dtype() -> None:
    table = {torch.ops.aten.add.Tensor: [add_float, add_int]}
    i, j = torch.tensor([2, 3]), torch.tensor([4, 5])
    # torch.onnx 2.13 takes one function per op, not a list
    with pytest.raises(TypeError, match="not a sequence"):
        _torch_onnx(Add(), (X, Y), table)
    # each node gets the overload torch.onnx would run given that one function
    _both(Add(), (X, Y), {torch.ops.aten.add.Tensor: add_float}, X - Y)
    _both(Add(), (i, j), {torch.ops.aten.add.Tensor: add_int}, i * j)
    ours = _onnxport(Add(), (X, Y), table)
    assert _op_types(ours) == ["Sub"]
    np.testing.assert_allclose(_run(ours, (X, Y))[0], (X - Y).numpy(), rtol=1e-6)
    ours = _onnxport(Add(), (i, j), table)
    assert _op_types(ours) == ["Mul"]
    np.testing.assert_array_equal(_run(ours, (i, j))[0], (i * j).numpy())

    class Both(torch.nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return x + x, i + i

    ours = _onnxport(Both(), (X, i), table)
    assert sorted(_op_types(ours)) == ["Mul", "Sub"]
    out = _run(ours, (X, i))
    np.testing.assert_allclose(out[0], np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(out[1], (i * i).numpy())


def test_list_of_overloads_chosen_by_declared_attributes() -> None:
    # gelu(y) leaves approximate to its default: the first fits; gelu(x, approximate="tanh")
    # gives it: the one declaring it wins over the one that would leave it out.
    ours = _onnxport(Gelus(), (X, Y), {torch.ops.aten.gelu.default: [gelu_exact, gelu_tanh]})
    assert sorted(_op_types(ours)) == ["Add", "Relu", "Tanh"]
    np.testing.assert_allclose(_run(ours, (X, Y))[0], (torch.tanh(X) + torch.relu(Y)).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_list_of_overloads_mixing_forms() -> None:
    def mul_int(g, self, other, *, alpha=1):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        return g.op("Mul", self, other)  # onnxport's form gets every schema argument

    table = {torch.ops.aten.add.Tensor: [script_add, mul_int]}
    i, j = torch.tensor([2, 3]), torch.tensor([4, 5])
    ours = _onnxport(Add(), (X, Y), table)
    np.testing.assert_allclose(_run(ours, (X, Y))[0], (X - Y).numpy(), rtol=1e-6)
    ours = _onnxport(Add(), (i, j), table)  # script_add is FLOAT only: onnxport's form
    assert _op_types(ours) == ["Mul"]


class CustomOpModel(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ct_add(x, y) * 2


def test_custom_op_key() -> None:
    table = {torch.ops.onnxport_ct.add.default: custom_add}
    _both(CustomOpModel(), (X, Y), table, (X - Y) * 2, same_ops=False)


def test_custom_op_packet_key() -> None:
    # torch.onnx 2.13 wants the OpOverload; onnxport also takes the packet (all overloads)
    with pytest.raises(TypeError, match="OpOverloadPacket"):
        _torch_onnx(CustomOpModel(), (X, Y), {torch.ops.onnxport_ct.add: custom_add})
    theirs = _torch_onnx(CustomOpModel(), (X, Y), {torch.ops.onnxport_ct.add.default: custom_add})
    ours = _onnxport(CustomOpModel(), (X, Y), {torch.ops.onnxport_ct.add: custom_add})
    np.testing.assert_allclose(_run(ours, (X, Y))[0], _run(theirs, (X, Y))[0], rtol=1e-6)
    np.testing.assert_allclose(_run(ours, (X, Y))[0], ((X - Y) * 2).numpy(), rtol=1e-6)


class DefinedOpModel(torch.nn.Module):
    def __init__(self, alpha: float | None) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.alpha is None:
            return torch.ops.onnxport_ct.addsub(x, y) * 2
        return torch.ops.onnxport_ct.addsub(x, y, alpha=self.alpha) * 2


@pytest.mark.parametrize("alpha", [0.5, None])
def test_defined_op_with_fake_impl_key(alpha: float | None) -> None:
    table = {torch.ops.onnxport_ct.addsub.default: custom_addsub}
    expected = (X - (1.0 if alpha is None else alpha) * Y) * 2
    _both(DefinedOpModel(alpha), (X, Y), table, expected, same_ops=False)


def test_onnxport_form_in_the_same_table() -> None:
    def mul_as_div(g, self, other):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        return g.op("Div", self, other)

    def neg_as_abs(builder: GraphBuilder, self: Any) -> Any:
        return builder.op("Abs", self)

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return -((x + y) * y)

    table = {torch.ops.aten.add.Tensor: custom_add, torch.ops.aten.mul.Tensor: mul_as_div,
             torch.ops.aten.neg.default: neg_as_abs}
    ours = _onnxport(Model(), (X, Y), table)
    assert _op_types(ours) == ["Sub", "Div", "Abs"]
    np.testing.assert_allclose(_run(ours, (X, Y))[0], ((X - Y) / Y).abs().numpy(), rtol=1e-5)
    # the torch.onnx-form part, as torch.onnx exports it
    theirs = _torch_onnx(Model(), (X, Y), {torch.ops.aten.add.Tensor: custom_add})
    assert _op_types(theirs)[0] == "Sub"


def test_register_op_takes_the_same_forms() -> None:
    registry = onnxport.OnnxRegistry()
    registry.register_op(custom_addsub, "onnxport_ct", "addsub")
    registry.register_op([add_float, add_int], "aten", "add", "Tensor")
    program = onnxport.export(DefinedOpModel(0.25), (X, Y), registry=registry)
    np.testing.assert_allclose(_run(program, (X, Y))[0], ((X - 0.25 * Y) * 2).numpy(),
                               rtol=1e-6)
    program = onnxport.export(Add(), (X, Y), registry=registry)
    assert _op_types(program) == ["Sub"]


# -- the rule that tells the forms apart, and errors --------------------------------------------

def test_forms_are_told_apart() -> None:
    def ours_by_name(g, x):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        return x

    def ours_by_annotation(b: GraphBuilder, x: Any) -> Any:
        return x

    def ours_by_string_annotation(b: "GraphBuilder", x: Any) -> Any:  # noqa: UP037
        return x

    for fn in (ours_by_name, ours_by_annotation, ours_by_string_annotation, lambda g, x: x):
        assert is_onnxport_translation(fn)
        assert user_translation(fn) is fn
    for fn in (custom_add, custom_add_typed, custom_gelu, lambda x, y: x, lambda *a: a[0]):
        assert not is_onnxport_translation(fn)
        assert user_translation(fn) is not fn
    assert user_translation(user_translation(custom_add)).__wrapped__ is custom_add


def test_tensor_without_a_parameter_is_an_error() -> None:
    def takes_one(self):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        return op.Neg(self)

    with pytest.raises(onnxport.TranslationError, match="takes_one|tensor argument"):
        _onnxport(Add(), (X, Y), {torch.ops.aten.add.Tensor: takes_one})


def test_no_overload_fits() -> None:
    i, j = torch.tensor([2, 3]), torch.tensor([4, 5])
    with pytest.raises(onnxport.TranslationError, match="no translation in the list fits"):
        _onnxport(Add(), (i, j), {torch.ops.aten.add.Tensor: [add_float, custom_add_typed]})


def test_plain_function_calling_a_script_function() -> None:
    def nested(self, other):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        return op.Reshape(script_add(self, other), op.Constant(value_ints=[3, 2]))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return (x + y).reshape(3, 2)

    theirs, ours = _both(Model(), (X, Y), {torch.ops.aten.add.Tensor: nested},
                         (X - Y).reshape(3, 2), same_ops=False)
    assert _op_types(ours)[:2] == ["Sub", "Reshape"]
