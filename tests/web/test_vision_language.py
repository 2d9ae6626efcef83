"""Vision-language folders of `--layout transformers.js` loaded by transformers.js in Node.

A tiny CLIP (zero-shot-image-classification) and a ViT + GPT-2 VisionEncoderDecoder
(image-to-text with past, TrOCR-like), exported once each by the CLI at fp32, q8 and q4,
then run by transformers.js 4.x in one `node` process:

* CLIP: `CLIPModel` from onnx/model.onnx (both towers), `CLIPTextModelWithProjection` from
  onnx/text_model.onnx and `CLIPVisionModelWithProjection` from onnx/vision_model.onnx, each
  compared output by output with transformers' class of the same name loaded from the
  checkpoint (not with onnxport's tower wrappers);
* VisionEncoderDecoder: `AutoModelForVision2Seq` (encoder_model + decoder_model_merged),
  the first decoder step's logits and 6 greedy tokens from its generate(), against
  transformers' eager model and generate().

fp32 within 1e-4 (the exporter's tolerance) and tokens equal; q8 and q4 finite, of the right
shape, generation running (8- and 4-bit weights change the model: error printed).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.processes import file_lock
from tests.web.conftest import TRANSFORMERS_NODE, export_side_by_side

DTYPES = ["fp32", "q8", "q4"]
NEW_TOKENS = 6
NODE_SCRIPT = Path(__file__).with_name("run_node.mjs")
# run name -> (folder, transformers.js class / kind, transformers class for eager)
CLIP_RUNS = {"clip": ("CLIPModel", "CLIPModel"),
             "clip_text": ("CLIPTextModelWithProjection", "CLIPTextModelWithProjection"),
             "clip_vision": ("CLIPVisionModelWithProjection", "CLIPVisionModelWithProjection")}


def _tensor(t: torch.Tensor) -> dict[str, Any]:
    kind = "int64" if t.dtype == torch.int64 else "float32"
    return {"type": kind, "dims": list(t.shape), "data": t.flatten().tolist()}


@pytest.fixture(scope="session")
def vl_folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<root>/clip and <root>/vision_encoder_decoder, exported side by side by the CLI
    (shared by pytest-xdist workers under a file lock, as web_folders)."""
    from tests.cli_tasks.checkpoints import save_checkpoint

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "web-vl-models"
    with file_lock(base / "web-vl-models.lock"):
        if (root / ".exported").is_file():
            return root
        root.mkdir(parents=True, exist_ok=True)
        checkpoints = {name: save_checkpoint(name, root / "checkpoints" / name)
                       for name in ("clip", "vision_encoder_decoder")}
        # CLIP: the CLI's per-dtype validation once (its towers against transformers' tower
        # classes); both are compared with eager through transformers.js below
        export_side_by_side(checkpoints, root, DTYPES, validated="clip")
        (root / ".exported").write_text("ok")
    return root


@pytest.fixture(scope="session")
def vl_results(web_clients: Path, vl_folders: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what transformers.js gave per run and dtype, the eager reference per run)."""
    import transformers as tf

    torch.manual_seed(0)
    clip_dir = vl_folders / "checkpoints" / "clip"
    ved_dir = vl_folders / "checkpoints" / "vision_encoder_decoder"
    clip_config = tf.AutoConfig.from_pretrained(str(clip_dir))
    size = clip_config.vision_config.image_size
    ids = torch.randint(3, clip_config.text_config.vocab_size, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    pixels = torch.rand(3, 3, size, size)
    feeds = {"clip": {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels},
             "clip_text": {"input_ids": ids, "attention_mask": mask},
             "clip_vision": {"pixel_values": pixels}}
    runs, eager = [], {}
    for name, (js_class, py_class) in CLIP_RUNS.items():
        runs.append({"name": name, "folder": "clip", "kind": "raw", "class": js_class,
                     "dtypes": DTYPES, "feeds": {k: _tensor(v) for k, v in feeds[name].items()}})
        # a tower's projection is as wide as the parent's (the tiny config's sub-configs keep
        # transformers' default of 512 beside the parent's 16)
        sub = ({} if name == "clip" else {"config": getattr(clip_config, name[5:] + "_config")})
        for c in sub.values():
            c.projection_dim = clip_config.projection_dim
        model = getattr(tf, py_class).from_pretrained(str(clip_dir), **sub).eval()
        with torch.no_grad():
            out = model(**feeds[name])
        eager[name] = ({k: v.numpy() for k, v in out.items() if isinstance(v, torch.Tensor)
                        and k != "vision_model_output"}, None)
    ved = tf.VisionEncoderDecoderModel.from_pretrained(str(ved_dir)).eval()
    image = torch.rand(1, 3, ved.config.encoder.image_size, ved.config.encoder.image_size)
    start = ved.config.decoder_start_token_id
    with torch.no_grad():
        logits = ved(pixel_values=image, decoder_input_ids=torch.tensor([[start]])).logits
        tokens = ved.generate(pixel_values=image, do_sample=False,
                              max_new_tokens=NEW_TOKENS)[0].tolist()
    eager["vision_encoder_decoder"] = ({"logits": logits.numpy()}, tokens)
    runs.append({"name": "vision_encoder_decoder", "kind": "image2text", "dtypes": DTYPES,
                 "feeds": {"pixel_values": _tensor(image)}, "max_new_tokens": NEW_TOKENS})
    work = tmp_path_factory.mktemp("node-vl")
    (work / "job.json").write_text(json.dumps({
        "transformers": str(web_clients / TRANSFORMERS_NODE), "root": str(vl_folders) + "/",
        "runs": runs}))
    proc = subprocess.run(["node", str(NODE_SCRIPT), str(work / "job.json"),
                           str(work / "out.json")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"node failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads((work / "out.json").read_text()), eager


@pytest.mark.parametrize("name", [*CLIP_RUNS, "vision_encoder_decoder"])
def test_vision_language_loads(name: str, vl_results: tuple[dict[str, Any], dict[str, Any]]
                               ) -> None:
    results, eager = vl_results
    ref, ref_tokens = eager[name]
    lines = []
    for dtype in DTYPES:
        got = results[name][dtype]
        assert "error" not in got, f"transformers.js failed on {name} {dtype}:\n{got['error']}"
        outputs = got.get("outputs") or {"logits": got["logits"]}
        compared = sorted(set(outputs) & set(ref))
        # every output of the file is one transformers' class gives
        assert compared and set(outputs) <= set(ref), (name, dtype, sorted(outputs), sorted(ref))
        for out in compared:
            a = np.asarray(outputs[out]["data"], np.float64).reshape(outputs[out]["dims"])
            e = ref[out].astype(np.float64)
            assert a.shape == e.shape, (name, dtype, out, a.shape, e.shape)
            assert np.isfinite(a).all(), (name, dtype, out)
            diff = float(np.abs(a - e).max())
            lines.append(f"{name} {dtype} {out}: max |diff| {diff:.3g} "
                         f"({diff / (float(np.abs(e).max()) or 1):.2%} of the largest)")
            if dtype == "fp32":
                assert diff <= 1e-4, lines[-1]
        if ref_tokens is not None:
            tokens = got["tokens"]
            lines.append(f"{name} {dtype}: tokens {tokens} (eager {ref_tokens})")
            assert len(tokens) > 1, lines[-1]  # generation ran past the start token
            if dtype == "fp32":
                assert tokens == ref_tokens, lines[-1]
    print("\n".join(lines))
