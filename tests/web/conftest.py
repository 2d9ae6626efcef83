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
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import file_lock
from tests.web.checkpoints import save_web_checkpoint

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="session")
def web_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> the tiny checkpoint folder with its tokenizer (saved once per session)."""
    root = tmp_path_factory.mktemp("web-checkpoints")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = save_web_checkpoint(name, root / name)
        return made[name]

    return get
