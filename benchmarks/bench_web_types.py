"""Model types x dtypes through `--layout transformers.js` and transformers.js in Node.

    python benchmarks/bench_web_types.py [--types bert,llama,...] [--out results.md]

Each type's tiny checkpoint (tests/cli_tasks/checkpoints.py) is exported with
`export_transformersjs` at fp32, fp16, q8 and q4 (validated against eager by ONNX Runtime),
then one `node` process (tests/web/run_node.mjs, transformers.js from `.web-clients/`, which
`python -m pytest tests/web` installs) loads every folder at every dtype:

* single-graph tasks: `AutoModel` with the task's example feeds; every output compared with
  eager PyTorch's on the same feeds;
* decoder-only LMs: `AutoModelForCausalLM`, logits of 5 random tokens and 6 greedy tokens
  from `generate()`, against transformers' eager model and `generate()`;
* encoder-decoders: `AutoModelForSeq2SeqLM`, the first decoder step's logits and 6 greedy
  tokens; Whisper: `AutoModelForSpeechSeq2Seq` on random log-mel features, the same.

Criteria (issue 41): fp32 within 1e-4 and tokens equal; fp16 within 2% of the largest
value; q8 and q4 finite and of the right shape, generation running.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DTYPES = ["fp32", "fp16", "q8", "q4"]
DEFAULT_TYPES = ["llama", "qwen2", "mistral", "phi3", "gemma", "gpt2", "bert", "roberta",
                 "distilbert", "deberta_v2", "albert", "electra", "xlm_roberta", "mpnet",
                 "camembert", "llama_base", "gpt2_base", "vit", "convnext", "deit", "beit",
                 "swin", "resnet", "dinov2", "segformer", "wav2vec2", "wav2vec2_ctc",
                 "hubert_ctc", "t5", "bart", "marian", "whisper"]
NEW_TOKENS = 6


def _json_tensor(t: torch.Tensor) -> dict[str, Any]:
    kind = {torch.int64: "int64", torch.bool: "bool"}.get(t.dtype, "float32")
    data = t.to(torch.int64 if kind != "float32" else torch.float32).flatten().tolist()
    return {"type": kind, "dims": list(t.shape), "data": data}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--out", default=None)
    ns = ap.parse_args()
    from onnxport.tasks import checkpoint, registry
    from onnxport.tasks.graphs import graphs_for
    from onnxport.tasks.layouts.transformersjs import export_transformersjs
    from tests.cli_tasks.checkpoints import save_checkpoint

    clients = REPO / ".web-clients"
    node_module = clients / "node_modules/@huggingface/transformers/dist/transformers.node.mjs"
    assert node_module.is_file(), "run `python -m pytest tests/web` once to install transformers.js"
    work = Path(tempfile.mkdtemp(prefix="web-types-"))
    runs, eager, python_rows, families = [], {}, {}, {}
    for name in ns.types.split(","):
        start = time.perf_counter()
        ck = save_checkpoint(name, work / "ck" / name)
        try:
            result = export_transformersjs(ck, work / "models" / name, dtypes=DTYPES)
        except Exception as e:  # noqa: BLE001 - the sweep reports every failure
            python_rows[name] = f"export failed: {type(e).__name__}: {str(e)[:200]}"
            print(name, python_rows[name], flush=True)
            continue
        worst: dict[str, float] = {}
        for r in result.rows:
            rel = r.max_abs_diff / r.largest if r.largest else 0.0
            worst[r.dtype] = max(worst.get(r.dtype, 0.0), rel)
        python_rows[name] = worst
        config = checkpoint.load_config(ck)
        family, auto_class = registry.plan(config.model_type, result.task)
        families[name] = (family, result.task)
        model = checkpoint.load_model(ck, config, auto_class)
        run: dict[str, Any] = {"name": name, "dtypes": DTYPES, "max_new_tokens": NEW_TOKENS}
        torch.manual_seed(0)
        vocab = int(getattr(config, "vocab_size", 99) or 99)
        ids = torch.randint(4, vocab, (1, 5))
        with torch.no_grad():
            if result.task == "text-generation-with-past":
                run.update(kind="generate", input_ids=ids[0].tolist())
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
                tokens = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                        do_sample=False, max_new_tokens=NEW_TOKENS)[0].tolist()
                eager[name] = ({"logits": logits.numpy()}, tokens)
            elif result.task.startswith("automatic-speech-recognition") and \
                    family == "speech-seq2seq":
                features = torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions)
                run.update(kind="speech2text", feeds={"input_features": _json_tensor(features)})
                start_id = model.config.decoder_start_token_id
                logits = model(input_features=features,
                               decoder_input_ids=torch.tensor([[start_id]])).logits
                tokens = model.generate(input_features=features, do_sample=False,
                                        max_new_tokens=NEW_TOKENS)[0].tolist()
                # transformers' Whisper generate() returns the sequence without its decoder
                # start token, transformers.js's with it
                eager[name] = ({"logits": logits.numpy()}, [start_id, *tokens])
            elif result.task.startswith("text2text"):
                run.update(kind="text2text", input_ids=ids[0].tolist())
                start_id = model.config.decoder_start_token_id
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                               decoder_input_ids=torch.tensor([[start_id]])).logits
                tokens = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                        do_sample=False, max_new_tokens=NEW_TOKENS)[0].tolist()
                eager[name] = ({"logits": logits.numpy()}, tokens)
            else:
                spec = next(s for s in graphs_for(model, family, result.task)
                            if s.filename == "model.onnx")
                feeds = spec.make_inputs(spec.shapes[0])
                run.update(kind="raw", feeds={k: _json_tensor(v) for k, v in feeds.items()})
                eager[name] = ({k: v.float().numpy() for k, v in spec.eager(feeds).items()},
                               None)
        runs.append(run)
        print(f"{name}: {result.task} exported in {time.perf_counter() - start:.1f}s",
              flush=True)
    job = {"transformers": str(node_module), "root": str(work / "models") + "/", "runs": runs}
    (work / "job.json").write_text(json.dumps(job))
    t0 = time.perf_counter()
    proc = subprocess.run(["node", str(REPO / "tests/web/run_node.mjs"), str(work / "job.json"),
                           str(work / "out.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    node_seconds = time.perf_counter() - t0
    results = json.loads((work / "out.json").read_text())
    lines = ["| model type | task | " + " | ".join(DTYPES) + " |",
             "|---|---|" + "---|" * len(DTYPES)]
    passed = total = 0
    for name in ns.types.split(","):
        if name not in results:
            lines.append(f"| {name} | - | " + " | ".join([str(python_rows.get(name))] +
                                                        [""] * (len(DTYPES) - 1)) + " |")
            total += len(DTYPES)
            continue
        ref, ref_tokens = eager[name]
        cells = []
        for dtype in DTYPES:
            total += 1
            got = results[name][dtype]
            if "error" in got:
                cells.append("FAIL: " + got["error"].splitlines()[0][:80])
                continue
            outputs = got.get("outputs") or {"logits": got["logits"]}
            worst_abs, worst_rel, ok = 0.0, 0.0, True
            compared = [o for o in outputs if o in ref]
            ok &= bool(compared)  # no output in common would compare nothing
            for out, value in outputs.items():
                if out not in ref:
                    continue
                a = np.asarray(value["data"], np.float64).reshape(value["dims"])
                e = ref[out].astype(np.float64)
                if a.shape != e.shape or not np.isfinite(a).all():
                    ok = False
                    continue
                diff = float(np.abs(a - e).max())
                largest = float(np.abs(e).max()) or 1.0
                worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, diff / largest)
                if dtype == "fp32":
                    ok &= diff <= 1e-4
                elif dtype == "fp16":
                    ok &= diff <= 0.02 * largest
            note = f"{worst_abs:.1e} ({worst_rel:.1%})" + (
                f" [{', '.join(compared)}]" if len(compared) > 1 else "")
            if ref_tokens is not None:
                same = got.get("tokens") == ref_tokens
                ran = bool(got.get("tokens")) and len(got["tokens"]) > 1
                ok &= ran and (same or dtype != "fp32")
                note += ", tokens " + ("equal" if same else
                                       f"differ ({got.get('tokens')} vs eager {ref_tokens})")
            passed += ok
            cells.append(("ok " if ok else "FAIL ") + note)
        lines.append(f"| {name} | {families[name][1]} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    summary = (f"{passed} of {total} type x dtype pairs pass; node ran "
               f"{len(runs)} folders x {len(DTYPES)} dtypes in {node_seconds:.1f}s")
    print(table)
    print(summary)
    if ns.out:
        Path(ns.out).write_text(f"# transformers.js {DTYPES} sweep\n\n{table}\n\n{summary}\n")
    return 0 if passed == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
