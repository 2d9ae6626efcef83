"""transformers.js's web build in a real headless browser, on the WebAssembly backend.

One page (page.html), served from a local HTTP server with transformers.js's bundled web
build (dist/transformers.js, onnxruntime-web inside), onnxruntime-web's wasm files
(env.backends.onnx.wasm.wasmPaths) and the folders `onnxport export --layout transformers.js`
wrote, runs the q8 BERT classifier and the q8 Qwen3 generator (transformers.js's tokenizers,
model classes and generate()). @sparticuz/chromium's Chromium runs it headless, driven by
puppeteer-core (run_browser.mjs). Its results equal Node's (onnxruntime-node) on the same
files: the same token ids, logits and greedy tokens.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from tests.web.conftest import MAX_NEW_TOKENS, TEXT

HERE = Path(__file__).parent


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".js": "text/javascript",
                      ".wasm": "application/wasm", ".json": "application/json"}

    def log_message(self, *args: Any) -> None:
        pass


def test_browser_q8_matches_node(web_clients: Path, web_folders: Path,
                                 node_results: dict[str, Any], tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    modules = web_clients / "node_modules"
    (site / "tjs").symlink_to(modules / "@huggingface/transformers/dist")
    ort_web = modules / "onnxruntime-web/dist"
    if not ort_web.is_dir():  # npm may keep it under transformers' own node_modules
        ort_web = modules / "@huggingface/transformers/node_modules/onnxruntime-web/dist"
    (site / "ort").symlink_to(ort_web)
    (site / "models").symlink_to(web_folders)
    shutil.copy(HERE / "page.html", site / "page.html")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # the driver imports puppeteer-core and @sparticuz/chromium: it runs from their folder
        shutil.copy(HERE / "run_browser.mjs", web_clients / "run_browser.mjs")
        query = urllib.parse.urlencode({"text": TEXT, "max_new_tokens": MAX_NEW_TOKENS})
        url = f"http://127.0.0.1:{server.server_address[1]}/page.html?{query}"
        out = tmp_path / "browser.json"
        proc = subprocess.run(["node", "run_browser.mjs", url, str(out)], cwd=web_clients,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"the browser driver failed:\n{proc.stderr[-3000:]}"
    finally:
        server.shutdown()
        server.server_close()
    page = json.loads(out.read_text())
    assert "error" not in page, f"{page['error']}\n" + "\n".join(page.get("console", [])[-20:])
    assert page["backend"] == "wasm"
    for name in ("bert", "qwen3"):
        node = node_results[name]["q8"]
        got = page[name]
        assert got["input_ids"] == node["input_ids"], name
        a = np.asarray(got["logits"]["data"], np.float64)
        b = np.asarray(node["logits"]["data"], np.float64)
        assert got["logits"]["dims"] == node["logits"]["dims"], name
        diff = float(np.abs(a - b).max())
        # The same file and kernels' integer arithmetic (uint8 x uint8); only the order of
        # float sums may differ between the x86 and WebAssembly builds.
        assert diff <= 1e-5 * float(np.abs(b).max()), (name, diff)
        if name == "qwen3":
            assert got["tokens"] == node["tokens"], (got["tokens"], node["tokens"])
        print(f"browser {name} q8: max |logits - node| {diff:.3g}"
              + (f", tokens {got['tokens']}" if name == "qwen3" else ""))
    print(page.get("userAgent"))
