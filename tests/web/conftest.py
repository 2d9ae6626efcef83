"""Fixtures: transformers.js (and a headless Chromium) from the npm registry, built on first use.

`npm install --ignore-scripts` of WEB_PACKAGES into `<repo>/.web-clients/` (gitignored; set
ONNXPORT_WEB_CLIENTS to use another folder), once, under a file lock, as the optimum client
venv of tests/cli_tasks/conftest.py. `--ignore-scripts`: the packages' install scripts fetch
from hosts other than the registry; onnxruntime-node ships its CPU library inside the package
and @sparticuz/chromium its browser binary. A failed install fails the tests that need it,
with npm's message: nothing is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import numpy as np

from tests.processes import file_lock
from tests.web.checkpoints import save_web_checkpoint

REPO = Path(__file__).resolve().parents[2]
DTYPES = ["fp32", "fp16", "q8", "q4", "bnb4"]
TEXT = "the cat sat on the mat"
MAX_NEW_TOKENS = 6
KINDS = {"bert": "classify", "qwen3": "generate", "t5": "text2text", "vit": "image"}
NODE_SCRIPT = Path(__file__).with_name("run_node.mjs")
WEB_PACKAGES = {"@huggingface/transformers": "4.3.2", "@sparticuz/chromium": "147.0.0",
                "puppeteer-core": "24.43.1"}
TRANSFORMERS_NODE = "node_modules/@huggingface/transformers/dist/transformers.node.mjs"


@pytest.fixture(scope="session")
def web_clients() -> Path:
    """The folder with node_modules/ holding WEB_PACKAGES (installed if missing)."""
    for tool in ("node", "npm"):
        assert shutil.which(tool), f"the web tests need `{tool}` (Node.js 20+) on PATH"
    folder = Path(os.environ.get("ONNXPORT_WEB_CLIENTS", REPO / ".web-clients"))
    stamp = folder / ".onnxport-web-clients-ready"
    wanted = json.dumps(WEB_PACKAGES, sort_keys=True)
    with file_lock(Path(tempfile.gettempdir()) / "onnxport-web-clients.lock"):
        if not stamp.is_file() or stamp.read_text() != wanted:
            start = time.perf_counter()
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "package.json").write_text(json.dumps(
                {"name": "onnxport-web-clients", "private": True, "type": "module",
                 "dependencies": WEB_PACKAGES}, indent=2))
            proc = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit",
                                   "--no-fund", "--loglevel=error"], cwd=folder,
                                  capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, (
                f"npm install of {', '.join(WEB_PACKAGES)} into {folder} failed (the web tests "
                f"need the npm registry once):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
            assert (folder / TRANSFORMERS_NODE).is_file(), f"no {TRANSFORMERS_NODE} in {folder}"
            stamp.write_text(wanted)
            print(f"installed the web clients into {folder} in "
                  f"{time.perf_counter() - start:.0f}s")
    return folder


def pixels() -> np.ndarray:
    """The image the ViT runs are fed (the image processor is not exercised)."""
    return np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)


@pytest.fixture(scope="session")
def web_folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """localModelPath: <root>/<name>/ exported by `onnxport export --layout transformers.js`
    (the four exports run side by side). Under pytest-xdist the workers share one root
    (the first exports under a file lock, the others reuse it)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "web-models"
    stamp = root / ".exported"
    with file_lock(base / "web-models.lock"):
        if stamp.is_file():
            return root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        checkpoints = {name: save_web_checkpoint(name, root / "checkpoints" / name)
                       for name in KINDS}
        # the CLI's own per-dtype validation once (T5: both decoder branches); all four are
        # compared with eager through transformers.js by the tests
        export_side_by_side(checkpoints, root, DTYPES, validated="t5")
        stamp.write_text("ok")
    return root


def export_side_by_side(checkpoints: dict[str, Path], root: Path, dtypes: list[str],
                        validated: str) -> None:
    """`onnxport export --layout transformers.js` of each checkpoint into <root>/<name>, the
    exports running at once; only `validated` runs the CLI's validation (the tests compare
    every folder with eager through transformers.js)."""
    procs = {}
    for name, checkpoint in checkpoints.items():
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "onnxport.cli", "export", "--model", str(checkpoint),
             str(root / name), "--layout", "transformers.js", "--dtypes", ",".join(dtypes),
             "--overwrite"] + ([] if name == validated else ["--no-validate"]),
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"export of {name} failed:\n{out[-3000:]}\n{err[-3000:]}"
        if name == validated:
            assert "validated: every dtype's file" in out, out


@pytest.fixture(scope="session")
def web_checkpoints(web_folders: Path) -> Any:
    """name -> the tiny checkpoint folder with its tokenizer that web_folders exported."""
    return lambda name: web_folders / "checkpoints" / name


@pytest.fixture(scope="session")
def node_results(web_clients: Path, web_folders: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, dict[str, Any]]:
    """name -> dtype -> what transformers.js gave (input_ids, logits, tokens)."""
    work = tmp_path_factory.mktemp("node")
    values = pixels()
    runs = []
    for name, kind in KINDS.items():
        run: dict[str, Any] = {"name": name, "kind": kind, "dtypes": DTYPES,
                               "max_new_tokens": MAX_NEW_TOKENS}
        if kind == "image":
            run["pixel_values"] = {"dims": list(values.shape), "data": values.ravel().tolist()}
        else:
            run["text"] = TEXT
        runs.append(run)
    job = {"transformers": str(web_clients / TRANSFORMERS_NODE),
           "root": str(web_folders) + "/", "runs": runs}
    (work / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(["node", str(NODE_SCRIPT), str(work / "job.json"), str(work / "out.json")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"node failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads((work / "out.json").read_text())
