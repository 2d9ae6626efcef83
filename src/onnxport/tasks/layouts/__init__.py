"""Folder layouts other runtimes load, written over the graphs `export_checkpoint` exports.

The default layout is optimum's (`export_checkpoint` writes it). `transformersjs` writes
transformers.js's: graphs in `onnx/`, one file per dtype.
"""

from __future__ import annotations

LAYOUTS = ("optimum", "transformers.js")

__all__ = ["LAYOUTS"]
