"""Model types x dtypes through `--layout transformers.js` and transformers.js in Node.

    python benchmarks/bench_web_types.py [--types bert,llama,...] [--optimum] [--out results.md]

Each type's tiny checkpoint (tests/cli_tasks/checkpoints.py) is exported with
`export_transformersjs` at fp32, fp16, q8 and q4 (validated against eager by ONNX Runtime),
then one `node` process (tests/web/run_node.mjs, transformers.js from `.web-clients/`, which
`python -m pytest tests/web` installs) loads every folder at every dtype:

* single-graph tasks: `AutoModel` with the task's example feeds; every output compared with
  eager PyTorch's on the same feeds;
* decoder-only LMs: `AutoModelForCausalLM`, logits of 5 random tokens and 6 greedy tokens
  from `generate()`, against transformers' eager model and `generate()`;
* encoder-decoders: `AutoModelForSeq2SeqLM`, the first decoder step's logits and 6 greedy
  tokens; Whisper: `AutoModelForSpeechSeq2Seq` on random log-mel features, the same; the
  vision encoder-decoder (ViT + GPT-2): `AutoModelForVision2Seq` on a random image;
* CLIP and SigLIP: `AutoModel` (model.onnx, both towers) and, as rows of their own, the
  single-tower classes on text_model.onnx / vision_model.onnx (`CLIPTextModelWithProjection`,
  ..., compared with transformers' class of the same name).

`--optimum`: each checkpoint is also exported by `optimum-cli export onnx` (optimum-onnx 0.1
in the client venv tests/cli_tasks builds, `.venv-clients/<key>`), for the task onnxport
picked, and quantized by `optimum-cli onnxruntime quantize --avx2` (optimum's 8-bit files,
`<graph>_quantized.onnx`); the folder is moved by hand into transformers.js's layout: every
`.onnx` file (and its external data) into `onnx/` as named, the other files at the root.
transformers.js runs those folders the same way, side by side in the table.

Criteria (issue 41): fp32 within 1e-4 and tokens equal; fp16 within 2% of the largest
value; q8 and q4 finite and of the right shape, generation running.
"""

from __future__ import annotations

import argparse
import json
import re
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

DTYPES = ["fp32", "fp16", "q8", "q4", "bnb4"]
DEFAULT_TYPES = ["llama", "qwen2", "mistral", "phi3", "gemma", "gpt2", "bert", "roberta",
                 "distilbert", "deberta_v2", "albert", "electra", "xlm_roberta", "mpnet",
                 "camembert", "llama_base", "gpt2_base", "vit", "convnext", "deit", "beit",
                 "swin", "resnet", "dinov2", "segformer", "wav2vec2", "wav2vec2_ctc",
                 "hubert_ctc", "t5", "bart", "marian", "whisper", "clip", "siglip",
                 "vision_encoder_decoder"]
NEW_TOKENS = 6
# transformers.js's single-tower classes, by type and file (towers.TOWERS names the same)
TOWER_CLASSES = {"clip": {"text_model.onnx": "CLIPTextModelWithProjection",
                          "vision_model.onnx": "CLIPVisionModelWithProjection"},
                 "siglip": {"text_model.onnx": "SiglipTextModel",
                            "vision_model.onnx": "SiglipVisionModel"}}
# optimum-cli's example inputs where its defaults do not fit a tiny checkpoint (bench_cli.py)
OPTIMUM_ARGS = {"whisper": ["--nb_max_frames", "32", "--feature_size", "16"]}


def _json_tensor(t: torch.Tensor) -> dict[str, Any]:
    kind = {torch.int64: "int64", torch.bool: "bool"}.get(t.dtype, "float32")
    data = t.to(torch.int64 if kind != "float32" else torch.float32).flatten().tolist()
    return {"type": kind, "dims": list(t.shape), "data": data}


def client_venv() -> Path:
    """The client venv tests/cli_tasks/conftest.py builds for this interpreter."""
    import hashlib
    import os
    import site

    if os.environ.get("ONNXPORT_CLIENT_VENV"):
        return Path(os.environ["ONNXPORT_CLIENT_VENV"])
    key = hashlib.sha1(json.dumps([sys.prefix, *site.getsitepackages()]).encode()).hexdigest()[:10]
    return REPO / ".venv-clients" / key


def optimum_moved(ck: Path, task: str, name: str, work: Path) -> tuple[Path | None, str]:
    """optimum-cli's folder for `ck`, moved by hand into transformers.js's layout under
    work/models-optimum/<name>/ (the .onnx files into onnx/, as named); (None, why) when
    optimum-cli fails."""
    import os
    import shutil

    raw = work / "optimum-raw" / name
    cmd = [str(client_venv() / "bin" / "optimum-cli"), "export", "onnx", "--model", str(ck),
           "--task", task, *OPTIMUM_ARGS.get(name, []), str(raw)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONWARNINGS"] = "ignore"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode:
        last = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"]
        return None, f"optimum-cli failed: {last[0][:160]}"
    # optimum's own 8-bit files: `optimum-cli onnxruntime quantize` (dynamic, AVX2 config)
    # writes <graph>_quantized.onnx beside each graph, the name transformers.js's q8 reads
    quantized = work / "optimum-q8" / name
    proc_q = subprocess.run([str(client_venv() / "bin" / "optimum-cli"), "onnxruntime",
                             "quantize", "--onnx_model", str(raw), "--avx2", "-o",
                             str(quantized)], capture_output=True, text=True, env=env,
                            timeout=1800)
    moved = work / "models-optimum" / name
    (moved / "onnx").mkdir(parents=True)
    sources = list(raw.iterdir()) + (list(quantized.glob("*_quantized.onnx*"))
                                     if proc_q.returncode == 0 else [])
    for f in sources:
        onnx_file = ".onnx" in f.name
        shutil.copy2(f, moved / "onnx" / f.name if onnx_file else moved / f.name)
    note = "" if proc_q.returncode == 0 else " (onnxruntime quantize failed: " + (
        [ln for ln in proc_q.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"])[0][:120] + ")"
    return moved, ", ".join(sorted(p.name for p in (moved / "onnx").iterdir())) + note


def score(got: dict[str, Any], dtype: str, ref: dict[str, np.ndarray],
          ref_tokens: list[int] | None) -> tuple[bool, str]:
    """(pass, cell text) of one folder at one dtype against eager."""
    if "error" in got:
        first = got["error"].splitlines()[0]
        missing = re.search(r"(?:file|model)[^\n]*?([\w/.-]+\.onnx)", first)
        if "ModelFileNotFound" in first or "Could not locate file" in first or (
                "not found" in first.lower() and missing):
            return False, f"no file ({Path(missing.group(1)).name if missing else first[:60]})"
        return False, "FAIL: " + first[:100]
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
    if not compared:
        note = f"no output in common ({', '.join(outputs)})"
    if ref_tokens is not None:
        same = got.get("tokens") == ref_tokens
        ran = bool(got.get("tokens")) and len(got["tokens"]) > 1
        ok &= ran and (same or dtype != "fp32")
        note += ", tokens " + ("equal" if same else
                               f"differ ({got.get('tokens')} vs eager {ref_tokens})")
    return ok, ("ok " if ok else "FAIL ") + note


def run_node(node_module: Path, root: Path, runs: list[dict[str, Any]], out: Path
             ) -> tuple[dict[str, Any], float]:
    job = out.with_suffix(".job.json")
    job.write_text(json.dumps({"transformers": str(node_module), "root": str(root) + "/",
                               "runs": runs}))
    t0 = time.perf_counter()
    proc = subprocess.run(["node", str(REPO / "tests/web/run_node.mjs"), str(job), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--optimum", action="store_true",
                    help="also run optimum-cli's folders moved into the layout by hand")
    ap.add_argument("--out", default=None)
    ns = ap.parse_args()
    from onnxport.tasks import checkpoint, registry
    from onnxport.tasks.graphs import graphs_for
    from onnxport.tasks.layouts.towers import tower_specs
    from onnxport.tasks.layouts.transformersjs import export_transformersjs
    from tests.cli_tasks.checkpoints import save_checkpoint

    clients = REPO / ".web-clients"
    node_module = clients / "node_modules/@huggingface/transformers/dist/transformers.node.mjs"
    assert node_module.is_file(), "run `python -m pytest tests/web` once to install transformers.js"
    if ns.optimum:
        assert (client_venv() / "bin" / "optimum-cli").is_file(), (
            "run `python -m pytest tests/cli_tasks/test_clients.py` once to build the client venv")
    work = Path(tempfile.mkdtemp(prefix="web-types-"))
    runs, eager, python_rows, families, optimum_files = [], {}, {}, {}, {}
    names = ns.types.split(",")
    rows_order: list[str] = []
    for name in names:
        start = time.perf_counter()
        ck = save_checkpoint(name, work / "ck" / name)
        try:
            result = export_transformersjs(ck, work / "models" / name, dtypes=DTYPES)
        except Exception as e:  # noqa: BLE001 - the sweep reports every failure
            python_rows[name] = f"export failed: {type(e).__name__}: {str(e)[:200]}"
            print(name, python_rows[name], flush=True)
            rows_order.append(name)
            continue
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
            elif result.task.startswith("image-to-text"):
                size = config.encoder.image_size
                image = torch.rand(1, 3, size, size)
                run.update(kind="image2text", feeds={"pixel_values": _json_tensor(image)})
                start_id = model.config.decoder_start_token_id
                logits = model(pixel_values=image,
                               decoder_input_ids=torch.tensor([[start_id]])).logits
                tokens = model.generate(pixel_values=image, do_sample=False,
                                        max_new_tokens=NEW_TOKENS)[0].tolist()
                eager[name] = ({"logits": logits.numpy()}, tokens)
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
        rows_order.append(name)
        for spec in tower_specs(model) if name in TOWER_CLASSES else []:
            row = f"{name} ({spec.filename.removesuffix('.onnx')})"
            feeds = spec.make_inputs(spec.shapes[0])
            runs.append({"name": row, "folder": name, "kind": "raw",
                         "class": TOWER_CLASSES[name][spec.filename], "dtypes": DTYPES,
                         "feeds": {k: _json_tensor(v) for k, v in feeds.items()}})
            eager[row] = ({k: v.float().numpy() for k, v in spec.eager(feeds).items()}, None)
            families[row] = families[name]
            rows_order.append(row)
        print(f"{name}: {result.task} exported in {time.perf_counter() - start:.1f}s",
              flush=True)
        if ns.optimum:
            t0 = time.perf_counter()
            moved, files = optimum_moved(ck, result.task, name, work)
            optimum_files[name] = files
            print(f"{name}: optimum-cli {'ok' if moved else 'failed'} in "
                  f"{time.perf_counter() - t0:.1f}s: {files}", flush=True)
    results, node_seconds = run_node(node_module, work / "models", runs, work / "out.json")
    if ns.optimum:
        moved_runs = [r for r in runs if (work / "models-optimum" / r.get("folder", r["name"])).is_dir()]
        optimum_results, _ = run_node(node_module, work / "models-optimum", moved_runs,
                                      work / "out-optimum.json")
    cols = DTYPES + ([f"optimum-cli moved: {d}" for d in DTYPES] if ns.optimum else [])
    lines = ["| model type | task | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    passed = total = 0
    opt_passed = {d: 0 for d in DTYPES}
    for row in rows_order:
        if row not in results:
            lines.append(f"| {row} | - | " + " | ".join([str(python_rows.get(row))] +
                                                       [""] * (len(cols) - 1)) + " |")
            total += len(DTYPES)
            continue
        ref, ref_tokens = eager[row]
        cells = []
        for dtype in DTYPES:
            total += 1
            ok, cell = score(results[row][dtype], dtype, ref, ref_tokens)
            passed += ok
            cells.append(cell)
        if ns.optimum:
            folder = next(r.get("folder", r["name"]) for r in runs if r["name"] == row)
            for dtype in DTYPES:
                if row not in optimum_results:
                    cells.append(optimum_files.get(folder, "-"))
                    continue
                ok, cell = score(optimum_results[row][dtype], dtype, ref, ref_tokens)
                opt_passed[dtype] += ok
                cells.append(cell)
        lines.append(f"| {row} | {families[row][1]} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    summary = (f"{passed} of {total} type x dtype pairs pass; node ran "
               f"{len(runs)} runs x {len(DTYPES)} dtypes in {node_seconds:.1f}s")
    if ns.optimum:
        rows = len(rows_order)
        summary += ("\noptimum-cli's folders moved by hand: " + ", ".join(
            f"{d} {opt_passed[d]} of {rows}" for d in DTYPES)
            + f"; {sum(opt_passed.values())} of {rows * len(DTYPES)} in all"
            + "\n\noptimum-cli's files per type: " + "; ".join(
                f"{k}: {v}" for k, v in optimum_files.items()))
    print(table)
    print(summary)
    if ns.out:
        Path(ns.out).write_text(f"# transformers.js {DTYPES} sweep\n\n{table}\n\n{summary}\n")
    return 0 if passed == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
