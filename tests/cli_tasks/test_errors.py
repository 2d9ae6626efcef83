"""Bad input gets a clear typed error, the documented exit code, and no partial folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_tasks.conftest import run_cli

pytestmark = pytest.mark.filterwarnings("ignore")


def _no_leftovers(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_missing_config(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(tmp_path / "ck"), str(out))
    assert proc.returncode == 1
    assert "CheckpointError" in proc.stderr and "has no config.json" in proc.stderr
    _no_leftovers(out)


def test_unknown_task(checkpoints: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--task", "text-to-pizza",
                   str(out))
    assert proc.returncode == 2
    assert "UnknownTaskError: unknown task 'text-to-pizza'" in proc.stderr
    assert "fill-mask" in proc.stderr  # the tasks it knows are listed
    _no_leftovers(out)


def test_task_the_architecture_lacks(checkpoints: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--task",
                   "text-generation-with-past", str(out))
    assert proc.returncode == 2
    assert "UnsupportedTaskError" in proc.stderr
    assert "not available for model_type 'bert'" in proc.stderr
    assert "text-classification" in proc.stderr  # its tasks are listed
    _no_leftovers(out)


def test_non_empty_output_dir(checkpoints: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_cli("export", "--model", str(checkpoints("bert")), str(out))
    assert proc.returncode == 2
    assert "OutputDirError" in proc.stderr and "--overwrite" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--overwrite",
                   "--no-validate", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.onnx"]


# In process (export_checkpoint, no CLI subprocess: cheaper); the CLI's exit status and
# message for CheckpointError / WeightsError are tested above and below.


def test_unreadable_config(tmp_path: Path) -> None:
    from onnxport.tasks import CheckpointError, export_checkpoint

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text('{"model_type": "bert", ')
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match=r"cannot read .*config\.json"):
        export_checkpoint(tmp_path / "ck", out)
    _no_leftovers(out)


class _Unsafe:
    """Unpickling this would touch a file: torch.load(weights_only=True) must refuse it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.touch, (self.marker,))


def test_pickle_needing_unsafe_unpickle(checkpoints: Any, tmp_path: Path) -> None:
    import torch

    from onnxport.tasks import WeightsError, export_checkpoint

    ck = tmp_path / "ck"
    ck.mkdir()
    shutil.copy(checkpoints("bert") / "config.json", ck / "config.json")
    marker = tmp_path / "unpickled"
    torch.save({"bert.embeddings.word_embeddings.weight": _Unsafe(marker)},
               ck / "pytorch_model.bin")
    out = tmp_path / "out"
    with pytest.raises(WeightsError, match=r"pytorch_model\.bin"):
        export_checkpoint(ck, out)
    assert not marker.exists()  # nothing was unpickled unsafely
    _no_leftovers(out)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing"])
def test_unreadable_weights(checkpoints: Any, tmp_path: Path, damage: str) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(checkpoints("bert"), ck)
    weights = ck / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-1000])
    elif damage == "garbage":
        weights.write_bytes(b"\x00" * 64)
    else:
        weights.unlink()
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(ck), str(out))
    assert proc.returncode == 1
    assert "WeightsError" in proc.stderr
    assert ("model.safetensors" in proc.stderr) or ("holds no weights" in proc.stderr)
    _no_leftovers(out)


def test_bfloat16_cannot_run_in_onnxruntime_cpu(checkpoints: Any, tmp_path: Path) -> None:
    """ORT's CPU provider has no bfloat16 MatMul: validation cannot run, and the CLI says so
    before loading or exporting anything, with a typed error naming the way out
    (--no-validate, or another dtype)."""
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--dtype", "bfloat16",
                   str(out))
    assert proc.returncode == 1
    assert "UnsupportedDtypeError: ONNX Runtime's CPU provider cannot run MatMul in " \
           "bfloat16" in proc.stderr
    assert "--no-validate" in proc.stderr and "--dtype float16 or float32" in proc.stderr
    assert "Traceback" not in proc.stderr and "loaded " not in proc.stderr  # nothing loaded
    _no_leftovers(out)


def test_validation_when_onnxruntime_cannot_load(tmp_path: Path) -> None:
    """In process, no export: a file ONNX Runtime cannot load is a mismatch row (the files
    are kept for inspection); a bfloat16 op it has no CPU kernel for is UnsupportedDtypeError."""
    import onnx
    import torch
    from onnx import TensorProto, helper

    from onnxport.tasks import UnsupportedDtypeError
    from onnxport.tasks.graphs import GraphSpec
    from onnxport.tasks.validate import check_runtime_dtype, validate_graph

    linear = torch.nn.Linear(4, 4, bias=False)
    spec = GraphSpec("model.onnx", linear, ["x"], ["y"], {},
                     lambda shape: {"x": torch.randn(shape["batch_size"], 4)},
                     [{"batch_size": 2}])
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    rows = validate_graph(spec, broken, atol=1e-4)
    assert [(r.output, r.ok) for r in rows] == [("(session)", False)]
    assert "ONNX Runtime cannot load broken.onnx" in rows[0].note

    values = [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, shape)
              for n, shape in (("x", [2, 4]), ("w", [4, 4]), ("y", [2, 4]))]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              values[:2], values[2:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]),
              tmp_path / "model.onnx")
    spec.module = linear.to(torch.bfloat16)
    with pytest.raises(UnsupportedDtypeError, match=r"cannot run model.onnx in bfloat16 .*"
                                                    r"MatMul.*--no-validate"):
        validate_graph(spec, tmp_path / "model.onnx", atol=5e-2)
    with pytest.raises(UnsupportedDtypeError, match=r"cannot run MatMul in bfloat16"):
        check_runtime_dtype(torch.bfloat16)  # the probe export_checkpoint runs first
    check_runtime_dtype(torch.float16)  # ORT's CPU provider has float16 MatMul
    check_runtime_dtype(torch.float32)


def test_remote_code_refused(checkpoints: Any, tmp_path: Path) -> None:
    import json

    ck = tmp_path / "ck"
    shutil.copytree(checkpoints("bert"), ck)
    config = json.loads((ck / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (ck / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(ck), str(out))
    assert proc.returncode == 1
    assert "--trust-remote-code" in proc.stderr
    _no_leftovers(out)


def test_validation_mismatch_keeps_files(checkpoints: Any, tmp_path: Path) -> None:
    """An impossible tolerance: exit 1, the table, and the folder kept and named."""
    out = tmp_path / "out"
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--atol", "0", str(out))
    if "MISMATCH" not in proc.stdout:
        pytest.skip("ORT happened to match eager bit for bit")
    assert proc.returncode == 1
    assert f"kept for inspection in {out}" in proc.stderr
    assert (out / "model.onnx").is_file()
