"""Checkpoints for `ONNXProgram.apply_weights`: read lazily, one tensor at a time.

A checkpoint is a state_dict (a mapping of names to tensors), one safetensors file, a folder
of sharded safetensors with `model.safetensors.index.json` (or one `model.safetensors`), or a
`torch.save` file (`.bin`, `.pt`, `.pth`, read with `torch.load(weights_only=True, mmap=True)`).
Only the files' headers are read when weights are applied: each weight becomes a
`CheckpointTensor` that knows its file, key, dtype and shape, and loads its data only when
`ONNXProgram.save` streams it into the external-data file (or when the model is run).

* **Memory.** safetensors maps its files into memory and hands out tensors that are views of
  the mapping (no copy). Pages read through a mapping stay resident (and count in the
  process's RSS) until the mapping is closed, so a reader closes and reopens its file after
  `REOPEN_BYTES` have been read through it: a save holds at most one tensor plus a few
  hundred MB of the checkpoint in memory, whatever the checkpoint's size.
* **dtype.** A conversion (`dtype=torch.float16`) is applied per tensor as it is loaded.
* **Names.** `match_weights` pairs the checkpoint's names with the model's weights and lists
  what is left on each side (see `WeightsMismatchError`).
* **Buffers checkpoints do not hold.** A non-persistent buffer (`register_buffer(...,
  persistent=False)`, e.g. a rotary embedding's `inv_freq`) is computed at `__init__` and
  never saved. When the model was built in fake mode or on the meta device, such a buffer
  has no data; `materialize_buffers` recomputes it on the CPU by constructing a new instance
  of the submodule that owns it, with the constructor arguments read back from the
  instance's attributes of the same names (`config` for transformers modules).
* **Integrity.** `verify_external_data` checks the CRC-32 of each external-data file against
  the one `ONNXProgram.save` recorded in the model's metadata.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport.errors import OnnxExporterError

__all__ = [
    "Checkpoint",
    "CheckpointTensor",
    "WeightsMismatchError",
    "WeightsReport",
    "materialize_buffers",
    "open_checkpoint",
    "verify_external_data",
]

SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_INDEX = "pytorch_model.bin.index.json"
# Bytes read through one safetensors mapping before it is closed and reopened (see above).
REOPEN_BYTES = 256 * 1024**2
# A submodule rebuilt to compute its non-persistent buffers may hold at most this many
# parameter elements (its weights are allocated too; rotary embeddings have none).
MAX_REBUILD_ELEMENTS = 16 * 1024**2

_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2, "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}


class WeightsMismatchError(OnnxExporterError, KeyError):
    """The checkpoint does not fit the model: names, shapes or dtypes.

    Attributes:
        missing: weights of the model the checkpoint lacks (and that have no data otherwise).
        unused: checkpoint tensors the model does not use (listed to help spot renamings;
            an error on their own only with `strict=True`).
        mismatched: one message per weight whose shape or dtype differs.
    """

    def __init__(self, message: str, *, missing: list[str] | None = None,
                 unused: list[str] | None = None, mismatched: list[str] | None = None) -> None:
        super().__init__(message)
        self.missing = missing or []
        self.unused = unused or []
        self.mismatched = mismatched or []

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclasses.dataclass
class WeightsReport:
    """What `ONNXProgram.apply_weights` did.

    Attributes:
        applied: model weights given data from the checkpoint.
        aliased: model weight -> the checkpoint name it was read from (tied weights).
        materialized: non-persistent buffers computed on the CPU (not in checkpoints).
        kept: model weights not in the checkpoint that keep the data they had.
        unused: checkpoint tensors the model does not use.
        converted: weights converted to another dtype as they are read.
    """

    applied: list[str] = dataclasses.field(default_factory=list)
    aliased: dict[str, str] = dataclasses.field(default_factory=dict)
    materialized: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)
    unused: list[str] = dataclasses.field(default_factory=list)
    converted: list[str] = dataclasses.field(default_factory=list)


# -- checkpoints ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A checkpoint tensor's header: what it holds without reading it."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    where: str  # file (or "state_dict") for messages


class Checkpoint:
    """A set of named tensors whose headers are known and whose data is read on demand."""

    description = "checkpoint"

    def keys(self) -> list[str]:
        raise NotImplementedError

    def info(self, name: str) -> TensorInfo:
        raise NotImplementedError

    def load(self, name: str) -> torch.Tensor:
        """The tensor `name` on the CPU; may be a view of a memory-mapped file."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop cached file mappings (they are reopened when needed)."""

    def __contains__(self, name: object) -> bool:
        return name in set(self.keys())


class StateDictCheckpoint(Checkpoint):
    """A mapping of names to torch tensors already in memory."""

    description = "state_dict"

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._tensors = dict(tensors)

    def keys(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        t = self._tensors[name]
        return TensorInfo(t.dtype, tuple(t.shape), "state_dict")

    def load(self, name: str) -> torch.Tensor:
        return self._tensors[name].detach()


class SafetensorsCheckpoint(Checkpoint):
    """One or more safetensors files, read through `safetensors.safe_open` (memory-mapped)."""

    def __init__(self, files: Mapping[str, str], description: str) -> None:
        """`files`: tensor name -> the file that holds it."""
        from safetensors import safe_open

        self.description = description
        self._file_of = dict(files)
        self._infos: dict[str, TensorInfo] = {}
        for path in dict.fromkeys(self._file_of.values()):
            with safe_open(path, framework="pt") as fh:
                for key in fh.keys():
                    if self._file_of.get(key) != path:
                        continue
                    piece = fh.get_slice(key)
                    dtype = _SAFETENSORS_DTYPES.get(piece.get_dtype())
                    if dtype is None:
                        raise OnnxExporterError(
                            f"{path}: tensor '{key}' has dtype {piece.get_dtype()}, which "
                            "onnxport cannot read")
                    self._infos[key] = TensorInfo(dtype, tuple(piece.get_shape()), path)
        absent = [k for k in self._file_of if k not in self._infos]
        if absent:
            raise OnnxExporterError(
                f"{description}: the index names {len(absent)} tensors its files do not hold "
                f"({_shown(absent)})")
        self._open_path: str | None = None
        self._handle: Any = None
        self._read_since_open = 0

    def keys(self) -> list[str]:
        return list(self._infos)

    def info(self, name: str) -> TensorInfo:
        return self._infos[name]

    def load(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        path = self._file_of[name]
        if self._handle is None or self._open_path != path or self._read_since_open >= REOPEN_BYTES:
            self.close()
            self._handle = safe_open(path, framework="pt", device="cpu")
            self._open_path = path
        tensor = self._handle.get_tensor(name)
        self._read_since_open += tensor.numel() * tensor.element_size()
        return tensor

    def close(self) -> None:
        # Dropping the handle unmaps the file once no tensor viewing it is alive.
        self._handle = None
        self._open_path = None
        self._read_since_open = 0

    def __contains__(self, name: object) -> bool:
        return name in self._infos


class TorchFileCheckpoint(Checkpoint):
    """`torch.save` files, loaded with `torch.load(weights_only=True, mmap=True)`."""

    def __init__(self, files: Iterable[str], description: str) -> None:
        self.description = description
        self._tensors: dict[str, torch.Tensor] = {}
        self._where: dict[str, str] = {}
        for path in files:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            if not isinstance(loaded, Mapping):
                raise OnnxExporterError(f"{path} holds a {type(loaded).__name__}, not a state_dict")
            for key, value in loaded.items():
                if isinstance(value, torch.Tensor):
                    self._tensors[key] = value
                    self._where[key] = path

    def keys(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        t = self._tensors[name]
        return TensorInfo(t.dtype, tuple(t.shape), self._where[name])

    def load(self, name: str) -> torch.Tensor:
        return self._tensors[name]


def open_checkpoint(source: Any) -> Checkpoint:
    """The checkpoint `source` names: a state_dict (or nn.Module), a safetensors or
    torch.save file, or a folder holding an index and its shards or one such file."""
    if isinstance(source, Checkpoint):
        return source
    if isinstance(source, torch.nn.Module):
        return StateDictCheckpoint(module_tensors(source))
    if isinstance(source, Mapping):
        return StateDictCheckpoint(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"apply_weights takes a state_dict, an nn.Module or a checkpoint path, "
                        f"not {type(source).__name__}")
    path = os.fspath(source)
    if os.path.isdir(path):
        for index_name in (SAFETENSORS_INDEX, TORCH_INDEX):
            index = os.path.join(path, index_name)
            if os.path.isfile(index):
                return _from_index(index)
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if len(files) == 1:
            return SafetensorsCheckpoint(_safetensors_keys(os.path.join(path, files[0])),
                                         os.path.join(path, files[0]))
        if files:
            # Shards without an index: every file's tensors.
            mapping: dict[str, str] = {}
            for name in files:
                mapping.update(_safetensors_keys(os.path.join(path, name)))
            return SafetensorsCheckpoint(mapping, path)
        for name in ("pytorch_model.bin", "model.pt", "model.pth"):
            if os.path.isfile(os.path.join(path, name)):
                return TorchFileCheckpoint([os.path.join(path, name)], os.path.join(path, name))
        raise FileNotFoundError(f"{path} holds no {SAFETENSORS_INDEX}, *.safetensors file or "
                                "pytorch_model.bin")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.endswith(".json"):
        return _from_index(path)
    if path.endswith(".safetensors"):
        return SafetensorsCheckpoint(_safetensors_keys(path), path)
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic[:2] == b"PK" or path.endswith((".bin", ".pt", ".pth")):
        return TorchFileCheckpoint([path], path)
    return SafetensorsCheckpoint(_safetensors_keys(path), path)


def _safetensors_keys(path: str) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as fh:
        return {key: path for key in fh.keys()}


def _from_index(index: str) -> Checkpoint:
    folder = os.path.dirname(os.path.abspath(index))
    with open(index, encoding="utf-8") as fh:
        weight_map = json.load(fh).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise OnnxExporterError(f"{index} has no weight_map")
    from onnxport._external import check_external_location

    files = {}
    for shard in set(weight_map.values()):
        # A shard must be a file inside the index's folder, as external data.
        files[shard] = check_external_location(shard, folder, name=f"{index}: shard")
    mapping = {key: files[shard] for key, shard in weight_map.items()}
    if index.endswith(TORCH_INDEX) or any(p.endswith(".bin") for p in files.values()):
        return TorchFileCheckpoint(sorted(set(files.values())), index)
    return SafetensorsCheckpoint(mapping, index)


def module_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A real module's state_dict plus its non-persistent buffers (which state_dict omits)."""
    tensors = dict(module.state_dict())
    for name, buffer in module.named_buffers():
        tensors.setdefault(name, buffer)
    return {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor) and has_data(v)}


def has_data(tensor: Any) -> bool:
    """Whether a torch tensor holds real values (not a FakeTensor or a meta tensor)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, torch.Tensor) and not isinstance(tensor, FakeTensor) and \
        tensor.device.type != "meta"


# -- lazy tensors ----------------------------------------------------------------------------

class CheckpointTensor(ir.LazyTensor):
    """A model weight read from a checkpoint only when its data is needed.

    `load()` returns the tensor as the model stores it (dtype converted, transposed for a
    pretransposed weight, complex as real pairs); it may be a view of a memory-mapped file.
    """

    def __init__(self, checkpoint: Checkpoint, key: str, *, name: str, dtype: ir.DataType,
                 shape: Iterable[int], convert_to: torch.dtype | None = None,
                 transpose: bool = False) -> None:
        self.checkpoint = checkpoint
        self.key = key
        self.convert_to = convert_to
        self.transpose = transpose
        super().__init__(self._as_ir, dtype=dtype, shape=ir.Shape(list(shape)), name=name)

    def load(self) -> torch.Tensor:
        tensor = self.checkpoint.load(self.key)
        if tensor.is_complex():
            tensor = torch.view_as_real(tensor.resolve_conj())
        if self.convert_to is not None and tensor.dtype != self.convert_to:
            tensor = tensor.to(self.convert_to)
        if self.transpose:
            tensor = tensor.t()
        return tensor

    def _as_ir(self) -> ir.TensorProtocol:
        return TorchTensor(self.load().contiguous(), name=self.name)

    def __repr__(self) -> str:
        return f"CheckpointTensor({self.checkpoint.description}[{self.key!r}], {self.dtype}, {self.shape})"


def stream_tensor(tensor: ir.TensorProtocol) -> tuple[memoryview, Any] | None:
    """The bytes of `tensor` (little-endian, C order) as a memoryview, without copying tensor
    memory where it is already contiguous, and the object that keeps that memory alive; None
    for tensors whose bytes only `tobytes()` can give (strings, 4-bit types)."""
    if isinstance(tensor, CheckpointTensor):
        t = tensor.load()
    elif isinstance(tensor, TorchTensor) and isinstance(tensor.raw, torch.Tensor):
        t = tensor.raw.detach()
    else:
        return None
    if not has_data(t) or t.dtype.itemsize == 0 or t.is_complex():
        return None
    t = t.cpu().contiguous()
    if t.numel() == 0:
        return memoryview(b""), t
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()), t


# -- matching a checkpoint to the model ------------------------------------------------------

def aliases(module: torch.nn.Module) -> dict[str, list[str]]:
    """Every name of a shared (tied) parameter or buffer -> all names of the same tensor."""
    groups: dict[int, list[str]] = {}
    for name, tensor in (*module.named_parameters(remove_duplicate=False),
                         *module.named_buffers(remove_duplicate=False)):
        groups.setdefault(id(tensor), []).append(name)
    return {name: names for names in groups.values() if len(names) > 1 for name in names}


def non_persistent_buffers(module: torch.nn.Module) -> set[str]:
    """The full names of `module`'s non-persistent buffers."""
    names = set()
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for buffer in getattr(sub, "_non_persistent_buffers_set", ()):
            names.add(f"{prefix}.{buffer}" if prefix else buffer)
    return names


def materialize_buffers(module: torch.nn.Module, names: Iterable[str]) -> dict[str, torch.Tensor]:
    """Compute non-persistent buffers of a fake/meta `module` on the CPU.

    Each owning submodule is constructed again, on the CPU and outside any fake mode, with
    the arguments its `__init__` takes read from the instance's attributes of the same names
    (parameters with defaults may be absent; a `device` parameter gets "cpu"). Submodules
    with more than `MAX_REBUILD_ELEMENTS` parameter elements are not rebuilt.

    Returns the buffers computed; names that could not be computed are left out (the reason
    is in the error `apply_weights` raises).
    """
    out: dict[str, torch.Tensor] = {}
    rebuilt: dict[str, torch.nn.Module | None] = {}
    for name in names:
        owner_path, _, buffer = name.rpartition(".")
        if owner_path not in rebuilt:
            rebuilt[owner_path] = _rebuild(module, owner_path)
        new = rebuilt[owner_path]
        if new is None:
            continue
        tensor = new._buffers.get(buffer)
        if tensor is not None and has_data(tensor):
            out[name] = tensor.detach()
    return out


def why_not_rebuilt(module: torch.nn.Module, owner_path: str) -> str:
    try:
        owner = module.get_submodule(owner_path)
    except AttributeError:
        return f"the module has no submodule '{owner_path}'"
    try:
        _constructor_args(owner)
    except LookupError as e:
        return str(e)
    if _parameter_elements(owner) > MAX_REBUILD_ELEMENTS:
        return f"{type(owner).__name__} holds too many weights to be rebuilt on the CPU"
    return f"constructing {type(owner).__name__} again did not produce it"


def _parameter_elements(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _constructor_args(owner: torch.nn.Module) -> tuple[list[Any], dict[str, Any]]:
    cls = type(owner)
    signature = inspect.signature(cls.__init__)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, (pname, param) in enumerate(signature.parameters.items()):
        if i == 0 or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if pname == "device":
            value: Any = "cpu"
        elif pname in owner.__dict__ or (pname not in owner._parameters and
                                         pname not in owner._buffers and
                                         pname not in owner._modules and hasattr(owner, pname)):
            value = getattr(owner, pname)
            if isinstance(value, torch.Tensor) and not has_data(value):
                raise LookupError(f"{cls.__name__}.__init__ argument '{pname}' is a tensor "
                                  "without data")
        elif param.default is not param.empty:
            continue
        else:
            raise LookupError(f"{cls.__name__}.__init__ takes '{pname}', which the instance "
                              "does not keep as an attribute of that name")
        if param.kind == param.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[pname] = value
    return args, kwargs


def _rebuild(module: torch.nn.Module, owner_path: str) -> torch.nn.Module | None:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    try:
        owner = module.get_submodule(owner_path)
        args, kwargs = _constructor_args(owner)
    except (AttributeError, LookupError):
        return None
    if _parameter_elements(owner) > MAX_REBUILD_ELEMENTS:
        return None
    try:
        with unset_fake_temporarily(), torch.device("cpu"):
            return type(owner)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - any failure means "cannot rebuild"; reported by caller
        return None


@dataclasses.dataclass
class _Expected:
    dtype: ir.DataType | None
    shape: tuple[Any, ...] | None
    has_data: bool
    transposed: bool


def match_weights(
    expected: Mapping[str, _Expected], checkpoint: Checkpoint, *,
    dtype: torch.dtype | str | None, module: torch.nn.Module | None, strict: bool,
) -> tuple[dict[str, ir.TensorProtocol], WeightsReport]:
    """The tensor each model weight gets from `checkpoint`, checked, without reading data.

    Rules (see `ONNXProgram.apply_weights`):
    * a model weight the checkpoint lacks is read from a tied alias the checkpoint holds
      (with `module`), computed if it is a non-persistent buffer (with `module`), kept if it
      already has data, and otherwise an error;
    * checkpoint tensors the model does not use are reported (`WeightsReport.unused`), and
      are an error only with `strict=True`;
    * every shape and dtype must be the model's (after `dtype` conversion).
    Raises WeightsMismatchError listing every problem at once.
    """
    report = WeightsReport()
    names = set(checkpoint.keys())
    tied = aliases(module) if module is not None else {}
    sources: dict[str, str] = {}
    missing: list[str] = []
    for name, exp in expected.items():
        if name in names:
            sources[name] = name
            continue
        alias = next((a for a in tied.get(name, ()) if a in names), None)
        if alias is not None:
            sources[name] = alias
            report.aliased[name] = alias
        elif not exp.has_data:
            missing.append(name)
        else:
            report.kept.append(name)
    used = set(sources.values())
    # Tied copies of a used tensor (lm_head.weight beside embed_tokens.weight) are not unused.
    report.unused = [k for k in checkpoint.keys() if k not in used and k not in expected
                     and not any(a in used or a in expected for a in tied.get(k, ()))]

    materialized: dict[str, torch.Tensor] = {}
    if missing and module is not None:
        buffers = non_persistent_buffers(module)
        wanted = [n for n in missing if n in buffers]
        materialized = materialize_buffers(module, wanted)
        missing = [n for n in missing if n not in materialized]

    assignments: dict[str, ir.TensorProtocol] = {}
    mismatched: list[str] = []
    for name, key in sources.items():
        info = checkpoint.info(key)
        exp = expected[name]
        source_dtype = info.dtype
        shape = list(info.shape)
        if source_dtype.is_complex:
            source_dtype = source_dtype.to_real()
            shape.append(2)
        convert = _conversion(source_dtype, exp.dtype, dtype)
        final_dtype = convert or source_dtype
        if exp.transposed and len(shape) == 2:
            shape = shape[::-1]
        problem = _mismatch(name, tuple(shape), final_dtype, exp, dtype)
        if problem:
            mismatched.append(problem)
            continue
        if convert is not None:
            report.converted.append(name)
        report.applied.append(name)
        if isinstance(checkpoint, StateDictCheckpoint) and convert is None:
            # In memory already: the zero-copy adapter, as before.
            tensor = checkpoint.load(key)
            if tensor.is_complex():
                tensor = torch.view_as_real(tensor.resolve_conj())
            assignments[name] = TorchTensor(tensor.t() if exp.transposed and tensor.dim() == 2
                                            else tensor, name=name)
        else:
            assignments[name] = CheckpointTensor(
                checkpoint, key, name=name, dtype=_dtypes.to_ir(final_dtype), shape=shape,
                convert_to=convert, transpose=exp.transposed and len(shape) == 2)
    for name, tensor in materialized.items():
        exp = expected[name]
        target = _dtypes.to_torch(exp.dtype) if exp.dtype is not None else tensor.dtype
        tensor = tensor.to(target)
        problem = _mismatch(name, tuple(tensor.shape), target, exp, None)
        if problem:
            mismatched.append(f"{problem} (computed from the module)")
            continue
        assignments[name] = TorchTensor(tensor, name=name)
        report.materialized.append(name)

    if missing or mismatched or (strict and report.unused):
        raise WeightsMismatchError(
            _mismatch_message(checkpoint, missing, report.unused, mismatched, module, strict),
            missing=missing, unused=report.unused, mismatched=mismatched)
    return assignments, report


def _conversion(source: torch.dtype, model: ir.DataType | None,
                dtype: torch.dtype | str | None) -> torch.dtype | None:
    if not source.is_floating_point or dtype is None:
        return None
    if dtype == "auto":
        if model is None:
            return None
        target = _dtypes.to_torch(model)
        return target if target.is_floating_point and target != source else None
    assert isinstance(dtype, torch.dtype)
    return dtype if dtype != source else None


def _mismatch(name: str, shape: tuple[int, ...], dtype: torch.dtype, exp: _Expected,
              requested: torch.dtype | str | None) -> str | None:
    if exp.shape is not None and tuple(exp.shape) != shape:
        return f"'{name}' has shape {shape}, the model expects {tuple(exp.shape)}"
    if exp.dtype is not None and exp.dtype != _dtypes.to_ir(dtype):
        hint = ""
        if dtype.is_floating_point and requested is None:
            hint = " (pass dtype='auto' to convert each weight to the model's dtype as it is read)"
        elif requested is not None:
            hint = " (export the model in the dtype the weights are converted to)"
        return f"'{name}' has dtype {dtype}, the model expects {exp.dtype}{hint}"
    return None


def _shown(names: list[str], limit: int = 20) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _mismatch_message(checkpoint: Checkpoint, missing: list[str], unused: list[str],
                      mismatched: list[str], module: torch.nn.Module | None, strict: bool) -> str:
    lines = [f"apply_weights: the weights from {checkpoint.description} do not fit the model"]
    if missing:
        lines.append(f"  {len(missing)} weights of the model are not in the checkpoint: "
                     f"{_shown(missing)}")
        if module is None:
            lines.append("    (non-persistent buffers such as rotary embeddings' inv_freq are "
                         "never saved: pass module=<the model> to compute them, and to read "
                         "tied weights under their other names)")
        else:
            buffers = non_persistent_buffers(module)
            for name in missing:
                if name in buffers:
                    lines.append(f"    '{name}' is a non-persistent buffer that could not be "
                                 f"computed: {why_not_rebuilt(module, name.rpartition('.')[0])}")
    if unused:
        what = "" if strict else " (not an error on its own)"
        lines.append(f"  {len(unused)} checkpoint tensors are not used by the model{what}: "
                     f"{_shown(unused)}")
    if mismatched:
        lines.append(f"  {len(mismatched)} weights differ in shape or dtype:")
        lines.extend(f"    {m}" for m in mismatched[:20])
        if len(mismatched) > 20:
            lines.append(f"    ... ({len(mismatched) - 20} more)")
    if missing and unused:
        hint = _prefix_hint(missing, unused)
        if hint:
            lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def _prefix_hint(missing: list[str], unused: list[str]) -> str | None:
    for m in missing:
        for u in unused:
            if m.endswith("." + u):
                return (f"the model's names carry a prefix the checkpoint's lack ('{m}' vs "
                        f"'{u}'): rename the keys")
            if u.endswith("." + m):
                return (f"the checkpoint's names carry a prefix the model's lack ('{u}' vs "
                        f"'{m}'): rename the keys")
    return None


# -- integrity -------------------------------------------------------------------------------

def verify_external_data(model_path: str | os.PathLike[str]) -> list[str]:
    """Check the external-data files of a saved model against the CRC-32s `save` recorded.

    Returns the problems found (missing file, wrong size, wrong checksum); an empty list
    means every file matches. A model saved without checksums gives one problem saying so.
    """
    from onnxport._external import verify_checksums

    return verify_checksums(os.fspath(model_path))


def iter_chunks(view: memoryview, size: int) -> Iterator[memoryview]:
    for start in range(0, view.nbytes, size):
        yield view[start:start + size]


ProgressCallback = Callable[[int, int], None]
