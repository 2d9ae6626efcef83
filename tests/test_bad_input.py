"""Bad input: every mistake is refused with a typed error that names the argument or the cause.

Each case is called through torch.onnx 2.13 and onnxport in the same run. Where torch.onnx
accepts the call silently (opset 99, three input names for one input, ...), onnxport raising is
the improvement, and both behaviours are asserted. After every failure, a good model that was
already at the destination is byte-identical and nothing else was written beside it.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import onnxport
from onnxport import errors
from onnxport._validate import MIN_OPSET, max_opset
from onnxport.capture import capture

THIS_FILE = os.path.basename(__file__)
DOCUMENTED = (onnxport.OnnxExporterError, TypeError, ValueError)


def _line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if marker in line and "_line_of" not in line:
                return number
    raise AssertionError(marker)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))  # FC-LINE


class _Two(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x * y


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != 3:
            raise ValueError(f"batch must be 3, got {x.shape[0]}")  # RAISE-LINE
        return x


class _ReturnsString(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x + 1, {"name": "hello", "scores": x * 2}


class _ReturnsObject(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return [x + 1, object()]


class _ReturnsNumbers(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x + 1, 3, None, 2.5


X = torch.randn(2, 4)


# -- the destination: a good earlier file that a failure must leave alone ---------------------

@pytest.fixture(scope="module")
def good_bytes() -> bytes:
    buffer = io.BytesIO()
    onnxport.export(nn.Linear(4, 3), (torch.randn(2, 4),), buffer)
    return buffer.getvalue()


@pytest.fixture
def dest(tmp_path: Path, good_bytes: bytes) -> Iterator[Path]:
    """tmp_path/out/model.onnx holding a good model; unchanged and alone after the test."""
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "model.onnx"
    path.write_bytes(good_bytes)
    yield path
    assert path.read_bytes() == good_bytes, "the good file at f was changed"
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx"], "files left beside f"


def _outcome(call: Callable[[], Any]) -> str:
    """"ok" or the exception's type name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except Exception as e:  # noqa: BLE001
            return type(e).__name__
    return "ok"


def _torch_onnx(tmp_path: Path, model: Any, args: Any, **options: Any) -> str:
    torch_dir = tmp_path / "torch_onnx"
    torch_dir.mkdir(exist_ok=True)
    options.setdefault("f", torch_dir / "model.onnx")
    f = options.pop("f")
    return _outcome(lambda: torch.onnx.export(model, args, f, **options))


def _refused(dest: Path, error: type[BaseException] | tuple[type[BaseException], ...],
             model: Any, args: Any, **options: Any) -> BaseException:
    """onnxport.export(...) into `dest` raises `error`; returns it."""
    options.setdefault("f", dest)
    f = options.pop("f")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as info:
            onnxport.export(model, args, f, **options)
    assert isinstance(info.value, DOCUMENTED)
    return info.value


# -- 1. arguments checked before any capture ---------------------------------------------------

@pytest.fixture
def no_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if onnxport's capture runs: these mistakes are caught before it."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torch.export ran before the arguments were checked")

    monkeypatch.setattr(onnxport.capture.dynamo, "_export", refuse)


@pytest.mark.parametrize("dynamo", [True, False])
@pytest.mark.parametrize("opset, torch_dynamo, torch_torchscript", [
    (3, "ok", "RuntimeError"),      # torch.onnx's dynamo flavour accepts 3 and 99 silently
    (6, "ok", "ok"),                # torch.onnx writes a model ONNX Runtime cannot run
    (99, "ok", "RuntimeError"),
])
def test_opset_out_of_range(tmp_path: Path, dest: Path, dynamo: bool, opset: int,
                            torch_dynamo: str, torch_torchscript: str) -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    expected = torch_dynamo if dynamo else torch_torchscript
    assert _torch_onnx(tmp_path, model, (X,), opset_version=opset, dynamo=dynamo) == expected
    error = _refused(dest, ValueError, model, (X,), opset_version=opset, dynamo=dynamo)
    assert f"opset_version={opset}" in str(error)
    assert f"opsets {MIN_OPSET} to {max_opset()}" in str(error)


@pytest.mark.parametrize("opset", ["18", 18.0, True])
def test_opset_of_the_wrong_type(tmp_path: Path, dest: Path, opset: Any) -> None:
    error = _refused(dest, TypeError, nn.Linear(4, 3), (X,), opset_version=opset)
    assert "opset_version must be an int" in str(error)
    if isinstance(opset, str):  # torch.onnx: a comparison deep inside fails
        assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), opset_version=opset) == "TypeError"


@pytest.mark.parametrize("dynamo", [True, False])
def test_opset_range_ends_export_and_run(dynamo: bool) -> None:
    """The ends of the range say what works: MIN_OPSET and the newest opset onnx defines
    give models ONNX Runtime runs; one below MIN_OPSET does not (ORT lacks the kernels)."""
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    for opset in (MIN_OPSET, max_opset()):
        buffer = io.BytesIO()
        onnxport.export(model, (X,), buffer, opset_version=opset, dynamo=dynamo)
        proto = onnx.load_from_string(buffer.getvalue())
        assert {o.domain: o.version for o in proto.opset_import}[""] == opset
        session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {session.get_inputs()[0].name: X.numpy()})
        torch.testing.assert_close(torch.from_numpy(got), model(X).detach())


def test_input_names_longer_than_the_inputs(tmp_path: Path, dest: Path, no_capture: None) -> None:
    # torch.onnx accepts three names for one input, in both flavours.
    error = _refused(dest, ValueError, nn.Linear(4, 3), (X,), input_names=["a", "b", "c"])
    assert "input_names has 3 names ('a', 'b', 'c')" in str(error)
    assert "make 1 graph input" in str(error) and "at most 1" in str(error)


def test_torchscript_input_names_may_name_the_weights(tmp_path: Path, dest: Path) -> None:
    """dynamo=False: names past the inputs name the weights (torch.onnx's AlexNet example);
    more names than inputs and weights together are refused."""
    onnxport.export(nn.Linear(4, 3), (X,), tmp_path / "ok.onnx", dynamo=False,
                    input_names=["x", "w", "b"])
    error = _refused(dest, ValueError, nn.Linear(4, 3), (X,), input_names=list("abcd"),
                     dynamo=False)
    assert "1 graph input (one per tensor in args and kwargs) and 2 weights" in str(error)


def test_input_names_compared_with_torch_onnx(tmp_path: Path) -> None:
    for dynamo in (True, False):
        assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), input_names=["a", "b", "c"],
                           dynamo=dynamo) == "ok"
    assert _torch_onnx(tmp_path, _Two(), (X, X), input_names=["a", "a"]) == "ValueError"
    assert _torch_onnx(tmp_path, _Two(), (X, X), input_names=["a", "a"], dynamo=False) == "ok"
    assert _torch_onnx(tmp_path, _Two(), (X, X), output_names=["a", "a"]) == "ValueError"
    assert _torch_onnx(tmp_path, _Two(), (X, X), output_names=["a", "a"], dynamo=False) == "ok"
    # a name in both lists: accepted by both flavours of torch.onnx
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), input_names=["a"],
                       output_names=["a"]) == "ok"
    # a name that is not a string: torch.onnx fails while serializing
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), input_names=[1]) == "SerdeError"


@pytest.mark.parametrize("dynamo", [True, False])
@pytest.mark.parametrize("options, error, words", [
    ({"input_names": ["a", "a"]}, ValueError, "input_names holds 'a' more than once"),
    ({"output_names": ["a", "a"]}, ValueError, "output_names holds 'a' more than once"),
    ({"input_names": [1, 2]}, TypeError, "input_names[0] must be a string, got int"),
    ({"output_names": "y"}, TypeError, "output_names must be a list of strings"),
    ({"input_names": ["x", ""]}, ValueError, "input_names[1] is an empty string"),
    ({"input_names": ["a", "b"], "output_names": ["b"]}, ValueError,
     "'b' is in both input_names and output_names"),
])
def test_malformed_names(dest: Path, no_capture: None, dynamo: bool, options: dict[str, Any],
                         error: type[Exception], words: str) -> None:
    assert words in str(_refused(dest, error, _Two(), (X, X), dynamo=dynamo, **options))


def test_output_names_longer_than_the_outputs_at_capture() -> None:
    with pytest.raises(ValueError, match=r"output_names has 3 names \('a', 'b', 'c'\), but the "
                                         r"model returns 2 outputs: give at most 2"):
        capture(_Two(), (X, X), None, output_names=["a", "b", "c"])
    capture(_Two(), (X, X), None, output_names=["a", "b"])  # as many as there are: fine


def test_output_names_longer_than_an_exported_programs_outputs(dest: Path) -> None:
    program = torch.export.export(_Two(), (X, X))
    error = _refused(dest, ValueError, program, (), output_names=["a", "b", "c"])
    assert "the ExportedProgram returns 2 outputs" in str(error)


def test_output_names_longer_than_the_outputs(tmp_path: Path, dest: Path) -> None:
    # torch.onnx: the dynamo flavour accepts it silently, the TorchScript one refuses it.
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), output_names=["a", "b"]) == "ok"
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), output_names=["a", "b"],
                       dynamo=False) == "RuntimeError"
    error = _refused(dest, ValueError, nn.Linear(4, 3), (X,), output_names=["a", "b"])
    assert "output_names has 2 names" in str(error)


@pytest.mark.parametrize("options, torch_dynamo, words", [
    ({"dynamic_shapes": {"z": {0: "batch"}}}, "TorchExportError",
     "dynamic_shapes names 'z', which is not among the inputs given (input)"),
    ({"dynamic_shapes": {"input": {5: "batch"}}}, "IndexError",
     "dynamic_shapes for input 'input' names axis 5, but the input has 2 dims"),
    ({"dynamic_axes": {"z": {0: "batch"}}}, "ok",
     "dynamic_axes names 'z', which is neither a graph input nor a parameter"),
    ({"dynamic_axes": {"input": {5: "batch"}}}, "IndexError",
     "dynamic_axes['input'] names axis 5, but input 'input' has 2 dims"),
])
def test_dynamic_specs_naming_unknown_inputs_or_axes(tmp_path: Path, dest: Path,
                                                     no_capture: None, options: dict[str, Any],
                                                     torch_dynamo: str, words: str) -> None:
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), **options) == torch_dynamo
    assert words in str(_refused(dest, ValueError, nn.Linear(4, 3), (X,), **options))


@pytest.mark.parametrize("axes, torch_torchscript, words", [
    ({"z": {0: "batch"}}, "ok", "dynamic_axes names 'z'"),
    ({"x": {5: "batch"}}, "RuntimeError", "dynamic_axes['x'] names axis 5"),
])
def test_dynamic_axes_checked_in_the_torchscript_flavour(tmp_path: Path, dest: Path,
                                                         axes: dict[str, Any],
                                                         torch_torchscript: str,
                                                         words: str) -> None:
    model = nn.Linear(4, 3)
    assert _torch_onnx(tmp_path, model, (X,), input_names=["x"], dynamic_axes=axes,
                       dynamo=False) == torch_torchscript
    error = _refused(dest, ValueError, model, (X,), input_names=["x"], dynamic_axes=axes,
                     dynamo=False)
    assert words in str(error)


@pytest.mark.parametrize("dynamo", [True, False])
def test_destination_in_a_missing_directory(tmp_path: Path, no_capture: None,
                                            dynamo: bool) -> None:
    missing = tmp_path / "missing"
    # torch.onnx exports, then fails to write: FileNotFoundError, an OSError.
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), f=missing / "m.onnx",
                       dynamo=dynamo) == "FileNotFoundError"
    with pytest.raises(ValueError, match="the directory .*missing' does not exist"):
        onnxport.export(nn.Linear(4, 3), (X,), missing / "m.onnx", dynamo=dynamo)
    assert not missing.exists()


def test_destination_that_is_a_directory_or_no_file(tmp_path: Path, no_capture: None) -> None:
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), f=tmp_path) == "IsADirectoryError"
    with pytest.raises(ValueError, match="is a directory"):
        onnxport.export(nn.Linear(4, 3), (X,), tmp_path)
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), f=42) == "TypeError"
    with pytest.raises(TypeError, match="f must be a file path"):
        onnxport.export(nn.Linear(4, 3), (X,), 42)


@pytest.mark.parametrize("options, torch_onnx, error, words", [
    # torch.onnx raises ValueError; onnxport's TypeError predates this check (a wrong kind of
    # argument for that flavour), and is kept.
    ({"dynamo": False, "dynamic_shapes": {"input": {0: "b"}}}, "ValueError", TypeError,
     "dynamo=False takes dynamic_axes, not dynamic_shapes"),
    ({"dynamo": False, "fallback": True}, "TypeError", TypeError,
     "with dynamo=False there is nothing to fall back from"),
    ({"dynamo": False, "export_modules_as_functions": True, "opset_version": 13}, "ValueError",
     ValueError, "export_modules_as_functions needs opset_version >= 15"),
])
def test_options_that_exclude_each_other(tmp_path: Path, dest: Path, options: dict[str, Any],
                                         torch_onnx: str, error: type[Exception],
                                         words: str) -> None:
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), **options) == torch_onnx
    assert words in str(_refused(dest, error, nn.Linear(4, 3), (X,), **options))


@pytest.mark.parametrize("options, words", [
    ({"verify": True}, "verify only applies to dynamo=True"),
    ({"report": True, "profile": True}, "report, profile only apply to dynamo=True"),
    ({"custom_translation_table": {torch.ops.aten.relu.default: abs}},
     "custom_translation_table only applies to dynamo=True"),
])
def test_dynamo_options_with_dynamo_false_warn(tmp_path: Path, options: dict[str, Any],
                                               words: str) -> None:
    """torch.onnx ignores them with dynamo=False; code written for it keeps working."""
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), dynamo=False, **options) == "ok"
    path = tmp_path / "ours.onnx"
    with pytest.warns(UserWarning, match=words):
        onnxport.export(nn.Linear(4, 3), (X,), path, dynamo=False, **options)
    assert path.exists()


def test_external_data_into_a_file_object(tmp_path: Path, no_capture: None) -> None:
    # torch.onnx ignores external_data for a BytesIO (writes everything into it).
    buffer = io.BytesIO()
    assert _torch_onnx(tmp_path, nn.Linear(4, 3), (X,), f=buffer, external_data=True) == "ok"
    with pytest.raises(TypeError, match="external_data=True needs a file path"):
        onnxport.export(nn.Linear(4, 3), (X,), io.BytesIO(), external_data=True)


@pytest.mark.parametrize("args, words", [
    ({"x": X}, "args must be a tuple of example inputs"),
    (None, "args must be a tuple"),
])
def test_args_of_the_wrong_kind(dest: Path, args: Any, words: str) -> None:
    assert words in str(_refused(dest, TypeError, nn.Linear(4, 3), args))


def test_dynamo_export_options_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="export_options must be an onnxport.ExportOptions"):
        onnxport.dynamo_export(nn.Linear(4, 3), X, export_options={"dynamic_shapes": True})


# -- 2. errors that point at the cause ----------------------------------------------------------

@pytest.mark.parametrize("dynamo_export", [False, True])
def test_shape_mismatch_in_forward_names_the_users_line_and_inputs(
        tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, dynamo_export: bool) -> None:
    monkeypatch.chdir(tmp_path)  # dynamo_export writes its SARIF log into the working folder
    bad = torch.randn(2, 5)
    if dynamo_export:
        with pytest.raises(errors.ForwardError) as info:
            onnxport.dynamo_export(_Net(), bad)
        error = info.value
    else:
        assert _torch_onnx(tmp_path, _Net(), (bad,)) == "TorchExportError"
        error = _refused(dest, errors.ForwardError, _Net(), (bad,))
    lines = str(error).splitlines()
    assert lines[0].startswith("a and b must have same reduction dim, but got [2, 5] X [4, 3]")
    assert f"{THIS_FILE}:{_line_of('# FC-LINE')}" in lines[0]
    assert "return torch.relu(self.fc(x))" in lines[0]
    assert lines[1] == "  inputs given: x: float32[2, 5]"
    assert lines[2] == "  raised in module 'fc': Linear(in_features=4, out_features=3, bias=True)"
    assert "torch.export tried 2 strategies" in str(error)
    assert str(error).index("inputs given") < str(error).index("torch.export: Hint")
    assert isinstance(error, onnxport.CaptureError)
    assert isinstance(error.__cause__, RuntimeError)
    assert error.__cause__ is error.attempts[0].error
    assert error.location is not None and error.location.endswith(f":{_line_of('# FC-LINE')}")


def test_shape_mismatch_in_a_bare_module(dest: Path) -> None:
    error = _refused(dest, errors.ForwardError, nn.Linear(4, 3), (torch.randn(2, 5),))
    lines = str(error).splitlines()
    assert "but got [2, 5] X [4, 3]" in lines[0] and "linear.py:" in lines[0]
    assert lines[1] == "  inputs given: input: float32[2, 5]"
    assert "'(the model itself)': Linear(in_features=4, out_features=3" in lines[2]


def test_exception_raised_by_the_model(tmp_path: Path, dest: Path) -> None:
    assert _torch_onnx(tmp_path, _Raises(), (X,)) == "TorchExportError"
    error = _refused(dest, errors.ForwardError, _Raises(), (X,))
    first = str(error).splitlines()[0]
    assert first.startswith("batch must be 3, got 2 (ValueError at ")
    assert f"{THIS_FILE}:{_line_of('# RAISE-LINE')}, in forward: raise ValueError(" in first
    assert str(error).splitlines()[1] == "  inputs given: x: float32[2, 4]"
    assert type(error.__cause__) is ValueError
    assert str(error.__cause__) == "batch must be 3, got 2"


def test_inputs_given_are_named_with_kwargs_and_nesting(dest: Path) -> None:
    class Nested(nn.Module):
        def forward(self, x: torch.Tensor, pair: list[torch.Tensor], *, scale: float = 1.0
                    ) -> torch.Tensor:
            return x @ pair[0] * scale

    error = _refused(dest, errors.ForwardError, Nested(),
                     (torch.randn(2, 3), [torch.randn(4, 5), torch.ones(2, dtype=torch.int64)]),
                     kwargs={"scale": 2.0})
    assert str(error).splitlines()[1] == (
        "  inputs given: x: float32[2, 3], pair[0]: float32[4, 5], pair[1]: int64[2], "
        "scale=2.0")


def test_torch_export_limitations_stay_capture_errors(dest: Path) -> None:
    class Branch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return x + 1
            return x - 1

    error = _refused(dest, onnxport.CaptureError, Branch(), (X,))
    assert not isinstance(error, errors.ForwardError)


@pytest.mark.parametrize("model, path, kind, torch_onnx", [
    (_ReturnsString(), "output[1]['name']", "str", "ConversionError"),
    (_ReturnsObject(), "output[1]", "object", "TorchExportError"),
])
def test_outputs_that_are_not_tensors(tmp_path: Path, dest: Path, model: nn.Module, path: str,
                                      kind: str, torch_onnx: str) -> None:
    assert _torch_onnx(tmp_path, model, (X,)) == torch_onnx
    error = _refused(dest, errors.UnsupportedOutputError, model, (X,))
    assert f"{path} has type {kind}" in str(error).splitlines()[0]
    assert error.outputs == [(path, kind)]
    assert isinstance(error, onnxport.CaptureError)


def test_number_and_none_outputs_are_fine(tmp_path: Path) -> None:
    program = onnxport.export(_ReturnsNumbers(), (X,), tmp_path / "m.onnx")
    assert len(program.model.graph.outputs) == 3  # None is dropped, as torch.onnx does


def test_string_output_from_an_exported_program(dest: Path) -> None:
    program = torch.export.export(_ReturnsString(), (X,))
    error = _refused(dest, errors.UnsupportedOutputError, program, ())
    assert "output[1]['name'] has type str" in str(error)


def test_no_other_exception_type_escapes_for_the_issues_cases(dest: Path) -> None:
    """The four cases issue #13 found, each ends in a documented type."""
    cases: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (nn.Linear(4, 3), (X,), {"opset_version": 3}),
        (nn.Linear(4, 3), (X,), {"opset_version": 99}),
        (nn.Linear(4, 3), (X,), {"input_names": ["a", "b", "c"]}),
        (_ReturnsString(), (X,), {}),
        (nn.Linear(4, 3), (torch.randn(2, 5),), {}),
    ]
    for model, args, options in cases:
        _refused(dest, DOCUMENTED, model, args, **options)


@pytest.mark.parametrize("where", ["missing-dir", "directory", "not-a-file"])
def test_program_save_refuses_bad_destinations(tmp_path: Path, where: str) -> None:
    program = onnxport.export(nn.Linear(4, 3), (X,))
    destination = {"missing-dir": tmp_path / "missing" / "m.onnx", "directory": tmp_path,
                   "not-a-file": 42}[where]
    with pytest.raises((TypeError, ValueError)):
        program.save(destination)


# -- the command line -----------------------------------------------------------------------------

def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnxport.cli", *argv], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=300)


def test_cli_reports_failures_without_a_traceback(tmp_path: Path, good_bytes: bytes) -> None:
    (tmp_path / "bad_models.py").write_text(
        "import torch\n"
        "def mismatch():\n"
        "    return torch.nn.Linear(4, 3), (torch.randn(2, 5),)\n"
        "def broken():\n"
        "    raise RuntimeError('no weights here')\n"
    )
    (tmp_path / "good.onnx").write_bytes(good_bytes)
    cases = [
        (("export", "bad_models:mismatch", "-o", "good.onnx"),
         "export failed: ForwardError: a and b must have same reduction dim"),
        (("export", "--example", "mlp", "-o", "missing/m.onnx"),
         "invalid argument: f='missing/m.onnx': the directory"),
        (("export", "--example", "mlp", "-o", "m.onnx", "--opset", "99"),
         "invalid argument: opset_version=99 is not supported"),
        (("export", "bad_models:broken"), "the factory raised RuntimeError: no weights here"),
        (("export", "no_such_module:make"), "cannot import 'no_such_module'"),
        (("export", "bad_models:nothing"), "module 'bad_models' has no 'nothing'"),
    ]
    for argv, message in cases:
        result = _cli(tmp_path, *argv)
        assert result.returncode != 0, argv
        assert message in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr, (argv, result.stderr)
    assert (tmp_path / "good.onnx").read_bytes() == good_bytes
    assert not (tmp_path / "missing").exists() and not (tmp_path / "m.onnx").exists()


def test_target_is_checked_before_capture() -> None:
    with pytest.raises(ValueError, match="target must be one of 'onnx', 'onnxruntime'"):
        onnxport.export(torch.nn.ReLU(), (torch.randn(2),), target="ort")
    with pytest.raises(TypeError, match="needs optimize=True"):
        onnxport.export(torch.nn.ReLU(), (torch.randn(2),), target="onnxruntime", optimize=False)
