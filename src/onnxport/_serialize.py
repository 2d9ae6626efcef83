"""Streaming serialization of a model with its weights, straight from tensor memory.

Inline weights (`write_model`) and external data (`write_model_external`, below).

Protobuf would copy every weight several times (tensor -> bytes -> message -> string). The
wire format lets us do better: a message is a sequence of (tag, length, payload) fields in any
order, so the model is written as its small weight-less proto followed by the graph's
initializer fields, each a TensorProto header plus the raw bytes of the tensor, written from
the tensor's own memory in one large write. The result parses as an ordinary ModelProto.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Callable
from typing import IO, Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport.weights import CheckpointTensor, stream_tensor

_MODEL_GRAPH = (7 << 3) | 2  # ModelProto.graph, length-delimited
_GRAPH_INITIALIZER = (5 << 3) | 2  # GraphProto.initializer
_TENSOR_RAW_DATA = (9 << 3) | 2  # TensorProto.raw_data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _raw_view(tensor: Any) -> memoryview | None:
    """The tensor's bytes without a copy where possible (little-endian, as ONNX stores them)."""
    if isinstance(tensor, TorchTensor):
        raw = tensor.raw
        if isinstance(raw, torch.Tensor):
            t = raw.detach().cpu().contiguous()
            if t.dtype in (torch.bfloat16, torch.bool) or t.dtype.is_floating_point or \
                    t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
                if not t.numel():
                    return memoryview(b"")
                return memoryview(t.reshape(-1).view(torch.uint8).numpy())
    if isinstance(tensor, ir.TensorProtocol) and tensor.dtype not in (ir.DataType.STRING,):
        if tensor.dtype.bitwidth < 8:
            return None
        array = tensor.numpy()
        if array.dtype.kind in "biuf" and array.dtype.byteorder != ">":
            return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return None


def write_model(model: ir.Model, fh: IO[bytes]) -> None:
    """Write `model` with its main-graph weights inline, streaming them from tensor memory."""
    graph = model.graph
    initializers = list(graph.initializers.values())
    streamed: list[tuple[bytes, memoryview]] = []
    kept: list[ir.Value] = []
    for value in initializers:
        tensor = value.const_value
        if isinstance(tensor, CheckpointTensor):
            # Read when written (below), one at a time: its size is known from its header.
            raw: Any = tensor
        else:
            raw = _raw_view(tensor) if tensor is not None else None
        if raw is None:
            kept.append(value)
            continue
        header = onnx.TensorProto(name=value.name, dims=list(tensor.shape.numpy()),  # type: ignore[union-attr]
                                  data_type=int(tensor.dtype))  # type: ignore[union-attr]
        streamed.append((header.SerializeToString(), raw))
    graph.initializers.clear()
    try:
        for value in kept:
            graph.initializers[value.name] = value
        proto = ir.to_proto(model)
    finally:
        graph.initializers.clear()
        for value in initializers:
            graph.initializers[value.name] = value
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    fields = []
    total = len(graph_bytes)
    for header, raw in streamed:
        raw_prefix = bytes([_TENSOR_RAW_DATA]) + _varint(raw.nbytes)
        length = len(header) + len(raw_prefix) + raw.nbytes
        prefix = bytes([_GRAPH_INITIALIZER]) + _varint(length) + header + raw_prefix
        fields.append((prefix, raw))
        total += len(prefix) + raw.nbytes
    fh.write(proto.SerializeToString())
    fh.write(bytes([_MODEL_GRAPH]) + _varint(total))
    fh.write(graph_bytes)
    for prefix, raw in fields:
        fh.write(prefix)
        if isinstance(raw, CheckpointTensor):
            view, keep = stream_tensor(raw) or (memoryview(raw.tobytes()), None)
            fh.write(view)
            del view, keep
        else:
            fh.write(raw)


# -- external data -----------------------------------------------------------------------------
#
# Layout: the weights go into one file `<model>.data`, or into shards `<model>-00001-of-0000N.data`
# of at most `max_shard_bytes` each (a larger tensor gets a shard of its own). Every tensor of at
# least ALIGNMENT bytes starts at an offset that is a multiple of ALIGNMENT (64 KiB, the
# allocation granularity of Windows and a multiple of every page size), so that runtimes can
# memory-map it in place; smaller ones are packed at SMALL_ALIGNMENT. Tensors of at most
# INLINE_BYTES stay in the model (as onnx-ir and torch.onnx do).
#
# Writing: the layout is planned from the tensors' headers first; then each tensor is loaded
# (a view of the memory-mapped checkpoint, or of the parameter's memory), its CRC-32 computed,
# and it is handed to a writer thread that writes it in large sequential writes, while the
# next one is loaded. Small tensors are gathered into one buffer first. At most
# IN_FLIGHT_BYTES wait for the writer (plus the tensor being loaded). The CRC-32 and size of
# every file are recorded in the model's metadata (CHECKSUM_KEY) and checked by
# `verify_checksums` (`onnxport.weights.verify_external_data`).

ALIGNMENT = 64 * 1024
SMALL_ALIGNMENT = 64
INLINE_BYTES = 256
WRITE_CHUNK = 64 * 1024**2
GATHER_BYTES = 16 * 1024**2
IN_FLIGHT_BYTES = 256 * 1024**2
CHECKSUM_KEY = "pkg.onnxport.external_data_crc32"


def shard_names(data_name: str, count: int) -> list[str]:
    """The external-data file names: `data_name` alone, or `<stem>-0000i-of-0000N.data`."""
    if count <= 1:
        return [data_name]
    stem = data_name[:-len(".data")] if data_name.endswith(".data") else data_name
    return [f"{stem}-{i:05d}-of-{count:05d}.data" for i in range(1, count + 1)]


def stale_data_files(directory: str, data_name: str, keep: list[str]) -> list[str]:
    """Data files of an earlier save of the same model in `directory` that `keep` replaces.

    They are `data_name` itself and its shards `<stem>-0000i-of-0000N.data` (of any N), minus
    the files in `keep` (the ones just written). Nothing else is matched.
    """
    stem = data_name[:-len(".data")] if data_name.endswith(".data") else data_name
    shard = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}\.data")
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    return sorted(name for name in entries
                  if name not in keep and (name == data_name or shard.fullmatch(name))
                  and os.path.isfile(os.path.join(directory, name)))


def _aligned(offset: int, nbytes: int) -> int:
    align = ALIGNMENT if nbytes >= ALIGNMENT else SMALL_ALIGNMENT
    return (offset + align - 1) // align * align


def plan_layout(sizes: list[int], max_shard_bytes: int | None) -> list[tuple[int, int]]:
    """(shard index, offset) for tensors of the given sizes, in order."""
    layout = []
    shard, end = 0, 0
    for nbytes in sizes:
        offset = _aligned(end, nbytes)
        if max_shard_bytes is not None and end > 0 and offset + nbytes > max_shard_bytes:
            shard, offset = shard + 1, 0
        layout.append((shard, offset))
        end = offset + nbytes
    return layout


class _Writer:
    """Sequential writes of one file from a thread, fed pieces bounded in bytes in flight."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        self._queue: deque[tuple[memoryview, Any] | None] = deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self.position = 0
        self.crc = 0
        self._thread = threading.Thread(target=self._run, name="onnxport-writer", daemon=True)
        self._thread.start()

    def put(self, view: memoryview, keep: Any = None) -> None:
        """Queue `view` (kept alive through `keep`); the CRC is computed here, meanwhile the
        writer thread writes what was queued before."""
        if not view.nbytes:
            return
        self.crc = zlib.crc32(view, self.crc)
        self.position += view.nbytes
        with self._cond:
            while self._pending and self._pending + view.nbytes > IN_FLIGHT_BYTES and \
                    self._error is None:
                self._cond.wait()
            self._raise()
            self._queue.append((view, keep))
            self._pending += view.nbytes
            self._cond.notify_all()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                item = self._queue[0]
            if item is None:
                return
            view, _ = item
            try:
                if self._error is None:
                    for start in range(0, view.nbytes, WRITE_CHUNK):
                        chunk = view[start:start + WRITE_CHUNK]
                        while chunk.nbytes:
                            written = self._fh.write(chunk)
                            chunk = chunk[written:]
            except BaseException as e:  # noqa: BLE001 - re-raised in the producer
                self._error = e
            with self._cond:
                self._queue.popleft()
                self._pending -= view.nbytes
                self._cond.notify_all()

    def close(self) -> None:
        """Wait for every queued write, then flush to disk; raises the writer's error."""
        try:
            with self._cond:
                self._queue.append(None)
                self._cond.notify_all()
            self._thread.join()
            self._raise()
            os.fsync(self._fh.fileno())
        finally:
            self._fh.close()


def write_external_data(
    tensors: list[tuple[str, ir.TensorProtocol]], directory: str, data_name: str, *,
    max_shard_bytes: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, tuple[str, int]], dict[str, dict[str, Any]]]:
    """Write the tensors into `directory`/`data_name` (or its shards).

    Returns ({tensor name: (file name, offset)}, {file name: {"bytes": n, "crc32": "%08x"}}).
    """
    sizes = [t.nbytes for _, t in tensors]
    layout = plan_layout(sizes, max_shard_bytes)
    count = (layout[-1][0] + 1) if layout else 0
    names = shard_names(data_name, count)
    total = sum(sizes)
    done = 0
    where: dict[str, tuple[str, int]] = {}
    files: dict[str, dict[str, Any]] = {}
    writer: _Writer | None = None
    gather = bytearray()
    shard = -1

    def flush_gather() -> None:
        nonlocal gather
        if gather:
            assert writer is not None
            writer.put(memoryview(gather), gather)
            gather = bytearray()

    def finish() -> None:
        nonlocal writer
        if writer is not None:
            flush_gather()
            writer.close()
            files[names[shard]] = {"bytes": writer.position, "crc32": f"{writer.crc:08x}"}
            writer = None

    try:
        for (name, tensor), nbytes, (index, offset) in zip(tensors, sizes, layout):
            if index != shard:
                finish()
                shard = index
                writer = _Writer(os.path.join(directory, names[shard]))
            assert writer is not None
            at = writer.position + len(gather)
            if offset > at:
                padding = offset - at
                if nbytes < GATHER_BYTES:
                    gather += bytes(padding)
                else:
                    flush_gather()
                    writer.put(memoryview(bytes(padding)))
            streamed = stream_tensor(tensor)
            view, keep = streamed if streamed is not None else (memoryview(tensor.tobytes()), None)
            if view.nbytes != nbytes:
                raise ValueError(f"weight '{name}': {view.nbytes} bytes of data, its dtype and "
                                 f"shape say {nbytes}")
            if nbytes < GATHER_BYTES:
                gather += view
                if len(gather) >= GATHER_BYTES:
                    flush_gather()
            else:
                flush_gather()
                writer.put(view, keep)
            del view, keep, streamed
            where[name] = (names[shard], offset)
            done += nbytes
            if progress is not None:
                progress(done, total)
        finish()
    except BaseException:
        if writer is not None:
            with contextlib.suppress(BaseException):
                writer.close()
        raise
    return where, files


def write_model_external(model: ir.Model, path: str, data_name: str, *,
                         max_shard_bytes: int | None = None,
                         progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Write `model` to `path` with its main-graph weights in external data beside it.

    Returns the names of the data files written (in the folder of `path`). The caller
    (`program._save_atomically`) writes into a staging folder and renames into place.
    """
    directory = os.path.dirname(os.path.abspath(path))
    graph = model.graph
    external = [(name, v.const_value) for name, v in graph.initializers.items()
                if v.const_value is not None and v.const_value.nbytes > INLINE_BYTES
                and v.const_value.dtype != ir.DataType.STRING]
    where, files = write_external_data(external, directory, data_name,  # type: ignore[arg-type]
                                       max_shard_bytes=max_shard_bytes, progress=progress)
    originals = {name: graph.initializers[name].const_value for name, _ in external}
    had_key = CHECKSUM_KEY in model.metadata_props
    previous = model.metadata_props.get(CHECKSUM_KEY)
    try:
        for name, tensor in external:
            location, offset = where[name]
            graph.initializers[name].const_value = ir.ExternalTensor(
                location, offset, tensor.nbytes, tensor.dtype, shape=tensor.shape, name=name,
                base_dir=directory)
        if files:
            model.metadata_props[CHECKSUM_KEY] = json.dumps(files, sort_keys=True)
        else:
            model.metadata_props.pop(CHECKSUM_KEY, None)
        proto = ir.to_proto(model)
    finally:
        for name, tensor in originals.items():
            graph.initializers[name].const_value = tensor
        if had_key:
            model.metadata_props[CHECKSUM_KEY] = previous  # type: ignore[assignment]
        else:
            model.metadata_props.pop(CHECKSUM_KEY, None)
    with open(path, "wb") as fh:
        fh.write(proto.SerializeToString())
    return list(files)


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
    from onnxport.program import ExternalDataError, check_external_location

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
            buffer = bytearray(WRITE_CHUNK)
            view = memoryview(buffer)
            while True:
                n = fh.readinto(buffer)
                if not n:
                    break
                crc = zlib.crc32(view[:n], crc)
        if f"{crc:08x}" != record.get("crc32"):
            problems.append(f"{name}: CRC-32 {crc:08x}, the model recorded {record.get('crc32')}")
    return problems
