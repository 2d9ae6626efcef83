"""Generate docs/ops.md from the registry and the OpInfo test table.

    python tools/gen_ops_doc.py [--results results.xml] [--sweep sweep.jsonl ...]
                                [--torch OTHER_PYTHON ...]

Lists every translated overload, the ONNX operators its translation emits, the OpInfo
entries and dtypes that test it, and the known gaps (xfail/skip reasons) from the test table.
With --results (a pytest JUnit XML file of tests/ops/test_ops.py), adds pass/xfail/fail counts.
With --sweep (JSONL records of benchmarks/bench_opinfo.py), adds the sweep's pass rates per
dtype and every (OpInfo, dtype) that fails, with its first error; without it, the sweep
section of the current docs/ops.md is kept. With --torch (interpreters of environments with
another torch and onnxport installed), adds which supported torch releases have each overload
that some release lacks.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from onnxport.translate import default_registry  # noqa: E402
from onnxport.translate.complex import COMPLEX  # noqa: E402
from onnxport.translate.registry import target_name  # noqa: E402
from tests.ops.op_db import OP_TESTS, emitted_ops  # noqa: E402

def test_results(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if "[" not in name:
            continue
        test_id = name[name.index("[") + 1:-1]
        status = "pass"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "FAIL"
            elif child.tag == "skipped":
                status = "xfail" if "xfail" in (child.get("type", "") + child.get("message", "")) else "skip"
        out[test_id] = status
    return out


KNOWN_CAUSES = [
    "The causes, by group (each OpTest's xfail reason has the measured numbers):",
    "",
    "* **Eager rounds in float16, ONNX computes in float32** (conv_transpose, grid sampling,"
    " adaptive_avg_pool3d, bilinear, addbmm, index_put with accumulate, matrix_exp): our result"
    " is closer to a float64 reference than eager's. addbmm in float32 differs by summation"
    " order only.",
    "* **Order of equal elements** (sort/argsort in float16/bool, topk/kthvalue in int64):"
    " values match; PyTorch leaves the order of ties unspecified.",
    "* **Signs of eigen/singular vectors** (linalg.eigh, svd, linalg.svd, and svd_lowrank/"
    "pca_lowrank which call it): unique only up to sign, and LAPACK's signs come from its QR"
    " iterations. Eigenvalues, singular values, pinv, rank, cond and norms do export.",
    "* **Not implemented**: linalg.eig/eigvals (complex eigenpairs of general matrices),"
    " ldl_factor/ldl_solve (Bunch-Kaufman pivoting).",
    "* **torch.export cannot capture the sample**: linalg.lstsq and ctc_loss (data-dependent"
    " output shapes), gaussian_nll_loss (a Python check on tensor data), narrow with a tensor"
    " start (PendingUnbackedSymbolNotFound), tensor_split with tensor indices, one_hot with"
    " num_classes=-1.",
    "* **No ONNX representation**: complex32 (chalf, and complex/view_as_complex in float16),"
    " sparse tensors (to_sparse, sparse.mm.reduce, sparse.sampled_addmm), hash_tensor (needs"
    " a bit reinterpretation), an as_strided view reaching storage outside its input.",
]


def sweep_section(paths: list[str]) -> list[str]:
    """Pass rates per dtype and the failing (op, dtype) pairs of onnxport in the sweep."""
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if "onnxport" in r:
                    records[(r["op"], r["dtype"])] = r
    if not records:
        return []
    lines = ["## OpInfo sweep", "",
             "`python benchmarks/bench_opinfo.py` (2 samples per op and dtype; outputs that depend",
             "on a random draw or uninitialized memory are compared in shape and dtype only):", "",
             "| dtype | ops tried | pass | % |", "| --- | --- | --- | --- |"]
    by_dtype: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records.values():
        by_dtype[r["dtype"]].append(r)
    for dtype, rows in by_dtype.items():
        ok = sum(1 for r in rows if r["onnxport"]["ok"])
        lines.append(f"| {dtype} | {len(rows)} | {ok} | {100 * ok / len(rows):.1f} |")
    lines += ["", "### What does not export, and why", "", *KNOWN_CAUSES, "",
              "| OpInfo | dtype | first error |", "| --- | --- | --- |"]
    for (op, dtype), r in sorted(records.items()):
        if not r["onnxport"]["ok"]:
            error = r["onnxport"]["error"].replace("|", "\\|").split(" first used by")[0][:220]
            lines.append(f"| `{op}` | {dtype} | {error} |")
    return [*lines, ""]


_UNAVAILABLE = ("import json, torch; from onnxport.translate import default_registry, registry; "
                "default_registry(); print(json.dumps([torch.__version__, "
                "sorted(registry.UNAVAILABLE)]))")


def versions_section(pythons: list[str]) -> list[str]:
    """The overloads some supported torch lacks, and which releases have them."""
    missing: dict[str, set[str]] = {}
    for python in [sys.executable, *pythons]:
        out = subprocess.run([python, "-c", _UNAVAILABLE], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout.strip().splitlines()[-1]
        version, names = json.loads(out)
        missing[version.split("+")[0]] = set(names)
    names = sorted(set().union(*missing.values()))
    versions = sorted(missing, key=lambda v: tuple(int(p) for p in v.split(".")))
    lines = ["## Overloads not in every supported torch", "",
             "The library registers these where the installed torch has them and skips them "
             "elsewhere, silently (`onnxport.translate.aten` hands out a `MissingOverload` for a "
             "name this torch lacks; `onnxport.translate.registry.UNAVAILABLE` lists them). "
             "Checked on " + ", ".join(f"torch {v}" for v in versions) + ".", ""]
    if not names:
        return [*lines, "None: every translated overload exists in each of them.", ""]
    lines += ["| overload | " + " | ".join(versions) + " |",
              "| --- |" + " --- |" * len(versions)]
    for name in names:
        lines.append(f"| `{name.replace('::', '.')}` | "
                     + " | ".join("-" if name in missing[v] else "yes" for v in versions) + " |")
    return [*lines, ""]


def kept_sweep_section(path: Path) -> list[str]:
    """The OpInfo sweep section of an existing docs/ops.md (its JSONL is not kept)."""
    if not path.exists():
        return []
    text = path.read_text()
    start = text.find("## OpInfo sweep")
    end = text.find("## Overloads not in every supported torch")
    if end < 0:
        end = text.find("## Translations")
    return text[start:end].rstrip("\n").splitlines() + [""] if start >= 0 and end > start else []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results")
    parser.add_argument("--sweep", nargs="*", default=[])
    parser.add_argument("--out", default=str(ROOT / "docs" / "ops.md"))
    parser.add_argument("--torch", nargs="*", default=[],
                        help="interpreters of environments with other torch releases")
    ns = parser.parse_args()
    results = test_results(ns.results)
    registry = default_registry()
    tests_by_target: dict[Any, list[Any]] = collections.defaultdict(list)
    for entry in OP_TESTS:
        for target in entry.covers:
            tests_by_target[target].append(entry)
    rows = []
    for target in sorted(registry.targets(), key=target_name):
        translation = registry.all_for(target)[-1]
        entries = tests_by_target.get(target, [])
        tested = "; ".join(
            f"`{e.id}` ({', '.join(str(d).replace('torch.', '') + ('' if not results else ': ' + results.get(f'{e.id}-' + str(d)[6:], '?')) for d in e.dtypes)})"
            for e in entries) or "model tests only"
        gaps = "; ".join(sorted({g.reason for e in entries for g in e.gaps})) or ""
        rows.append(f"| `{target_name(target)}` | {', '.join(emitted_ops(translation.function))} | {tested} | {gaps} |")
    text = "\n".join([
        "# Supported operators",
        "",
        "Generated by `python tools/gen_ops_doc.py` from the registry and `tests/ops/cases/`.",
        f"{len(rows)} FX targets have a translation (ATen overloads plus FX plumbing such as",
        "`operator.getitem` and SymInt arithmetic). Each OpInfo entry exports its samples,",
        "runs them in ONNX Runtime and compares with eager PyTorch.",
        "",
        *(sweep_section(ns.sweep) if ns.sweep else kept_sweep_section(Path(ns.out))),
        *versions_section(ns.torch),
        "## Translations",
        "",
        "| target | ONNX ops | tested by (OpInfo entry: dtypes) | known gaps |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        "## Translations for complex tensors",
        "",
        "Complex tensors travel as real pairs (shape + [2]); a node that reads or writes one is",
        "translated by its entry here (`onnxport.translate.complex.register_complex`):",
        "",
        ", ".join(f"`{target_name(t)}`" for t in sorted(COMPLEX.targets(), key=target_name)),
        "",
    ])
    Path(ns.out).write_text(text)
    print(f"wrote {ns.out}: {len(rows)} targets")


if __name__ == "__main__":
    main()
