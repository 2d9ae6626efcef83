"""Helpers for symbolic functions (torch.onnx.symbolic_helper): `parse_args`."""

from __future__ import annotations

from onnxport.translate.symbolic import parse_args

__all__ = ["parse_args"]
