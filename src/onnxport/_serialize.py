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
import ctypes
import errno
import functools
import json
import mmap
import os
import re
import sys
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

from onnxport._external import CHECKSUM_KEY
from onnxport.weights import CheckpointTensor, has_data, stream_tensor

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
# (a view of the memory-mapped checkpoint, or of the parameter's memory) and handed to the
# file's writer, which computes its CRC-32 while a thread writes the data before it in large
# sequential writes. Small tensors are gathered into one buffer first. At most DIRECT_BUFFERS *
# DIRECT_BUFFER bytes (buffered: IN_FLIGHT_BYTES) wait for the thread, plus the tensor being
# loaded. The CRC-32 and size of every file are recorded in the model's metadata
# (CHECKSUM_KEY) and checked by `_external.verify_checksums` (`onnxport.weights.verify_external_data`).
#
# Direct I/O: where the file system takes O_DIRECT (Linux), the pieces are copied into
# page-aligned buffers of DIRECT_BUFFER bytes, their CRC-32 computed there (the data is then in
# the CPU's cache), and the thread writes each full buffer straight to the disk. That skips the
# page cache: a third of the CPU time of a buffered write (the kernel's copy and page
# bookkeeping cost more than the copy into the buffer), and no gigabytes of dirty pages for the
# final fsync to wait for or to push other processes' pages out of memory. The file's last
# partial block is written without O_DIRECT.
#
# Buffered writes (where O_DIRECT is refused): left alone, the kernel starts writing dirty
# pages to disk only once they fill a tenth of memory (or after 5 s), and the final fsync then
# waits for the rest; the disk idles meanwhile. On Linux the thread starts the writeback of
# each WRITE_CHUNK as soon as it is written and waits for the chunk WRITEBACK_LAG bytes behind
# (`sync_file_range`), so the disk writes from the first chunk on, at most WRITEBACK_LAG bytes
# are dirty, and the fsync at the end is short.
#
# Read-ahead: weights that are memory-mapped files are read ahead (`madvise(MADV_WILLNEED)`),
# so that the copy or checksum does not wait for the disk page by page: parameters
# (`from_pretrained` in transformers 5 leaves them as views of the mapped checkpoint) one
# tensor in advance, the tensors `apply_weights` attached as soon as they are mapped.

ALIGNMENT = 64 * 1024
SMALL_ALIGNMENT = 64
INLINE_BYTES = 256
WRITE_CHUNK = 64 * 1024**2
GATHER_BYTES = 16 * 1024**2
IN_FLIGHT_BYTES = 256 * 1024**2
WRITEBACK_LAG = 256 * 1024**2
DIRECT_BUFFER = 16 * 1024**2
DIRECT_BUFFERS = 4
DIRECT_ALIGNMENT = 4096  # of O_DIRECT writes: memory, file offset and length


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


_WRITE, _WAIT = 2, 1 | 2 | 4  # SYNC_FILE_RANGE_WRITE; WAIT_BEFORE | WRITE | WAIT_AFTER
_MADV_WILLNEED = 3


@functools.cache
def _libc() -> tuple[Any, Any] | None:
    """The C library's `sync_file_range` and `madvise` (Linux), None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sync_file_range, madvise = libc.sync_file_range, libc.madvise
    except (OSError, AttributeError):
        return None
    sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    sync_file_range.restype = ctypes.c_int
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return sync_file_range, madvise


def _read_ahead(address: int, nbytes: int) -> None:
    """Have the kernel read the pages of [address, address + nbytes) in the background, where
    they are a memory-mapped file not yet in memory (advice only: no error, no effect
    elsewhere)."""
    libc = _libc()
    if libc is None or nbytes < ALIGNMENT:
        return
    start = address - address % mmap.PAGESIZE
    libc[1](start, address + nbytes - start, _MADV_WILLNEED)


def _tensor_span(tensor: Any) -> tuple[int, int] | None:
    """(address, bytes) of a weight held by a contiguous CPU torch tensor."""
    raw = tensor.raw if isinstance(tensor, TorchTensor) else None
    if not isinstance(raw, torch.Tensor) or not has_data(raw) or raw.device.type != "cpu" or \
            not raw.is_contiguous():
        return None
    try:
        return raw.data_ptr(), raw.numel() * raw.element_size()
    except RuntimeError:  # a tensor subclass without storage
        return None


def _view_address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data if view.nbytes else 0


class _Writer:
    """Sequential writes of one file from a thread, fed pieces bounded in bytes in flight.

    The CRC-32 of each piece is computed by the caller in `put` while the thread writes the
    pieces before it; the thread has the kernel write each chunk to disk as soon as it is
    written (see Buffered writes above)."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        self._queue: deque[tuple[memoryview, Any] | None] = deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self.position = 0
        self.crc = 0
        self._written = self._started = self._waited = 0
        libc = _libc()
        self._sync_file_range = libc[0] if libc is not None else None
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
                            self._written += written
                        self._write_back()
            except BaseException as e:  # noqa: BLE001 - re-raised in the producer
                self._error = e
            with self._cond:
                self._queue.popleft()
                self._pending -= view.nbytes
                self._cond.notify_all()

    def _write_back(self) -> None:
        """Start writing the chunks written since the last call to disk, and wait for those
        more than WRITEBACK_LAG bytes behind."""
        if self._sync_file_range is None or self._written - self._started < WRITE_CHUNK:
            return
        fd = self._fh.fileno()
        self._range(fd, self._started, self._written - self._started, _WRITE)
        self._started = self._written
        if self._sync_file_range is not None and self._started - self._waited > WRITEBACK_LAG:
            end = self._started - WRITEBACK_LAG
            self._range(fd, self._waited, end - self._waited, _WAIT)
            self._waited = end

    def _range(self, fd: int, offset: int, nbytes: int, flags: int) -> None:
        if self._sync_file_range is None or self._sync_file_range(fd, offset, nbytes, flags) == 0:
            return
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ESPIPE, errno.ENOSYS, errno.EOPNOTSUPP):
            self._sync_file_range = None  # not for this file: the fsync at the end does it all
            return
        # An error of the writeback itself (EIO, ENOSPC): reported once, here, not again by
        # the fsync at the end.
        raise OSError(code, os.strerror(code), self._fh.name)

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


class _DirectWriter:
    """Writes one file with O_DIRECT from a thread, through DIRECT_BUFFERS aligned buffers.

    `put` copies each piece into the current buffer and computes its CRC-32 there; the thread
    writes full buffers, in order, while the caller fills the next one."""

    def __init__(self, path: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags | os.O_DIRECT, 0o666)  # OSError: not supported here
        self.name = path
        self._free = [mmap.mmap(-1, DIRECT_BUFFER) for _ in range(DIRECT_BUFFERS)]
        self._full: deque[tuple[mmap.mmap, int] | None] = deque()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._buffer: mmap.mmap | None = None
        self._fill = 0
        self._direct = True
        self.position = 0
        self.crc = 0
        self._thread = threading.Thread(target=self._run, name="onnxport-writer", daemon=True)
        self._thread.start()

    def put(self, view: memoryview, keep: Any = None) -> None:
        """Copy `view` into the buffers (its CRC-32 computed as it is copied)."""
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        while view.nbytes:
            if self._buffer is None:
                self._buffer = self._take()
            n = min(DIRECT_BUFFER - self._fill, view.nbytes)
            target = memoryview(self._buffer)[self._fill:self._fill + n]
            target[:] = view[:n]
            self.crc = zlib.crc32(target, self.crc)
            target.release()
            self._fill += n
            self.position += n
            view = view[n:]
            if self._fill == DIRECT_BUFFER:
                self._hand((self._buffer, self._fill))

    def _take(self) -> mmap.mmap:
        with self._cond:
            while not self._free and self._error is None:
                self._cond.wait()
            self._raise()
            return self._free.pop()

    def _hand(self, item: tuple[mmap.mmap, int] | None) -> None:
        with self._cond:
            self._full.append(item)
            self._cond.notify_all()
        self._buffer, self._fill = None, 0

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        offset = 0
        while True:
            with self._cond:
                while not self._full:
                    self._cond.wait()
                item = self._full.popleft()
            if item is None:
                return
            buffer, n = item
            try:
                if self._error is None:
                    offset = self._write(memoryview(buffer)[:n], offset)
            except BaseException as e:  # noqa: BLE001 - re-raised in the producer
                self._error = e
            with self._cond:
                self._free.append(buffer)
                self._cond.notify_all()

    def _write(self, view: memoryview, offset: int) -> int:
        try:
            while view.nbytes:
                if self._direct and view.nbytes % DIRECT_ALIGNMENT:  # the file's last block
                    aligned = view.nbytes - view.nbytes % DIRECT_ALIGNMENT
                    if aligned:
                        offset = self._write(view[:aligned], offset)
                        view = view[aligned:]
                    self._buffered()
                try:
                    written = os.pwrite(self._fd, view, offset)
                except OSError as e:
                    if e.errno != errno.EINVAL or not self._direct:
                        raise
                    self._buffered()  # alignment this file system does not take
                    continue
                offset += written
                view = view[written:]
            return offset
        finally:
            view.release()

    def _buffered(self) -> None:
        import fcntl

        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self._direct = False

    def close(self) -> None:
        """Write the last buffer, wait for the thread, flush to disk; raises its error."""
        try:
            if self._buffer is not None and self._error is None:
                self._hand((self._buffer, self._fill))
            self._hand(None)
            self._thread.join()
            self._raise()
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._free.clear()


def _open_writer(path: str) -> _DirectWriter | _Writer:
    """A writer for `path`: direct I/O where the file system takes it, else buffered."""
    if _DIRECT_IO and hasattr(os, "O_DIRECT"):
        try:
            return _DirectWriter(path)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return _Writer(path)


_DIRECT_IO = True


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
    writer: _DirectWriter | _Writer | None = None
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

    spans = [_tensor_span(t) for _, t in tensors]
    try:
        for i, ((name, tensor), nbytes, (index, offset)) in enumerate(zip(tensors, sizes, layout)):
            for span in spans[i:i + 2] if i == 0 else spans[i + 1:i + 2]:
                if span is not None:
                    _read_ahead(*span)
            if index != shard:
                finish()
                shard = index
                writer = _open_writer(os.path.join(directory, names[shard]))
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
            if spans[i] is None and nbytes >= GATHER_BYTES:
                _read_ahead(_view_address(view), view.nbytes)
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
