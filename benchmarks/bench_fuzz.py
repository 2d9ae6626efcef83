"""The fuzz benchmark: random small modules exported by onnxport and by torch.onnx.

    python benchmarks/bench_fuzz.py --seeds 500 [--start 1000] [--timeout 60] [--out FILE]
    python benchmarks/bench_fuzz.py --only 23          # one seed, every variant, with details
    python benchmarks/bench_fuzz.py --seeds 2000 --start 2000 --exporters torch.onnx \
        --flavours torchscript --jsonl a.jsonl         # one shard; every outcome kept as a line
    python benchmarks/bench_fuzz.py --merge a.jsonl b.jsonl --out FILE   # one table of shards
    python benchmarks/bench_fuzz.py --seed-list seeds.txt --jsonl a.jsonl   # re-run some seeds

Each seed runs in both flavours (dynamo=True / dynamo=False), static and dynamic (dim 0, and
from seed 10000 on the wider grammar's dims and Dim styles: tests/fuzz/generator.py), with
onnxport and with torch.onnx on the same modules, in a worker process per exporter with a
per-variant timeout. Prints (and with --out writes as markdown) the outcome table: matches,
typed errors, silent mismatches, ORT-invalid files, untyped exceptions, hangs, clobbered
folders; then every outcome that fails the suite, with its seed. The outcomes are defined in
tests/fuzz/harness.py ("runtime rounding": ONNX Runtime differs from eager but
onnx.reference, run on the same file, matches eager).

A run can be split in shards (by seeds, exporter or flavour) that each append their outcomes
to a JSON-lines file (`--jsonl`); `--merge` prints one table of several such files, with the
seed range each (exporter, flavour) covers.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.fuzz.harness import (  # noqa: E402
    ACCEPTED,
    EXPORTERS,
    FLAVOURS,
    OUTCOMES,
    SHAPES,
    Outcome,
    Worker,
)

_TITLES = {"match": "matches", "typed": "typed errors", "runtime_rounding": "runtime rounding",
           "mismatch": "silent mismatch",
           "ort_invalid": "ORT-invalid", "untyped": "untyped", "hang": "hang",
           "clobbered": "clobbered"}


def _ranges(seeds: set[int]) -> str:
    """'2000-2399, 2500' for a set of seeds."""
    spans: list[list[int]] = []
    for s in sorted(seeds):
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def table(results: list[Outcome], seeds: int, seconds: float) -> str:
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    covered: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    skipped: dict[str, set[int]] = collections.defaultdict(set)
    for r in results:
        covered[(r.exporter, r.flavour)].add(r.seed)
        if r.outcome == "skip":
            skipped[r.exporter].add(r.seed)
            continue
        counts[(r.exporter, r.flavour)][r.outcome] += 1
    for (exporter, _), c in list(counts.items()):
        counts[(exporter, "all")] += c
    lines = [f"{seeds} seeds; each exported static and dynamic (dim 0) per flavour "
             f"({seconds / 60:.1f} min). Skipped (eager model fails): "
             f"{max((len(v) for v in skipped.values()), default=0)} seeds.", "",
             "| exporter | flavour | seeds | cases | "
             + " | ".join(_TITLES[o] for o in OUTCOMES) + " |",
             "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " |"]
    for exporter in EXPORTERS:
        flavours = [f for f in FLAVOURS if counts.get((exporter, f))]
        for flavour in (*flavours, "all") if len(flavours) > 1 else flavours:
            c = counts[(exporter, flavour)]
            total = sum(c.values())
            seen = covered[(exporter, flavour)] if flavour != "all" else set.union(
                *(covered[(exporter, f)] for f in flavours))
            lines.append(f"| {exporter} | {flavour} | {_ranges(seen)} | {total} | "
                         + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    bad = [r for r in results if r.outcome not in (*ACCEPTED, "skip")]
    rounding = [r for r in results if r.outcome == "runtime_rounding"]
    if rounding:
        lines += ["", "Runtime rounding (ORT differs from eager; onnx.reference on the same file "
                  "matches eager):", ""]
        for r in sorted(rounding, key=lambda r: (r.exporter, r.seed)):
            lines.append(f"* seed {r.seed} {r.variant}: {' '.join(r.detail.split())[:240]}")
    static = [r for r in results if r.outcome == "match" and r.detail.startswith("made static")]
    if static:
        per = collections.Counter(f"{r.exporter}/{r.flavour}" for r in static)
        lines += ["", "Dims asked to be dynamic that the file has static, with a warning naming "
                  "them (" + ", ".join(f"{k}: {n}" for k, n in sorted(per.items())) + "):", ""]
        for r in sorted(static, key=lambda r: (r.exporter, r.seed))[:40]:
            lines.append(f"* seed {r.seed} {r.variant}: {r.detail[:200]}")
    if bad:
        lines += ["", "Outcomes that fail the suite:", ""]
        for r in sorted(bad, key=lambda r: (r.exporter, r.outcome, r.seed)):
            detail = " ".join(r.detail.split())[:240]
            lines.append(f"* seed {r.seed} {r.variant}: **{r.outcome}** {detail}")
    typed = collections.Counter(
        (r.exporter, " ".join(r.detail.split())[:90]) for r in results if r.outcome == "typed")
    if typed:
        lines += ["", "Most frequent typed errors:", ""]
        for (exporter, message), n in typed.most_common(12):
            lines.append(f"* {exporter} ({n}x): {message}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="number of seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--only", type=int, default=None, help="run one seed, show details")
    parser.add_argument("--seed-list", default=None, metavar="FILE",
                        help="run the seeds listed in FILE (whitespace-separated), e.g. to "
                             "re-run those a fix touches; with --jsonl and --merge the "
                             "later outcome of a variant wins")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per variant")
    parser.add_argument("--budget", type=float, default=None,
                        help="stop starting new seeds after this many minutes")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--flavours", default=",".join(FLAVOURS))
    parser.add_argument("--jsonl", default=None,
                        help="append every outcome to this JSON-lines file as it comes")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSONL",
                        help="print (and with --out write) one table of these files")
    parser.add_argument("--range", default=None, metavar="FIRST-LAST",
                        help="with --merge: only these seeds")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    ns = parser.parse_args()
    if ns.merge:
        first, last = (int(x) for x in ns.range.split("-")) if ns.range else (None, None)
        merge(ns.merge, ns.out, first, last)
        return
    exporters = tuple(ns.exporters.split(","))
    flavours = tuple(ns.flavours.split(","))
    if ns.only is not None:
        seeds = [ns.only]
    elif ns.seed_list:
        with open(ns.seed_list, encoding="utf-8") as fh:
            seeds = [int(t) for t in fh.read().split()]
    else:
        seeds = list(range(ns.start, ns.start + ns.seeds))
    workers = {e: Worker(timeout=ns.timeout) for e in exporters}
    results: list[Outcome] = []
    start = time.perf_counter()
    done = 0
    sink = open(ns.jsonl, "a", encoding="utf-8") if ns.jsonl else None
    try:
        for seed in seeds:
            if ns.budget and time.perf_counter() - start > ns.budget * 60:
                break
            for exporter in exporters:
                for flavour in flavours:
                    for shapes in SHAPES:
                        r = workers[exporter].run(seed, (exporter, flavour, shapes))
                        results.append(r)
                        if sink is not None:
                            sink.write(json.dumps(dataclasses.asdict(r)) + "\n")
                            sink.flush()
                        if ns.only is not None or r.outcome not in (*ACCEPTED, "skip"):
                            print(f"seed {seed} {r.variant}: {r.outcome} ({r.seconds:.1f}s) "
                                  f"{r.detail[:300]}", flush=True)
            done += 1
            if done % 25 == 0:
                print(f"... {done} seeds, {(time.perf_counter() - start) / 60:.1f} min",
                      flush=True)
    finally:
        for w in workers.values():
            w.close()
        if sink is not None:
            sink.close()
    if ns.only is not None:
        from tests.fuzz.generator import generate

        print(generate(ns.only).source)
    text = table(results, done, time.perf_counter() - start)
    print(text)
    if ns.out:
        header = (f"# Fuzz outcomes, {datetime.date.today().isoformat()}\n\n"
                  f"`python benchmarks/bench_fuzz.py --seeds {ns.seeds} --start {ns.start}"
                  f"{f' --budget {ns.budget:g}' if ns.budget else ''}`\n\n")
        with open(ns.out, "w", encoding="utf-8") as fh:
            fh.write(header + text + "\n")


def merge(paths: list[str], out: str | None, first: int | None = None,
          last: int | None = None) -> None:
    """One table of the outcomes in JSON-lines files (a later line for the same variant wins),
    of the seeds from `first` to `last` when given."""
    by_key: dict[tuple[int, str, str, str], Outcome] = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    r = Outcome(**json.loads(line))
                    if first is not None and not first <= r.seed <= (last or r.seed):
                        continue
                    by_key[(r.seed, r.exporter, r.flavour, r.shapes)] = r
    results = sorted(by_key.values(), key=lambda r: (r.seed, r.exporter, r.flavour, r.shapes))
    seconds = sum(r.seconds for r in results)
    text = table(results, len({r.seed for r in results}), seconds)
    text = text.replace(f"({seconds / 60:.1f} min)", f"({seconds / 60:.1f} min of export and "
                        "check time summed over the shards)", 1)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(f"# Fuzz outcomes, {datetime.date.today().isoformat()}\n\n"
                     f"`python benchmarks/bench_fuzz.py --merge {' '.join(paths)}"
                     f"{f' --range {first}-{last}' if first is not None else ''}`\n\n"
                     + text + "\n")


if __name__ == "__main__":
    main()
