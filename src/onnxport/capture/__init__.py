"""The capture stage: turn a model into an ExportedProgram the translator can walk."""

from __future__ import annotations

from onnxport.capture.captured import Captured, node_value
from onnxport.capture.dynamo import capture

__all__ = ["Captured", "capture", "node_value"]
