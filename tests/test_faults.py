"""Faults lose nothing (issue #13, item 3) and the package has no import cycle (issue #16).

* Saving is atomic for the .onnx file and its external data together: a failed or interrupted
  save leaves the previous pair byte-identical and no temporary file behind; what a killed
  save left is removed by the next save to the same path, once its process is gone (issue #26).
* External-data locations are plain files inside the model's folder; others are refused.
* Concurrent exports in threads do not interfere.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from torch import nn

import onnxport
from onnxport import _serialize
from onnxport import program as program_module
from onnxport.program import ExternalDataError, ONNXProgram, check_external_location

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxport"


class _Wide(nn.Module):
    """Weights above onnx-ir's 256-byte external-data threshold."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.fc0 = nn.Linear(16, 32)
        self.fc1 = nn.Linear(32, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.mul_(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(torch.tanh(self.fc0(x)))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def programs() -> tuple[ONNXProgram, ONNXProgram]:
    torch.manual_seed(0)
    x = torch.rand(3, 16)
    old = onnxport.export(_Wide().eval(), (x,))
    new = onnxport.export(_Wide(scale=2.0).eval(), (x,))
    return old, new


@pytest.fixture(params=[True, False], ids=["external", "inline"])
def saved(request, tmp_path, programs) -> tuple[Path, bool, dict[str, bytes]]:
    """A folder holding a good model (with its .data file for `external`)."""
    old, _ = programs
    path = tmp_path / "model.onnx"
    old.save(path, external_data=request.param)
    snapshot = _snapshot(tmp_path)
    assert ("model.onnx.data" in snapshot) == request.param
    return path, request.param, snapshot


# -- atomic save ---------------------------------------------------------------------------------

def _partial_writer(exc: BaseException):  # type: ignore[no-untyped-def]
    """Writers that write part of the file(s), then raise `exc`."""
    def write_model(model, fh):  # type: ignore[no-untyped-def]
        fh.write(b"\x08\x08partial model")
        fh.flush()
        raise exc

    def write_model_external(model, path, data_name):  # type: ignore[no-untyped-def]
        with open(os.path.join(os.path.dirname(path), data_name), "wb") as fh:
            fh.write(b"\0" * 1000)
        with open(path, "wb") as fh:
            fh.write(b"partial")
        raise exc

    return write_model, write_model_external


@pytest.mark.parametrize("exc", [RuntimeError("boom mid-write"),
                                 OSError(errno.ENOSPC, "No space left on device"),
                                 KeyboardInterrupt()],
                         ids=["exception", "disk-full", "interrupt"])
@pytest.mark.parametrize("new_external", [True, False], ids=["to-external", "to-inline"])
def test_failed_write_keeps_the_previous_pair(monkeypatch, saved, programs, exc,
                                              new_external) -> None:
    path, _, before = saved
    write_model, write_model_external = _partial_writer(exc)
    monkeypatch.setattr(_serialize, "write_model", write_model)
    monkeypatch.setattr(_serialize, "write_model_external", write_model_external)
    with pytest.raises(type(exc)):
        programs[1].save(path, external_data=new_external)
    assert _snapshot(path.parent) == before


def test_failed_rename_of_the_model_restores_the_previous_data(monkeypatch, tmp_path,
                                                               programs) -> None:
    """The data file is renamed into place first; if the model's rename then fails
    (permission denied), the previous data file is put back."""
    path = tmp_path / "model.onnx"
    programs[0].save(path, external_data=True)
    before = _snapshot(tmp_path)
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(dst) == os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError):
        programs[1].save(path, external_data=True)
    monkeypatch.setattr(os, "replace", real_replace)
    assert _snapshot(tmp_path) == before


def test_failed_rename_with_no_previous_model_leaves_nothing(monkeypatch, tmp_path,
                                                             programs) -> None:
    path = tmp_path / "model.onnx"
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(dst) == os.fspath(path):
            raise OSError(errno.EIO, "I/O error")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        programs[1].save(path, external_data=True)
    assert os.listdir(tmp_path) == []


def test_permission_denied_on_the_directory(monkeypatch, saved, programs) -> None:
    path, _, before = saved
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        os.chmod(path.parent, 0o500)
        try:
            with pytest.raises(PermissionError):
                programs[1].save(path, external_data=True)
        finally:
            os.chmod(path.parent, 0o700)
    else:  # root ignores directory permissions: the staging folder cannot be created

        def mkdtemp(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise PermissionError(errno.EACCES, "Permission denied", kwargs.get("dir"))

        monkeypatch.setattr("tempfile.mkdtemp", mkdtemp)
        with pytest.raises(PermissionError):
            programs[1].save(path, external_data=True)
    assert _snapshot(path.parent) == before


def test_successful_save_replaces_the_pair(saved, programs) -> None:
    path, _, before = saved
    programs[1].save(path, external_data=True)
    assert sorted(os.listdir(path.parent)) == ["model.onnx", "model.onnx.data"]
    assert _snapshot(path.parent) != before
    onnx.checker.check_model(str(path), full_check=True)
    x = torch.rand(3, 16)
    loaded = ONNXProgram(ir.load(path), None)
    torch.testing.assert_close(loaded(x)[0], programs[1](x)[0])


def test_failed_export_into_a_folder_with_a_good_pair(saved) -> None:
    path, _, before = saved

    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten._fft_r2c(x, [0], 0, True).abs() + object()  # type: ignore[operator]

    with pytest.raises((onnxport.OnnxExporterError, TypeError)):
        onnxport.export(Bad(), (torch.rand(4, 16),), path, external_data=True)
    assert _snapshot(path.parent) == before


# -- staging folders a killed save left (issue 26, item A) ------------------------------------

_KILLED_SAVE = """
import sys, time, torch, onnxport
from torch import nn
# Weights of 16 MiB go to the file as they come (smaller ones are gathered first).
model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]).eval()
program = onnxport.export(model, (torch.randn(2, 2048),))

def stall(done, total):
    if done > total // 2:
        time.sleep(600)  # SIGKILLed here, part-way through the external data

program.save(sys.argv[1], external_data=True, progress=stall)
"""

_needs_proc = pytest.mark.skipif(not os.path.isfile("/proc/self/stat"),
                                 reason="process start times from /proc (Linux)")


def _staging(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".onnxport-staging." in p.name)


def _staging_bytes(folder: Path) -> int:
    total = 0
    for staged in _staging(folder):
        for f in staged.iterdir():
            with contextlib.suppress(OSError):
                total += f.stat().st_size
    return total


@_needs_proc
def test_save_removes_what_a_killed_save_left(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = out / "model.onnx"
    log = tmp_path / "child.log"
    with open(log, "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(path)],
                                 stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while _staging_bytes(out) == 0:
            assert child.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the child never started writing"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (left,) = _staging(out)
    assert left.name.startswith(".model.onnx.onnxport-staging.")
    assert sorted(os.listdir(out)) == [left.name]  # killed before anything was renamed in

    torch.manual_seed(0)
    model = _Wide(scale=2.0).eval()
    x = torch.rand(3, 16)
    onnxport.export(model, (x,)).save(path, external_data=True)
    assert sorted(os.listdir(out)) == ["model.onnx", "model.onnx.data"]
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(actual), model(x).detach())


def _left(folder: Path, base: str, owner: str, tail: str = "abc_123") -> Path:
    staged = folder / f"{program_module._staging_prefix(base)}{owner}.{tail}"
    staged.mkdir()
    (staged / f"{base}.data").write_bytes(b"\0" * 100)
    return staged


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@_needs_proc
def test_save_keeps_staging_folders_of_live_processes(tmp_path, programs) -> None:
    path = tmp_path / "model.onnx"
    host = program_module._host()
    mine = _left(tmp_path, "model.onnx", program_module._owner())  # a save in another thread
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = _left(tmp_path, "model.onnx", program_module._owner(sleeper.pid))
        start = program_module._owner().rpartition(".")[2]
        recycled = _left(tmp_path, "model.onnx", f"{host}.{os.getpid()}.{int(start) + 1}")
        dead = _left(tmp_path, "model.onnx", f"{host}.{_dead_pid()}.{start}")
        programs[1].save(path, external_data=True)
        assert mine.is_dir() and theirs.is_dir()
        assert not recycled.exists() and not dead.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    programs[1].save(path, external_data=True)  # the sleeper is gone now
    assert not theirs.exists() and mine.is_dir()
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, "model.onnx", "model.onnx.data"])


@_needs_proc
def test_save_keeps_staging_folders_it_does_not_own(tmp_path, programs) -> None:
    """Only the staging folders of saves to the same file name, on this host, are removed;
    never another destination's, nor anything else that merely looks alike."""
    dead = f"{program_module._host()}.{_dead_pid()}.12345"
    kept = [
        _left(tmp_path, "other.onnx", dead),
        _left(tmp_path, "model.onnx.data", dead),
        _left(tmp_path, "model", dead),
        _left(tmp_path, "model.onnx", f"0badcafe.{dead.split('.', 1)[1]}"),  # another host
        _left(tmp_path, "model.onnx", dead, tail="abc.def"),
        _left(tmp_path, "model.onnx", "not-an-owner"),
    ]
    old_scheme = tmp_path / ".model.onnx.k2j3h4g5"
    old_scheme.mkdir()
    a_file = tmp_path / f".model.onnx.onnxport-staging.{dead}.afile"
    a_file.write_bytes(b"x")
    a_link = tmp_path / f".model.onnx.onnxport-staging.{dead}.alink"
    a_link.symlink_to(kept[0], target_is_directory=True)
    removed = _left(tmp_path, "model.onnx", dead)
    programs[1].save(tmp_path / "model.onnx", external_data=True)
    assert not removed.exists()
    assert all(p.is_dir() for p in kept) and old_scheme.is_dir()
    assert a_file.is_file() and a_link.is_symlink() and (kept[0] / "other.onnx.data").exists()


def test_long_file_names_stage_under_a_digest(tmp_path, programs) -> None:
    path = tmp_path / ("m" * 200 + ".onnx")
    programs[1].save(path, external_data=True)
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, path.name + ".data"])
    assert len(program_module._staging_prefix(path.name)) < 60


# -- external-data locations -------------------------------------------------------------------

@pytest.mark.parametrize("location", ["../outside.data", "sub/../../outside.data",
                                      "/etc/passwd", "\\\\server\\share\\x", "", "C:evil"])
def test_escaping_locations_are_refused(tmp_path, location) -> None:
    with pytest.raises(ExternalDataError):
        check_external_location(location, tmp_path)


def test_plain_locations_are_accepted(tmp_path) -> None:
    assert check_external_location("w.data", tmp_path) == os.path.realpath(tmp_path / "w.data")
    assert check_external_location("sub/w.data", tmp_path).endswith(os.path.join("sub", "w.data"))


def test_symlink_out_of_the_folder_is_refused(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.data").write_bytes(b"\0" * 64)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.data").symlink_to(outside / "secret.data")
    (folder / "inner.data").write_bytes(b"\0" * 64)
    (folder / "alias.data").symlink_to(folder / "inner.data")
    with pytest.raises(ExternalDataError, match="symlink"):
        check_external_location("w.data", folder)
    check_external_location("alias.data", folder)  # a link inside the folder is fine


def _external_program(tmp_path: Path, programs) -> tuple[ONNXProgram, Path]:  # type: ignore[no-untyped-def]
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "model.onnx"
    programs[0].save(path, external_data=True)
    return ONNXProgram(ir.load(path), None), path


def test_loaded_model_with_external_data_runs(tmp_path, programs) -> None:
    loaded, _ = _external_program(tmp_path, programs)
    assert any(isinstance(v.const_value, ir.ExternalTensor)
               for v in loaded.model.graph.initializers.values())
    x = torch.rand(3, 16)
    torch.testing.assert_close(loaded(x)[0], programs[0](x)[0])


def _redirect(program: ONNXProgram, location: str) -> None:
    for value in program.model.graph.initializers.values():
        tensor = value.const_value
        if isinstance(tensor, ir.ExternalTensor):
            value.const_value = ir.ExternalTensor(
                location, tensor.offset, tensor.length, tensor.dtype, shape=tensor.shape,
                name=tensor.name, base_dir=tensor.base_dir)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_escaping_external_data_is_refused_on_run_save_and_apply(tmp_path, programs,
                                                                 kind) -> None:
    loaded, path = _external_program(tmp_path, programs)
    stolen = tmp_path / "stolen.data"
    os.replace(str(path) + ".data", stolen)
    if kind == "dotdot":
        location = "../stolen.data"
    elif kind == "absolute":
        location = str(stolen)
    else:
        (path.parent / "model.onnx.data").symlink_to(stolen)
        location = "model.onnx.data"
    _redirect(loaded, location)
    with pytest.raises(ExternalDataError):
        loaded(torch.rand(3, 16))
    with pytest.raises(ExternalDataError):
        loaded.save(tmp_path / "copy.onnx")
    with pytest.raises(ExternalDataError):
        loaded.save(tmp_path / "copy.onnx", external_data=True)
    assert not (tmp_path / "copy.onnx").exists()
    # apply_weights refuses such a tensor too, and keeps the model's own
    (tmp_path / "fresh").mkdir()
    fresh, _ = _external_program(tmp_path / "fresh", programs)
    weight = next(v for v in loaded.model.graph.initializers.values()
                  if isinstance(v.const_value, ir.ExternalTensor))
    with pytest.raises(ExternalDataError):
        fresh.apply_weights({weight.name: weight.const_value})
    x = torch.rand(3, 16)
    torch.testing.assert_close(fresh(x)[0], programs[0](x)[0])


def test_apply_weights_takes_contained_external_tensors(tmp_path, programs) -> None:
    loaded, _ = _external_program(tmp_path, programs)
    target = onnxport.export(_Wide(scale=3.0).eval(), (torch.rand(3, 16),))
    target.apply_weights({k: v.const_value for k, v in loaded.model.graph.initializers.items()})
    x = torch.rand(3, 16)
    torch.testing.assert_close(target(x)[0], programs[0](x)[0])


def test_external_data_error_is_typed() -> None:
    assert issubclass(ExternalDataError, onnxport.OnnxExporterError)
    assert issubclass(ExternalDataError, ValueError)


# -- concurrency -------------------------------------------------------------------------------

def test_is_in_onnx_export_is_per_thread() -> None:
    inside = threading.Event()
    release = threading.Event()
    seen: dict[str, bool] = {}

    class Waits(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.setdefault("exporting thread", onnxport.is_in_onnx_export())
            inside.set()
            release.wait(30)
            return x + 1

    worker = threading.Thread(target=lambda: onnxport.export(Waits(), (torch.rand(2),)))
    worker.start()
    try:
        assert inside.wait(60)
        seen["other thread"] = onnxport.is_in_onnx_export()
    finally:
        release.set()
        worker.join(120)
    assert seen == {"exporting thread": True, "other thread": False}
    assert not onnxport.is_in_onnx_export()


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q(x)
        w = torch.softmax(q @ x.transpose(-1, -2), dim=-1)
        return self.norm(w @ x), w.argmax(-1)


class _Scan(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.arange(5.0))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = torch.cumsum(x, 0) + self.offset
        return {"y": y, "mask": torch.where(y > 2, y, -y)}


class _Emb(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids).sum(1)


def _cases() -> list[tuple[str, nn.Module, tuple[torch.Tensor, ...], bool]]:
    torch.manual_seed(0)
    return [("conv", _Conv().eval(), (torch.rand(2, 3, 8, 8),), True),
            ("attn", _Attn().eval(), (torch.rand(2, 5, 8),), True),
            ("scan", _Scan().eval(), (torch.rand(3, 5),), False),
            ("emb", _Emb().eval(), (torch.randint(0, 10, (2, 4)),), False)]


def _export_bytes(model: nn.Module, args: tuple[torch.Tensor, ...], dynamo: bool,
                  folder: Path, name: str) -> bytes:
    path = folder / f"{name}.onnx"
    onnxport.export(model, args, path, dynamo=dynamo)
    return path.read_bytes()


def test_concurrent_exports_match_serial_exports(tmp_path) -> None:
    cases = _cases()
    serial_dir, threaded_dir = tmp_path / "serial", tmp_path / "threaded"
    serial_dir.mkdir()
    threaded_dir.mkdir()
    serial = {name: _export_bytes(m, a, d, serial_dir, name) for name, m, a, d in cases}
    results: dict[str, bytes] = {}
    errors: dict[str, BaseException] = {}
    barrier = threading.Barrier(len(cases))

    def run(name: str, model: nn.Module, args: tuple[torch.Tensor, ...], dynamo: bool) -> None:
        try:
            barrier.wait(60)
            results[name] = _export_bytes(model, args, dynamo, threaded_dir, name)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors[name] = e

    threads = [threading.Thread(target=run, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert set(results) == set(serial)
    for name, _, args, _ in cases:
        assert results[name] == serial[name], f"{name}: the threaded export differs"
    # ... and each runs as its eager model does
    for name, model, args, _ in cases:
        import onnxruntime as ort

        session = ort.InferenceSession(str(threaded_dir / f"{name}.onnx"),
                                       providers=["CPUExecutionProvider"])
        feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
        actual = session.run(None, feed)
        expected = torch.utils._pytree.tree_leaves(model(*args))
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert sorted(os.listdir(threaded_dir)) == sorted(f"{n}.onnx" for n in serial)


# -- import graph ----------------------------------------------------------------------------------

def _modules() -> dict[str, Path]:
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, modules: dict[str, Path], top_level: bool) -> set[str]:
    """The onnxport modules `name` imports: at module level (also inside top-level if/try,
    not under TYPE_CHECKING) or, with top_level=False, anywhere."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if top_level:
        nodes: list[ast.AST] = []
        stack: list[ast.stmt] = list(tree.body)
        while stack:
            stmt = stack.pop()
            if _is_type_checking(stmt):
                continue
            nodes.append(stmt)
            if isinstance(stmt, (ast.If, ast.Try)):
                for block in ("body", "orelse", "finalbody"):
                    stack.extend(getattr(stmt, block, []))
                for handler in getattr(stmt, "handlers", []):
                    stack.extend(handler.body)
    else:
        nodes = list(ast.walk(tree))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in modules else module)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted."""
    from tests.test_import_cycles import find_cycles

    return sorted(sorted(c) for c in find_cycles(graph))


def test_no_import_cycle_among_onnxport_modules() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules, top_level=True) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_cycle_detection_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_torchscript_api_does_not_import_api() -> None:
    """The shared pieces (export flag, registry resolution) live in _state, below both."""
    modules = _modules()
    imported = _imports("onnxport._torchscript_api", modules["onnxport._torchscript_api"],
                        modules, top_level=False)
    assert "onnxport._api" not in imported
    assert "onnxport" not in imported
    state = _imports("onnxport._state", modules["onnxport._state"], modules, top_level=False)
    assert not state & {"onnxport._api", "onnxport._torchscript_api", "onnxport"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_writeback_error_keeps_the_previous_pair(monkeypatch, saved, programs) -> None:
    # Buffered, the writer has the kernel write each chunk as it goes (sync_file_range); an I/O error
    # reported there (then not again by the fsync) fails the save, which changes nothing.
    import ctypes

    path, _, before = saved
    libc = _serialize._libc()

    def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(_serialize, "_libc", lambda: (sync_file_range, libc[1]))
    monkeypatch.setattr(_serialize, "_DIRECT_IO", False)  # buffered writes
    monkeypatch.setattr(_serialize, "WRITE_CHUNK", 1024)
    with pytest.raises(OSError) as info:
        programs[1].save(path, external_data=True)
    assert info.value.errno == errno.EIO
    assert _snapshot(path.parent) == before


@pytest.mark.parametrize("direct", [True, False], ids=["direct-io", "buffered"])
def test_disk_full_while_writing_data_keeps_the_previous_pair(monkeypatch, saved, programs,
                                                              direct) -> None:
    # The writer thread's write fails (disk full): the save raises that error and changes
    # nothing, with O_DIRECT writes and with buffered ones.
    path, _, before = saved
    monkeypatch.setattr(_serialize, "_DIRECT_IO", direct)

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    real_open = open

    class _Full:
        def __init__(self, fh):  # type: ignore[no-untyped-def]
            self._fh = fh

        def write(self, data):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self._fh, name)

    def opener(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        fh = real_open(file, mode, *args, **kwargs)
        return _Full(fh) if str(file).endswith(".data") and "w" in mode else fh

    monkeypatch.setattr(_serialize, "open", opener, raising=False)
    with pytest.raises(OSError) as info:
        programs[1].save(path, external_data=True)
    assert info.value.errno == errno.ENOSPC
    assert _snapshot(path.parent) == before
