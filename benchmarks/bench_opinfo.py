"""OpInfo sweep: how many of torch's OpInfo entries export correctly, onnxport vs torch.onnx.

For every OpInfo in `op_db` whose eager run works on CPU, and for each requested dtype the
OpInfo supports on CPU, every sample (or the first `--max-samples`) is exported through
`onnxport.export(..., optimize=False)` and through `torch.onnx.export(..., dynamo=True)`,
both models are run in ONNX Runtime, and the outputs are compared with eager PyTorch using
torch's default tolerances (`equal_nan=True`). An op passes for a dtype when all its
samples pass. Results go to stdout and to `benchmarks/results/opinfo_<date>.md`; with
`--jsonl FILE` each (op, dtype) record is also appended to FILE as it finishes, so a sweep
run in pieces (`--start/--stop`, `--ops`) can be merged with `--merge FILE`.

    python benchmarks/bench_opinfo.py --dtypes float32 --max-samples 2 --start 0 --stop 100
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import os
import signal
import sys
import time
import traceback
import warnings
import zlib
from collections.abc import Iterator
from typing import Any

import torch

import onnxport
from onnxport.verify.compare import flatten_outputs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.ops.op_db import (  # noqa: E402  (shared with the op tests)
    assert_outputs_match,
    random_outputs,
    sample_module,
)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64,
          "bool": torch.bool}
EXPORTERS = ("onnxport", "torch.onnx")


class SampleTimeout(Exception):
    """A sample's export or run took longer than --timeout seconds."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise SampleTimeout in the main thread after `seconds` (checked between bytecodes)."""
    if seconds <= 0:
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise SampleTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines() or [""]
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:  # "N operators have no translation:" + the list
        line = f"{line} {lines[1].strip()}"
    return f"{type(e).__name__}: {line}"[:300]


def run_onnxport(module: torch.nn.Module, tensors: tuple[Any, ...],
                 expected: list[torch.Tensor]) -> bool:
    program = onnxport.export(module, tensors, optimize=False)
    if program is None:
        raise RuntimeError("onnxport.export returned None")
    random = random_outputs(program.exported_program)
    assert_outputs_match(list(program(*tensors)), expected, random)
    return any(random)


def run_torch_onnx(module: torch.nn.Module, tensors: tuple[Any, ...],
                   expected: list[torch.Tensor]) -> bool:
    # Silence torch.onnx's progress prints; errors still propagate.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The comparison baseline; src/ never imports torch.onnx.
        program = torch.onnx.export(module, tensors, dynamo=True, verbose=False)  # noqa: TID251
        if program is None:
            raise RuntimeError("torch.onnx.export returned None")
        actual = program(*tensors)
    random = random_outputs(program.exported_program)
    assert_outputs_match(flatten_outputs(actual), expected, random)
    return any(random)


RUNNERS = {"onnxport": run_onnxport, "torch.onnx": run_torch_onnx}


def sweep_op(opinfo: Any, dtype: torch.dtype, exporters: tuple[str, ...], max_samples: int,
             timeout: float) -> dict[str, Any] | None:
    """One (op, dtype) record, or None when the op has no CPU eager run for this dtype."""
    if dtype not in opinfo.supported_dtypes("cpu"):
        return None
    try:
        with time_limit(timeout):
            samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception:  # noqa: BLE001  (an OpInfo whose samples cannot be built is not tried)
        return None
    if max_samples > 0:
        samples = samples[:max_samples]
    prepared = []
    for sample in samples:
        module, tensors = sample_module(opinfo.op, sample)
        # Samples may share tensors that an op mutates (batch norm's running stats): each
        # exporter gets copies of the values this sample's eager run started from.
        originals = tuple(_copy(t) for t in tensors)
        try:
            with time_limit(timeout), torch.no_grad():
                expected = flatten_outputs(module(*tensors))
        except Exception:  # noqa: BLE001, S112  (eager failure: the sample is not counted)
            continue
        if not expected:
            continue
        prepared.append((module, originals, expected))
    if not prepared:
        return None
    record: dict[str, Any] = {"op": opinfo_id(opinfo), "dtype": str(dtype).replace("torch.", ""),
                              "samples": len(prepared)}
    for name in exporters:
        passed, error, start = 0, "", time.perf_counter()
        for i, (module, tensors, expected) in enumerate(prepared):
            try:
                with time_limit(timeout):
                    if RUNNERS[name](module, tuple(_copy(t) for t in tensors), expected):
                        record["random"] = True
                passed += 1
            except Exception as e:  # noqa: BLE001  (counted and reported; the sweep goes on)
                if not error:
                    error = f"sample {i}: {first_line(e)}"
                    if os.environ.get("BENCH_TRACEBACK"):
                        traceback.print_exc()
        record[name] = {"passed": passed, "ok": passed == len(prepared), "error": error,
                        "seconds": round(time.perf_counter() - start, 2)}
    return record


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` that keeps its layout: a view stays a view into a copy of its storage."""
    if t.is_sparse or t.layout != torch.strided:
        return t.clone()
    storage = t.untyped_storage().clone()
    return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.size(), t.stride())


def opinfo_id(opinfo: Any) -> str:
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


def summarize(records: list[dict[str, Any]], exporters: tuple[str, ...]) -> str:
    lines = ["| dtype | ops tried | " + " | ".join(f"{e} pass | {e} %" for e in exporters)
             + " | of which random (shape/dtype checked) |",
             "|---|---|" + "---|---|" * len(exporters) + "---|"]
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        rows = [r for r in records if r["dtype"] == dtype]
        cells = []
        for e in exporters:
            ok = sum(1 for r in rows if r.get(e, {}).get("ok"))
            cells.append(f"{ok} | {100 * ok / len(rows):.1f}")
        random = sum(1 for r in rows if r.get("random"))
        lines.append(f"| {dtype} | {len(rows)} | " + " | ".join(cells) + f" | {random} |")
    return "\n".join(lines) + (
        "\n\nRandom: an output that depends on a random draw or on uninitialized memory "
        "(`empty*`) can only match eager PyTorch in shape and dtype, so that is what is compared "
        "for it (tests/ops/op_db.py `random_outputs`); every other output is compared by value.")


def failure_list(records: list[dict[str, Any]], exporter: str) -> str:
    lines = [f"| op | dtype | samples passed | first error ({exporter}) |", "|---|---|---|---|"]
    for r in records:
        result = r.get(exporter)
        if result is None or result["ok"]:
            continue
        error = result["error"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['op']} | {r['dtype']} | {result['passed']}/{r['samples']} | {error} |")
    return "\n".join(lines)


def both_list(records: list[dict[str, Any]]) -> str:
    only = [r for r in records if all(e in r for e in EXPORTERS)]
    port_only = sorted(f"{r['op']} ({r['dtype']})" for r in only
                       if r["onnxport"]["ok"] and not r["torch.onnx"]["ok"])
    torch_only = sorted(f"{r['op']} ({r['dtype']})" for r in only
                        if r["torch.onnx"]["ok"] and not r["onnxport"]["ok"])
    return (f"Pass with onnxport only ({len(port_only)}): {', '.join(port_only) or '-'}\n\n"
            f"Pass with torch.onnx only ({len(torch_only)}): {', '.join(torch_only) or '-'}")


def report(records: list[dict[str, Any]], exporters: tuple[str, ...], args: argparse.Namespace,
           seconds: float) -> str:
    cap = args.max_samples if args.max_samples > 0 else "all"
    header = (f"# OpInfo sweep {datetime.date.today().isoformat()}\n\n"
              f"torch {torch.__version__}, onnxport optimize=False, torch.onnx dynamo=True; "
              f"samples per (op, dtype): {cap}; per-sample timeout {args.timeout:g} s; "
              f"{f'{seconds / 60:.1f} min' if seconds else 'merged from ' + args.merge}.\n"
              "An op passes for a dtype when every sample tried matches eager PyTorch "
              "(torch.testing.assert_close defaults, equal_nan).\n")
    parts = [header, summarize(records, exporters)]
    if set(EXPORTERS) <= set(exporters):
        parts.append(both_list(records))
    if "onnxport" in exporters:
        parts.append("## onnxport failures\n\n" + failure_list(records, "onnxport"))
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (name or name.variant)")
    parser.add_argument("--start", type=int, default=0, help="first index into op_db (sorted by name)")
    parser.add_argument("--stop", type=int, default=None, help="one past the last index into op_db")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per (op, dtype); 0 = all")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per sample and exporter")
    parser.add_argument("--jsonl", default="", help="append each record to this file as it is done; "
                        "records already in it are skipped (resume)")
    parser.add_argument("--merge", default="", help="only build the report from this JSONL file")
    parser.add_argument("--every", type=int, default=1,
                        help="only about one OpInfo in N, chosen by a hash of its name: the same "
                             "ops on every torch release, whatever entries it adds or drops")
    parser.add_argument("--out", default="", help="report path (default benchmarks/results/opinfo_<date>.md)")
    args = parser.parse_args(argv)
    exporters = tuple(args.exporters)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"opinfo_{datetime.date.today().isoformat()}.md")

    if args.merge:
        with open(args.merge) as f:
            records = [json.loads(line) for line in f if line.strip()]
        text = report(records, exporters, args, 0.0)
        _write(out, text)
        print(text)
        return 0

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    opinfos = sorted(op_db, key=opinfo_id)
    wanted = {name for name in args.ops.split(",") if name}
    if wanted:
        opinfos = [o for o in opinfos if o.name in wanted or opinfo_id(o) in wanted]
    opinfos = opinfos[args.start:args.stop]
    if args.every > 1:
        opinfos = [o for o in opinfos if zlib.crc32(opinfo_id(o).encode()) % args.every == 0]
    done: set[tuple[str, str]] = set()
    records: list[dict[str, Any]] = []
    if args.jsonl and os.path.exists(args.jsonl):
        with open(args.jsonl) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done.add((r["op"], r["dtype"]))
                    records.append(r)
    start = time.perf_counter()
    for index, opinfo in enumerate(opinfos):
        for dtype_name in args.dtypes:
            if (opinfo_id(opinfo), dtype_name) in done:
                continue
            try:
                record = sweep_op(opinfo, DTYPES[dtype_name], exporters, args.max_samples,
                                  args.timeout)
            except Exception as e:  # noqa: BLE001  (one op must not stop the sweep)
                print(f"[{index}] {opinfo_id(opinfo)} {dtype_name}: sweep error {first_line(e)}",
                      file=sys.stderr)
                continue
            if record is None:
                continue
            records.append(record)
            status = " ".join(f"{e}={'ok' if record[e]['ok'] else 'FAIL'}" for e in exporters)
            print(f"[{args.start + index}] {record['op']} {dtype_name} "
                  f"({record['samples']} samples): {status}", file=sys.stderr, flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(record) + "\n")
    text = report(records, exporters, args, time.perf_counter() - start)
    _write(out, text)
    print(text)
    return 0


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
