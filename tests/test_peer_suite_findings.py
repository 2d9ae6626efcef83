"""Findings of PyTorch's own exporter tests run with onnxport (benchmarks/bench_pytorch_exporter_tests.py).

onnxport's verification API takes torch.onnx's ONNXProgram as well as its own: the suite's
test_verification and every assert_onnx_program call pass with onnxport's checks on
torch.onnx's programs (the `torch.onnx+onnxport.testing` flavour of the benchmark).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import onnxport
from onnxport.testing import assert_onnx_program
from onnxport.verification import find_first_divergence, verify_onnx_program
from tests.verify import models as m


class _AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = a + b
        return c - 1, c


def _torch_onnx(model: torch.nn.Module, args: tuple, **options) -> torch.onnx.ONNXProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model.eval(), args, dynamo=True, verbose=False, **options)


@pytest.fixture(scope="module")
def add_sub_torch_onnx() -> torch.onnx.ONNXProgram:
    return _torch_onnx(_AddSub(), (torch.tensor([1.0]), torch.tensor([2.0])))


def test_verify_onnx_program_with_intermediates_on_torch_onnx_program(add_sub_torch_onnx) -> None:
    # Was: AttributeError 'ONNXProgram' object has no attribute 'runtime_options'.
    from torch.onnx._internal.exporter import _verification

    args = (torch.tensor([1.0]), torch.tensor([2.0]))
    program = add_sub_torch_onnx
    theirs = _verification.verify_onnx_program(program, args, compare_intermediates=True)
    ours = verify_onnx_program(program, args, compare_intermediates=True)
    # torch.onnx's graph has add, scalar_tensor_default (the 1 of `c - 1`), sub
    assert [i.name for i in ours] == [i.name for i in theirs]
    assert len(ours) == 3
    assert all(i.max_abs_diff == 0 for i in ours)


def test_verify_onnx_program_with_intermediates_on_onnxport_program(add_sub_torch_onnx) -> None:
    # The int 1 of `c - 1` on a float tensor is an explicit scalar_tensor node, as in
    # torch.onnx's program (capture/explicit_scalars.py): the same three values are compared.
    from torch.onnx._internal.exporter import _verification

    args = (torch.tensor([1.0]), torch.tensor([2.0]))
    program = onnxport.export(_AddSub(), args)
    infos = verify_onnx_program(program, args, compare_intermediates=True)
    assert [(i.name, i.max_abs_diff) for i in infos] == \
        [("add", 0), ("scalar_tensor_default", 0), ("sub", 0)]
    theirs = _verification.verify_onnx_program(add_sub_torch_onnx, args, compare_intermediates=True)
    assert [i.name for i in infos] == [i.name for i in theirs]


@pytest.fixture(scope="module")
def wrong_tanh() -> tuple[torch.nn.Module, tuple, Any]:
    """torch.onnx's program of an MLP whose tanh is translated as a sigmoid."""
    model = m.MLP().eval()
    args = (torch.randn(4, 6),)
    return model, args, _torch_onnx(model, args, custom_translation_table={
        torch.ops.aten.tanh.default: m.torch_onnx_sigmoid})


def test_wrong_translation_in_torch_onnx_program_is_named_by_onnxport(wrong_tanh) -> None:
    # Was: "(finding the first wrong node failed: AttributeError ...)" under the assertion.
    model, args, program = wrong_tanh
    with pytest.raises(AssertionError, match="tanh"):
        assert_onnx_program(program)
    report = find_first_divergence(program, args)
    assert report.first is not None and report.first.name == "tanh"
    clean = _torch_onnx(model, args)
    assert_onnx_program(clean)
    assert find_first_divergence(clean, args).first is None


@pytest.mark.parametrize("namespace", ["torch.onnx", "onnxport"])
def test_exportable_module_is_abstract(namespace: str) -> None:
    # Was: onnxport's ExportableModule could be instantiated without example_arguments.
    base = torch.onnx.ExportableModule if namespace == "torch.onnx" else onnxport.ExportableModule
    with pytest.raises(TypeError, match="example_arguments"):
        base()

    class Incomplete(base):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    with pytest.raises(TypeError, match="example_arguments"):
        Incomplete()

    class Complete(Incomplete):
        def example_arguments(self) -> tuple:
            return (torch.randn(2, 3),), None

    x = torch.randn(4, 3)
    program = Complete().to_onnx(dynamo=True, dynamic_shapes=({0: "batch"},))
    torch.testing.assert_close(program(x)[0], x * 2)


class _AddXY(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: Any) -> torch.Tensor:
        return x + (y if isinstance(y, torch.Tensor) else y[0])


@pytest.mark.parametrize("namespace", ["torch.onnx", "onnxport"])
def test_input_observer_info(namespace: str) -> None:
    # Was: AttributeError 'InputObserver' object has no attribute 'info' (23 of the suite's
    # 30 InputObserver tests read it).
    observer = (torch.onnx if namespace == "torch.onnx" else onnxport).InputObserver()
    model = _AddXY()
    inputs = [(torch.randn(5, 6), torch.randn(1, 6)), (torch.randn(7, 7), torch.randn(1, 7)),
              (torch.randn(7, 8), torch.randn(1, 8)), (torch.randn(7, 9), torch.randn(1, 9))]
    with observer(model):
        for args in inputs:
            model(*args)
    assert len(observer.info) == 3  # store_n_calls
    for i in range(3):
        torch.testing.assert_close(observer.info.flat_outputs[i][0], model(*inputs[i]))
    observer.infer_dynamic_shapes()
    for candidate, args in zip(observer.info.inputs, inputs):
        assert candidate.str_obs().startswith("InputCandidate(args=#2")
        assert [t.shape for t in candidate.flat_list] == [a.shape for a in args]
        assert [t.shape for t in candidate.aligned_flat_list] == [a.shape for a in args]


@pytest.mark.parametrize("namespace", ["torch.onnx", "onnxport"])
def test_input_observer_error_texts(namespace: str) -> None:
    # torch.onnx's texts begin onnxport's messages (code matches on them).
    make = (torch.onnx if namespace == "torch.onnx" else onnxport).InputObserver
    model = _AddXY()
    with pytest.raises(RuntimeError, match="No inputs were captured."):
        make().infer_dynamic_shapes()
    observer = make()
    with observer(model):
        model(torch.randn(5, 7), [torch.randn(1, 7)])
        model(torch.randn(5, 7), [torch.randn(1, 7), torch.randn(1, 7)])
    with pytest.raises(RuntimeError, match="Positional argument 1 has"):
        observer.infer_dynamic_shapes()
    observer = make()
    with observer(model):
        model(x=torch.randn(5, 7), y=[torch.randn(1, 7)])
        model(x=torch.randn(5, 7), y=[torch.randn(1, 7), torch.randn(1, 7)])
    with pytest.raises(RuntimeError, match="Named argument 'y' has"):
        observer.infer_dynamic_shapes()

    class Either(torch.nn.Module):
        def forward(self, x: Any = None, y: Any = None) -> Any:
            return x if y is None else y

    either, observer = Either(), make()
    with observer(either):
        either(x=torch.randn(5, 6))
        either(y=torch.randn(1, 7))
    with pytest.raises(RuntimeError, match="At least one call to the observed model"):
        observer.infer_dynamic_shapes()


_OBSERVED = [(torch.randn(5, 6), torch.randn(1, 6)), (torch.randn(7, 7), torch.randn(1, 7)),
             (torch.randn(7, 8), torch.randn(1, 8)), (torch.randn(7, 9), torch.randn(1, 9))]


@pytest.fixture(scope="module")
def size_one_broadcast() -> tuple[Any, Any, Any]:
    """`x + y` with `y` of size 1 on an axis `set_batch_dimension_for=True` makes dynamic:
    (observed calls' model, onnxport's program, torch.onnx's program)."""
    model, observer = _AddXY(), onnxport.InputObserver()
    with observer(model):
        for args in _OBSERVED:
            model(*args)
    args = observer.infer_arguments()
    shapes = observer.infer_dynamic_shapes(set_batch_dimension_for=True)
    assert args[1].shape[0] == 1 and 0 in shapes[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = onnxport.export(model, args, dynamic_shapes=shapes)
    return model, ours, _torch_onnx(model, args, dynamic_shapes=shapes)


def test_size_one_broadcast_against_dynamic_dim_is_captured(size_one_broadcast) -> None:
    # Was: ForwardError "The size of tensor a (s77) must match the size of tensor b (s17)"
    # (the suite's test_io_check_discrepancies, test_io_captured_different_order): captured
    # size-oblivious, the broadcast of y's size-1 dim is kept as a run-time assert, as
    # torch.onnx captures it.
    model, ours, theirs = size_one_broadcast
    for args in _OBSERVED:
        expected = model(*args)
        torch.testing.assert_close(ours(*args)[0], expected)
        torch.testing.assert_close(theirs(*args)[0], expected)
    dims = [[d.value for d in v.shape] for v in ours.model.graph.inputs]
    assert all(isinstance(d, str) for shape in dims for d in shape), dims  # all dynamic


def test_inconsistent_sizes_are_not_deferred() -> None:
    # Only a size-1 equality may be deferred: sizes 5 and 3 still fail as eager does.
    args = (torch.randn(5, 6), torch.randn(3, 1))
    shapes = ({0: "a", 1: "b"}, {0: "c", 1: "d"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(onnxport.errors.ForwardError, match="must match the size"):
            onnxport.export(_AddXY(), args, dynamic_shapes=shapes)


@pytest.mark.parametrize("namespace", ["torch.onnx", "onnxport"])
def test_input_observer_named_where_reference_is_positional_raises(namespace: str) -> None:
    # Was: onnxport aligned y= with the reference's positional y (the suite's
    # test_io_mixed_args_kwargs_as_dict_2); torch.onnx 2.13 raises, and so does onnxport now.
    class Optional(torch.nn.Module):
        def forward(self, x: Any = None, y: Any = None) -> Any:
            return y if x is None else x + y

    model, observer = Optional(), (torch.onnx if namespace == "torch.onnx"
                                   else onnxport).InputObserver()
    with observer(model, store_n_calls=4):
        model(y=torch.randn(5, 6))
        model(torch.randn(5, 7), torch.randn(5, 7))
    with pytest.raises(RuntimeError, match="At least one call to the observed model must "
                                           "contain all the named arguments"):
        observer.infer_dynamic_shapes()


def test_verification_interpreter(add_sub_torch_onnx, wrong_tanh) -> None:
    # torch.onnx's private _VerificationInterpreter (the suite's
    # test_interpreter_stores_correct_info): onnxport's own, on both exporters' programs.
    from torch.onnx._internal.exporter import _verification

    from onnxport.verification import _VerificationInterpreter

    args = (torch.tensor([1.0]), torch.tensor([2.0]))
    ours = _VerificationInterpreter(onnxport.export(_AddSub(), args))
    torch.testing.assert_close(ours.run(args), _AddSub()(*args))
    assert [(i.name, i.max_abs_diff) for i in ours.verification_infos] == \
        [("add", 0), ("scalar_tensor_default", 0), ("sub", 0)]
    program = add_sub_torch_onnx
    ours, theirs = _VerificationInterpreter(program), _verification._VerificationInterpreter(program)
    ours.run(args)
    theirs.run(args)
    assert [i.name for i in ours.verification_infos] == [i.name for i in theirs.verification_infos]
    # A wrong translation is seen at its node.
    _, x, wrong = wrong_tanh
    checker = _VerificationInterpreter(wrong)
    checker.run(*x)
    assert next(i.name for i in checker.verification_infos if i.max_abs_diff > 0.01) == "tanh"
