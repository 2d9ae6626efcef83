"""External data: where a model's external tensors may be read from, and the checksums
`ONNXProgram.save` records for its files (`onnxport.weights.verify_external_data`).

Below `program`, `_serialize` and `weights`, which all read external data.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from onnxport.errors import OnnxExporterError

__all__ = ["CHECKSUM_KEY", "DETACHED", "ExternalDataError", "check_external_data",
           "check_external_location", "external_tensors", "has_external_data",
           "verify_checksums"]

CHECKSUM_KEY = "pkg.onnxport.external_data_crc32"
_READ_CHUNK = 64 * 1024**2


class ExternalDataError(OnnxExporterError, ValueError):
    """An external-data location that is not a file inside the model's folder.

    onnxport reads external data only from plain (relative) file names inside the folder of
    the model that references them: absolute paths, `..` and symlinks that lead out of the
    folder are refused before anything is read.
    """


def check_external_location(location: str | os.PathLike[str], base_dir: str | os.PathLike[str],
                            *, name: str = "") -> str:
    """The path external data at `location` (relative to `base_dir`) is read from.

    Raises:
        ExternalDataError: `location` is empty, absolute, goes up with `..`, or resolves
            (through symlinks) outside `base_dir`.
    """
    loc = os.fspath(location)
    what = f"weight '{name}': " if name else ""
    refuse = (f"{what}external data location {loc!r} is not a file inside the model's folder "
              f"{os.fspath(base_dir) or '.'!r}")
    if not loc or "\x00" in loc:
        raise ExternalDataError(f"{what}external data location {loc!r} is empty or not a path")
    if os.path.isabs(loc) or loc.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", loc):
        raise ExternalDataError(f"{refuse}: it is an absolute path; locations must be file "
                                "names relative to the model")
    if ".." in re.split(r"[\\/]", loc):
        raise ExternalDataError(f"{refuse}: '..' leaves the folder")
    folder = os.path.realpath(os.fspath(base_dir) or ".")
    target = os.path.realpath(os.path.join(folder, loc))
    if os.path.commonpath([folder, target]) != folder or target == folder:
        raise ExternalDataError(f"{refuse}: it resolves to {target!r} (through a symlink)")
    return target


def external_tensors(model: ir.Model) -> Iterator[tuple[str, ir.ExternalTensor]]:
    """(name, tensor) for every external tensor of the model: weights and tensor attributes,
    in the main graph, subgraphs and functions."""
    stack: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    while stack:
        graph = stack.pop()
        if isinstance(graph, ir.Graph):
            for name, value in graph.initializers.items():
                if isinstance(value.const_value, ir.ExternalTensor):
                    yield name, value.const_value
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    stack.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    stack.extend(attr.value)
                elif attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
                    yield f"{node.name or node.op_type}.{attr.name}", attr.value
                elif attr.type == ir.AttributeType.TENSORS:
                    for tensor in attr.value:
                        if isinstance(tensor, ir.ExternalTensor):
                            yield f"{node.name or node.op_type}.{attr.name}", tensor


DETACHED = "__onnxport_detached__"  # passes/convert_opset.py's placeholder, never read


def check_external_data(model: ir.Model) -> None:
    """Refuse (ExternalDataError) any external tensor whose location leaves its folder."""
    for name, tensor in external_tensors(model):
        if tensor.location != DETACHED:
            check_external_location(tensor.location, tensor.base_dir, name=name)


def has_external_data(model: ir.Model) -> bool:
    return any(t.location != DETACHED for _, t in external_tensors(model))


def verify_checksums(model_path: str) -> list[str]:
    """Problems with the external-data files of the model at `model_path` (empty: all match)."""
    model = onnx.load(model_path, load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    if CHECKSUM_KEY not in props:
        return [f"{model_path}: the model records no external-data checksums"]
    try:
        files = json.loads(props[CHECKSUM_KEY])
    except ValueError:
        return [f"{model_path}: unreadable {CHECKSUM_KEY} metadata"]
    directory = os.path.dirname(os.path.abspath(model_path))
    problems = []
    for name, record in sorted(files.items()):
        try:
            path = check_external_location(name, directory)
        except ExternalDataError as e:
            problems.append(str(e))
            continue
        if not os.path.isfile(path):
            problems.append(f"{name}: missing")
            continue
        size = os.path.getsize(path)
        if size != record.get("bytes"):
            problems.append(f"{name}: {size} bytes, the model recorded {record.get('bytes')}")
            continue
        crc = 0
        with open(path, "rb", buffering=0) as fh:
            buffer = bytearray(_READ_CHUNK)
            view = memoryview(buffer)
            while True:
                n = fh.readinto(buffer)
                if not n:
                    break
                crc = zlib.crc32(view[:n], crc)
        if f"{crc:08x}" != record.get("crc32"):
            problems.append(f"{name}: CRC-32 {crc:08x}, the model recorded {record.get('crc32')}")
    return problems
