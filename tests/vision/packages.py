"""torchvision, timm and diffusers for the vision model tests, in a folder of their own.

Why not in the test environment: torchvision's wheel on the package index is built against
torch's CUDA build. On the CPU build its compiled ops do not load and `import torchvision`
fails (see shim.py), and transformers imports torchvision whenever it is installed, so an
installed torchvision would break `import transformers` in every process, the CLI's
subprocesses included. Here the three packages go into `<repo>/.vision-packages/<key>/`
(`pip install --target`, without dependencies: torch, numpy, safetensors and huggingface_hub
come from the environment under test), which is put on `sys.path` only by the tests that
need it, after `shim.define_ops()` has defined the `torchvision::` operators.

`vision_packages()` builds the folder on first use, once per environment, under a file lock
(pytest-xdist workers share it). torchvision releases are made for one torch minor release
each: TORCHVISION maps them; a torch with no matching torchvision on the index skips the
tests that need it, saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tests.processes import file_lock

REPO = Path(__file__).resolve().parents[2]

# torch minor release -> the torchvision release built for it.
TORCHVISION = {"2.13": "0.28.0", "2.14": "0.29.2"}
# Pure-Python packages the models need, pinned so a run is reproducible.
OTHERS = ["timm==1.0.31", "diffusers==0.42.1", "pillow>=10"]


def torchvision_version() -> str | None:
    """The torchvision release for the installed torch, or None if the index has none."""
    return TORCHVISION.get(".".join(torch.__version__.split(".")[:2]))


def vision_packages() -> Path | None:
    """The folder holding torchvision, timm and diffusers for this environment (built if
    missing), or None when no torchvision release matches the installed torch."""
    version = torchvision_version()
    if version is None:
        return None
    requirements = [f"torchvision=={version}", *OTHERS]
    key = hashlib.sha1(json.dumps([sys.prefix, *site.getsitepackages()]).encode()).hexdigest()[:10]
    folder = Path(os.environ.get("ONNXPORT_VISION_PACKAGES", REPO / ".vision-packages" / key))
    stamp = folder / ".onnxport-vision-ready"
    ready = json.dumps(requirements)
    with file_lock(Path(tempfile.gettempdir()) / f"onnxport-vision-packages-{key}.lock"):
        if not stamp.is_file() or stamp.read_text() != ready:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--upgrade",
                            "--disable-pip-version-check", "--no-deps", "--target", str(folder),
                            *requirements], check=True)
            stamp.write_text(ready)
            print(f"installed {' '.join(requirements)} into {folder} in "
                  f"{time.perf_counter() - start:.0f}s", file=sys.stderr)
    return folder


def import_vision() -> Any:
    """`torchvision`, importable with runnable ops, and timm / diffusers importable; None
    when this torch has no torchvision release (the caller skips, naming the reason)."""
    from .shim import load_torchvision

    if "torchvision" not in sys.modules:
        folder = vision_packages()
        if folder is None:
            return None
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    return load_torchvision()
