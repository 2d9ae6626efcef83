"""The fuzz benchmark: random small modules exported by onnxport and by torch.onnx.

    python benchmarks/bench_fuzz.py --seeds 500 [--start 1000] [--timeout 60] [--out FILE]
    python benchmarks/bench_fuzz.py --only 23          # one seed, every variant, with details

Each seed runs in both flavours (dynamo=True / dynamo=False), static and dynamic (dim 0), with
onnxport and with torch.onnx on the same modules, in a worker process per exporter with a
per-variant timeout. Prints (and with --out writes as markdown) the outcome table: matches,
typed errors, silent mismatches, ORT-invalid files, untyped exceptions, hangs, clobbered
folders; then every outcome that is none of the first two, with its seed. The outcomes are
defined in tests/fuzz/harness.py.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.fuzz.harness import (  # noqa: E402
    EXPORTERS,
    FLAVOURS,
    OUTCOMES,
    SHAPES,
    Outcome,
    Worker,
)

_TITLES = {"match": "matches", "typed": "typed errors", "mismatch": "silent mismatch",
           "ort_invalid": "ORT-invalid", "untyped": "untyped", "hang": "hang",
           "clobbered": "clobbered"}


def table(results: list[Outcome], seeds: int, seconds: float) -> str:
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    skipped = collections.Counter()
    for r in results:
        if r.outcome == "skip":
            skipped[r.exporter] += 1
            continue
        counts[(r.exporter, r.flavour)][r.outcome] += 1
        counts[(r.exporter, "all")][r.outcome] += 1
    lines = [f"{seeds} seeds; each exported static and dynamic (dim 0) per flavour "
             f"({seconds / 60:.1f} min). Skipped (eager model fails): "
             f"{skipped['onnxport'] // 4 if skipped else 0} seeds.", "",
             "| exporter | flavour | cases | " + " | ".join(_TITLES[o] for o in OUTCOMES) + " |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " |"]
    for exporter in EXPORTERS:
        for flavour in (*FLAVOURS, "all"):
            c = counts.get((exporter, flavour))
            if not c:
                continue
            total = sum(c.values())
            lines.append(f"| {exporter} | {flavour} | {total} | "
                         + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    bad = [r for r in results if r.outcome not in ("match", "typed", "skip")]
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
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per variant")
    parser.add_argument("--budget", type=float, default=None,
                        help="stop starting new seeds after this many minutes")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--out", default=None, help="write the markdown table here")
    ns = parser.parse_args()
    exporters = tuple(ns.exporters.split(","))
    seeds = [ns.only] if ns.only is not None else list(range(ns.start, ns.start + ns.seeds))
    workers = {e: Worker(timeout=ns.timeout) for e in exporters}
    results: list[Outcome] = []
    start = time.perf_counter()
    done = 0
    try:
        for seed in seeds:
            if ns.budget and time.perf_counter() - start > ns.budget * 60:
                break
            for exporter in exporters:
                for flavour in FLAVOURS:
                    for shapes in SHAPES:
                        r = workers[exporter].run(seed, (exporter, flavour, shapes))
                        results.append(r)
                        if ns.only is not None or r.outcome not in ("match", "typed", "skip"):
                            print(f"seed {seed} {r.variant}: {r.outcome} ({r.seconds:.1f}s) "
                                  f"{r.detail[:300]}", flush=True)
            done += 1
            if done % 25 == 0:
                print(f"... {done} seeds, {(time.perf_counter() - start) / 60:.1f} min",
                      flush=True)
    finally:
        for w in workers.values():
            w.close()
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


if __name__ == "__main__":
    main()
