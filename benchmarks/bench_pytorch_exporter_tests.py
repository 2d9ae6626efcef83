#!/usr/bin/env python
"""PyTorch's own exporter tests, run as they are (torch.onnx) and with onnxport swapped in.

    python benchmarks/bench_pytorch_exporter_tests.py --tests /work/peer/exporter
    python benchmarks/bench_pytorch_exporter_tests.py --tests DIR --files test_api.py -k rename

The test files (test/onnx/exporter/*.py of pytorch/pytorch) are third-party code and are not
in this repository: copy them into a folder outside it and pass it with `--tests`. Each file
runs twice under pytest, one flavour after the other, each in its own process:

* torch.onnx: the files as they are;
* onnxport: the same files after `install_onnxport_shim()` (below) has pointed torch.onnx's
  exporter names at onnxport's, before any test module is imported;
* torch.onnx+onnxport.testing (`--flavours` to add it): torch.onnx exports, and only the
  checks swapped (`_testing`, `_verification`, `torch.onnx.testing`, `torch.onnx.verification`
  rows below): onnxport's assert_onnx_program / verify_onnx_program on torch.onnx's programs.

What the shim swaps (nothing else of torch.onnx is touched; a name onnxport lacks is left
as torch.onnx's and listed in the output, so a test using it runs torch.onnx's code on
onnxport's objects):

| torch.onnx name | onnxport |
| --- | --- |
| `torch.onnx.export`, `dynamo_export`, `is_in_onnx_export`, `enable_fake_mode`, `ExportOptions`, `ONNXProgram`, `ExportableModule`, `InputObserver`, `OnnxExporterError`, `JitScalarType`, `select_model_mode_for_export`, `export_to_pretty_string`, `register_custom_op_symbolic`, `unregister_custom_op_symbolic` | the same names of `onnxport` |
| `torch.onnx.testing` (`assert_onnx_program`) | `onnxport.testing` |
| `torch.onnx.verification` (`verify_onnx_program`, `VerificationInfo`, `find_mismatch`, ...) | `onnxport.verification` |
| `torch.onnx._internal.exporter._testing` (the tests' `onnx_testing`) | a module holding `onnxport.testing.assert_onnx_program` |
| `torch.onnx._internal.exporter._verification` | `VerificationInfo`, `verify_onnx_program`, `_VerificationInterpreter` of `onnxport.verification` |
| `torch.onnx._internal.exporter._onnx_program` | `ONNXProgram` of `onnxport.program` |
| `torch.onnx._internal.exporter._exportable_module` | `ExportableModule` of `onnxport.exportable` |
| `torch.onnx._internal.exporter._input_observer` | `InputObserver` of `onnxport.input_observer` (its private `_infer_dynamic_dimensions` stays torch.onnx's) |

The private modules are replaced both in `sys.modules` and as attributes of their package, so
`from torch.onnx._internal.exporter import _testing` gets the shim. Prints one row per test
with both outcomes, then the counts, then the failures of each flavour with the first line
of their error. Tests that need the Hugging Face hub (no network here) or a GPU are marked
as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# torch.onnx attribute -> onnxport attribute of the same name.
_PUBLIC_NAMES = ("export", "dynamo_export", "is_in_onnx_export", "enable_fake_mode",
                 "ExportOptions", "ONNXProgram", "ExportableModule", "InputObserver",
                 "OnnxExporterError", "JitScalarType", "select_model_mode_for_export",
                 "export_to_pretty_string", "register_custom_op_symbolic",
                 "unregister_custom_op_symbolic")
# private torch.onnx module -> (onnxport module, names taken from it)
_PRIVATE_MODULES = {
    "torch.onnx._internal.exporter._testing": ("onnxport.testing", ("assert_onnx_program",)),
    "torch.onnx._internal.exporter._verification": (
        "onnxport.verification",
        ("VerificationInfo", "verify_onnx_program", "_VerificationInterpreter")),
    "torch.onnx._internal.exporter._onnx_program": ("onnxport.program", ("ONNXProgram",)),
    "torch.onnx._internal.exporter._exportable_module": ("onnxport.exportable",
                                                         ("ExportableModule",)),
    "torch.onnx._internal.exporter._input_observer": (
        "onnxport.input_observer", ("InputObserver", "_infer_dynamic_dimensions")),
}

_HUB_MARKERS = ("huggingface.co", "OfflineModeIsEnabled", "LocalEntryNotFoundError",
                "We couldn't connect to", "Cannot connect to proxy", "hf-internal-testing")
_GPU_MARKERS = ("CUDA", "cuda", "requires a GPU")


def install_onnxport_shim(checks_only: bool = False) -> list[str]:
    """Point torch.onnx's exporter names at onnxport's; return the names left to torch.onnx.

    checks_only: swap only assert_onnx_program and the verification API (torch.onnx exports).
    """
    import importlib

    import torch.onnx
    import torch.onnx._internal.exporter as exporter_pkg

    sys.path.insert(0, str(REPO / "src"))
    import onnxport
    import onnxport.testing
    import onnxport.verification

    missing = []
    for name in () if checks_only else _PUBLIC_NAMES:
        try:
            value = getattr(onnxport, name)
        except AttributeError:
            missing.append(f"torch.onnx.{name}")
            continue
        setattr(torch.onnx, name, value)
    torch.onnx.testing = onnxport.testing
    torch.onnx.verification = onnxport.verification
    sys.modules["torch.onnx.testing"] = onnxport.testing
    sys.modules["torch.onnx.verification"] = onnxport.verification
    for module_name, (source_name, names) in _PRIVATE_MODULES.items():
        if checks_only and not module_name.endswith(("_testing", "_verification")):
            continue
        source = importlib.import_module(source_name)
        original = importlib.import_module(module_name)
        shim = types.ModuleType(module_name, f"onnxport shim for {module_name}")
        for name in names:
            if hasattr(source, name):
                setattr(shim, name, getattr(source, name))
            else:  # left to torch.onnx, and said so
                setattr(shim, name, getattr(original, name))
                missing.append(f"{module_name}.{name}")
        sys.modules[module_name] = shim
        setattr(exporter_pkg, module_name.rsplit(".", 1)[1], shim)
    return missing


def _worker(flavour: str, tests: Path, files: list[str], keyword: str | None, junit: Path
            ) -> int:
    import pytest

    if flavour in ("onnxport", "torch.onnx+onnxport.testing"):
        missing = install_onnxport_shim(checks_only=flavour != "onnxport")
        if missing:
            print("left to torch.onnx (onnxport has no such name): " + ", ".join(missing))
    args = [str(tests / f) for f in files] + [
        "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit2",
        "--rootdir", str(tests), "-W", "default", "--continue-on-collection-errors"]
    if keyword:
        args += ["-k", keyword]
    return pytest.main(args)


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the message) from a JUnit XML report."""
    result: dict[str, tuple[str, str]] = {}
    if not junit.exists():
        return result
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        module = case.get("classname", "").rsplit(".", 1)[0].rsplit(".", 1)[-1]
        test_id = f"{module}::{test_id}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or child.text or "").strip()
                break
            if child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if "xfail" in kind else "skipped"
                message = (child.get("message") or "").strip()
        full = " ".join(c.text or "" for c in case if c.tag in ("failure", "error"))
        if outcome in ("failed", "error"):
            if any(m in full or m in message for m in _HUB_MARKERS):
                outcome += " (hub)"
            elif any(m in message for m in _GPU_MARKERS):
                outcome += " (gpu)"
        result[test_id] = (outcome, message.splitlines()[0][:220] if message else "")
    return result


def _run(flavour: str, tests: Path, files: list[str], keyword: str | None, workdir: Path,
         timeout: float) -> tuple[dict[str, tuple[str, str]], float, str]:
    junit = workdir / f"{flavour}.xml"
    cmd = [sys.executable, __file__, "--_worker", flavour, "--tests", str(tests),
           "--junit", str(junit), "--files", *files]
    if keyword:
        cmd += ["-k", keyword]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=timeout)
    elapsed = time.perf_counter() - start
    (workdir / f"{flavour}.log").write_text(proc.stdout + proc.stderr)
    notes = "\n".join(line for line in proc.stdout.splitlines()
                      if line.startswith("left to torch.onnx"))
    return _outcomes(junit), elapsed, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", type=Path, required=True,
                        help="folder holding test/onnx/exporter's test files")
    parser.add_argument("--files", nargs="*", default=None,
                        help="test files to run (default: every test_*.py in --tests)")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument("--flavours", nargs="*", default=["torch.onnx", "onnxport"],
                        choices=["torch.onnx", "onnxport", "torch.onnx+onnxport.testing"])
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per flavour")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the pytest logs and JUnit reports here")
    parser.add_argument("--json", type=Path, default=None, help="write the outcomes as JSON")
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--junit", type=Path, default=None, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    tests = ns.tests.resolve()
    files = ns.files or sorted(p.name for p in tests.glob("test_*.py"))
    if ns._worker:
        sys.exit(_worker(ns._worker, tests, files, ns.keyword, ns.junit))

    workdir = ns.logs or Path(tempfile.mkdtemp(prefix="peer_suite_"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = {}
    for flavour in ns.flavours:
        outcomes, elapsed, notes = _run(flavour, tests, files, ns.keyword, workdir, ns.timeout)
        runs[flavour] = (outcomes, elapsed, notes)
        print(f"# {flavour}: {len(outcomes)} tests in {elapsed:.0f} s" + (f"; {notes}" if notes
                                                                             else ""),
              flush=True)
    ids = sorted({t for outcomes, _, _ in runs.values() for t in outcomes})
    print(f"\nPyTorch's exporter tests ({', '.join(files)}), torch {_torch_version()}\n")
    print("| test | " + " | ".join(runs) + " |")
    print("| --- |" + " --- |" * len(runs))
    for t in ids:
        print(f"| {t} | " + " | ".join(runs[f][0].get(t, ("-", ""))[0] for f in runs) + " |")
    print("\n| flavour | passed | failed (hub / gpu among them) | xfailed | skipped | time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for flavour, (outcomes, elapsed, _) in runs.items():
        kinds = [o for o, _ in outcomes.values()]
        failed = [k for k in kinds if k.startswith(("failed", "error"))]
        hub = sum("(hub)" in k for k in failed)
        gpu = sum("(gpu)" in k for k in failed)
        print(f"| {flavour} | {kinds.count('passed')}/{len(kinds)} | {len(failed)} ({hub} / "
              f"{gpu}) | {kinds.count('xfailed')} | {kinds.count('skipped')} | "
              f"{elapsed:.0f} s |")
    for flavour, (outcomes, _, _) in runs.items():
        bad = [(t, o, m) for t, (o, m) in sorted(outcomes.items())
               if o.startswith(("failed", "error"))]
        if bad:
            print(f"\nFailures with {flavour}:")
            for t, o, m in bad:
                print(f"- {t} [{o}]: {m}")
    print(f"\n(logs and JUnit reports: {workdir})")
    if ns.json:
        ns.json.write_text(json.dumps({f: {t: list(v) for t, v in r[0].items()}
                                       for f, r in runs.items()}, indent=1))


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
