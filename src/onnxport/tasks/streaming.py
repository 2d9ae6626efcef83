"""The streamed route of `export_checkpoint`: checkpoints larger than memory.

The model is built without weights (`onnxport.enable_fake_mode()`: parameters carry dtype and
shape, no data), each graph of the task is exported from it, and `ONNXProgram.apply_weights`
attaches the checkpoint's tensors by name, reading only the files' headers; `save` then
streams each tensor from the memory-mapped checkpoint into `<graph>.onnx.data`, converting
its dtype on the way. The weights are never all in memory (docs/cli.md, "Large checkpoints").

Invariants:
* **Same names as the in-memory route.** The graphs come from the same `GraphSpec`s; the
  checkpoint's names are matched to the model's as transformers' `from_pretrained` does
  (its checkpoint conversion mapping's renamings, then the base-model prefix: a `LlamaModel`
  checkpoint exported as text-generation, whose `LlamaForCausalLM` names start with
  `model.`). Tied weights are read under the name the
  checkpoint holds; non-persistent buffers (rotary `inv_freq`) are computed on the CPU.
* **Nothing claimed that was not checked.** The route compares ONNX Runtime with eager
  PyTorch only when the eager model and an ONNX Runtime session fit in the memory available
  (`eager_validation_fits`); otherwise it checks the external data's CRC-32s and that ONNX
  Runtime creates a session for each file (optimizations off, so the weights stay
  memory-mapped), and says that this is all it checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from onnxport.tasks.errors import WeightsError
from onnxport.weights import Checkpoint, TensorInfo, open_checkpoint

__all__ = ["Check", "RoutePlan", "available_memory", "build_without_weights", "check_saved",
           "eager_validation_bytes", "open_weights", "plan_route"]

# The in-memory route is taken while its estimated peak stays below this share of the memory
# available when the export starts (the rest is headroom for the process and the system).
MEMORY_FRACTION = 0.8
# The Python, torch and transformers baseline plus an export's own memory (docs/benchmarks.md:
# ~460 MB for a 7B-shaped fake export).
BASELINE_BYTES = 1024**3
# ONNX Runtime's CPU session memory per byte of weights: ~1x in float32; 2.7-2.9x for float16
# and bfloat16 (no half Gemm/MatMul kernel: float32 copies of the weights are folded at load;
# measured in docs/benchmarks.md, "Why the 7B float16 model does not run in ORT").
ORT_BYTES_PER_WEIGHT_BYTE = {torch.float16: 3.0, torch.bfloat16: 3.0}
# Loading the eager model costs its weights plus ~6% (measured: 4665 MB for 4.40 GB).
EAGER_OVERHEAD = 1.1


@dataclasses.dataclass(frozen=True)
class RoutePlan:
    """Which route an export takes and why.

    Attributes:
        stream: True: build without weights and stream them; False: load the model.
        weight_bytes: The checkpoint's tensors at the export dtype.
        available_bytes: The memory available when the export started (MemAvailable).
        reason: One line for the progress output.
    """

    stream: bool
    weight_bytes: int
    available_bytes: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Check:
    """One check of the streamed route's files (what it checked, whether it passed)."""

    file: str
    what: str
    ok: bool
    detail: str = ""


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (Linux MemAvailable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: never choose the streamed route on our own


def _human(n: float) -> str:
    return f"{n / 1024**3:.1f} GB" if n >= 1024**3 else f"{n / 1024**2:.0f} MB"


def eager_validation_bytes(weight_bytes: int, dtype: torch.dtype) -> int:
    """Estimated peak of comparing ONNX Runtime with eager PyTorch: the eager model plus an
    ONNX Runtime session of the same weights, plus the baseline."""
    ort = ORT_BYTES_PER_WEIGHT_BYTE.get(dtype, 1.0)
    return int(weight_bytes * (EAGER_OVERHEAD + ort)) + BASELINE_BYTES


def plan_route(weight_bytes: int, dtype: torch.dtype, *, stream: bool | None, validate: bool,
               available: int | None = None) -> RoutePlan:
    """The route for a checkpoint of `weight_bytes` exported in `dtype`.

    `stream` True or False forces a route; None chooses: the in-memory route needs the eager
    model (weights x 1.1) and, to validate, an ONNX Runtime session beside it (weights x 1 in
    float32, x 3 in float16/bfloat16), plus 1 GB; the streamed route is taken when that
    exceeds 80% of the memory available now.
    """
    available = available_memory() if available is None else available
    if stream is not None:
        why = "--stream-weights" if stream else "--no-stream-weights"
        return RoutePlan(stream, weight_bytes, available, f"given with {why}")
    need = (eager_validation_bytes(weight_bytes, dtype) if validate
            else int(weight_bytes * EAGER_OVERHEAD) + BASELINE_BYTES)
    what = "loading and validating" if validate else "loading"
    if need > MEMORY_FRACTION * available:
        return RoutePlan(True, weight_bytes, available,
                         f"{what} the model in memory would need ~{_human(need)}, more than "
                         f"{MEMORY_FRACTION:.0%} of the {_human(available)} available")
    return RoutePlan(False, weight_bytes, available,
                     f"{what} the model needs ~{_human(need)} of the {_human(available)} "
                     f"available")


# -- the checkpoint ------------------------------------------------------------------------------

def open_weights(model_dir: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint folder's tensors as an `onnxport.weights.Checkpoint` (headers only).

    safetensors files (single or sharded) are memory-mapped; `.bin` files are loaded with
    `torch.load(weights_only=True, mmap=True)`, which maps them too.

    Raises:
        WeightsError: the files cannot be opened this way (a `.bin` file in torch's legacy,
            non-zip format cannot be memory-mapped).
    """
    try:
        return open_checkpoint(os.fspath(model_dir))
    except RuntimeError as e:
        if "mmap" in str(e) or "zipfile" in str(e):
            raise WeightsError(
                f"the weights of {str(model_dir)!r} are a torch file in the legacy (non-zip) "
                f"format, which cannot be memory-mapped: re-save the checkpoint with "
                f"save_pretrained (safetensors), or export it without --stream-weights") from e
        raise WeightsError(f"cannot open the weights of {str(model_dir)!r} for streaming: "
                           f"{e}") from e
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot open the weights of {str(model_dir)!r} for streaming: "
                           f"{e}") from e


def checkpoint_bytes(checkpoint: Checkpoint, dtype: torch.dtype | None) -> int:
    """The checkpoint's tensors' bytes once floating-point ones are converted to `dtype`."""
    total = 0
    for key in checkpoint.keys():
        info = checkpoint.info(key)
        numel = 1
        for d in info.shape:
            numel *= int(d)
        target = dtype if dtype is not None and info.dtype.is_floating_point else info.dtype
        total += numel * target.itemsize
    return total


def checkpoint_dtype(checkpoint: Checkpoint) -> torch.dtype:
    """The floating-point dtype holding most of the checkpoint's bytes (float32 if none)."""
    sizes: dict[torch.dtype, int] = {}
    for key in checkpoint.keys():
        info = checkpoint.info(key)
        if info.dtype.is_floating_point:
            numel = 1
            for d in info.shape:
                numel *= int(d)
            sizes[info.dtype] = sizes.get(info.dtype, 0) + numel * info.dtype.itemsize
    return max(sizes, key=lambda d: sizes[d]) if sizes else torch.float32


class RenamedCheckpoint(Checkpoint):
    """A checkpoint seen under the model's names (`rename`: model name -> checkpoint key;
    other keys keep their names)."""

    def __init__(self, inner: Checkpoint, rename: dict[str, str]) -> None:
        self._inner = inner
        self._to_key = rename
        renamed = set(rename.values())
        self._names = [*rename, *(k for k in inner.keys() if k not in renamed)]
        self.description = inner.description

    def keys(self) -> list[str]:
        return list(self._names)

    def info(self, name: str) -> TensorInfo:
        return self._inner.info(self._to_key.get(name, name))

    def load(self, name: str) -> torch.Tensor:
        return self._inner.load(self._to_key.get(name, name))

    def close(self) -> None:
        self._inner.close()

    def __contains__(self, name: object) -> bool:
        return name in self._to_key or (isinstance(name, str) and name in self._inner)


def match_names(checkpoint: Checkpoint, model: torch.nn.Module) -> Checkpoint:
    """`checkpoint` under the model's names, renamed as transformers' `from_pretrained` does:
    its checkpoint conversion mapping (key renamings such as ViT's `encoder.layer.N.attention.
    attention.query` -> `layers.N.attention.q_proj`), then the model's `base_model_prefix`
    added or stripped.

    Raises:
        WeightsError: transformers would transform some tensors (merge, split, permute) as it
            loads them; the streamed route writes tensors as stored.
    """
    names = set(model.state_dict()) | {n for n, _ in model.named_buffers()}
    rename: dict[str, str] = {}
    converted: list[str] = []
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import (
            WeightConverter,
            WeightRenaming,
            rename_source_key,
        )

        transforms = get_model_conversion_mapping(model)
        renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        converters = [t for t in transforms if isinstance(t, WeightConverter)]
    except (ImportError, AttributeError, TypeError):  # an older transformers: prefix only
        renamings, converters, rename_source_key = [], [], None
    prefix = getattr(model, "base_model_prefix", "") or ""
    meta = dict.fromkeys(names, True)
    for key in checkpoint.keys():
        if key in names:
            continue
        if rename_source_key is not None:
            new, converter = rename_source_key(key, renamings, converters,
                                               base_model_prefix=prefix or None,
                                               meta_state_dict=meta)
            if converter is not None:
                converted.append(key)
                continue
        elif prefix and f"{prefix}.{key}" in names:
            new = f"{prefix}.{key}"
        elif prefix and key.startswith(f"{prefix}.") and key[len(prefix) + 1:] in names:
            new = key[len(prefix) + 1:]
        else:
            continue
        if new != key and new in names:
            rename.setdefault(new, key)
    if converted:
        raise WeightsError(
            f"transformers transforms {len(converted)} tensors of {checkpoint.description} "
            f"as it loads them ({', '.join(converted[:5])}{', ...' if len(converted) > 5 else ''}"
            f"), which the streamed route cannot do tensor by tensor: export it without "
            f"--stream-weights")
    return RenamedCheckpoint(checkpoint, rename) if rename else checkpoint


# -- the model without weights --------------------------------------------------------------------

def build_without_weights(config: Any, auto_class: str, *, dtype: torch.dtype,
                          cast: bool, trust_remote_code: bool = False) -> Any:
    """The task's transformers model with FakeTensor parameters (shapes and dtypes, no data)
    and real buffers.

    Buffers are computed at `__init__` as usual (they are small: rotary `inv_freq`,
    `position_ids`), so those checkpoints never hold have their values; parameters are created
    on the meta device (no memory; weight initialization skipped, as transformers'
    `no_init_weights` does) and then replaced by FakeTensors, which export alongside real
    inputs. `dtype` is the dtype transformers builds the model in; `cast` also casts every
    floating-point parameter and buffer to it, as the in-memory route does for `--dtype`.

    Raises:
        CheckpointError: transformers cannot build the model from its config.
    """
    import transformers
    from transformers.initialization import no_init_weights

    from onnxport.fake import enable_fake_mode
    from onnxport.tasks.errors import CheckpointError

    cls = getattr(transformers, auto_class)
    try:
        with warnings.catch_warnings(), no_init_weights(), _parameters_on_meta():
            warnings.simplefilter("ignore")
            model = cls.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
        # no_init_weights also skips the tying that init_weights does (lm_head.weight =
        # embed_tokens.weight); tying only points parameters at each other.
        with _parameters_on_meta():
            model.tie_weights()
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, NotImplementedError) as e:
        raise CheckpointError(f"cannot build {auto_class} for model_type "
                              f"{config.model_type!r} without weights: {e}") from e
    if cast:
        _replace_tensors(model, lambda t: t.to(dtype) if t.is_floating_point() else t)
    with enable_fake_mode():
        _replace_tensors(model, lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu")
                         if t.device.type == "meta" else t)
    return model.eval()


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Parameters registered while active are moved to the meta device (buffers are not)."""
    original = torch.nn.Module.register_parameter

    def register_parameter(self: torch.nn.Module, name: str,
                           param: torch.nn.Parameter | None) -> None:
        original(self, name, param)
        if param is not None and param.device.type != "meta":
            # torch.empty's pages were never touched: nothing was allocated for real.
            self._parameters[name] = type(param)(param.to("meta"),
                                                 requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


def _replace_tensors(model: torch.nn.Module,
                     make: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Each parameter and buffer `t` of `model` replaced by `make(t)` where that is another
    tensor (parameters stay parameters), a tensor shared by several modules (tied weights) by
    one new tensor. `Module.to` cannot do this for FakeTensors: it swaps them in place, which
    fails for a tensor two modules share."""
    done: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, tensor in table.items():
                if tensor is None:
                    continue
                if id(tensor) not in done:
                    new = make(tensor.detach())
                    if new.dtype == tensor.dtype and new.device == tensor.device and \
                            type(new) is type(tensor.detach()):
                        new = tensor
                    elif isinstance(tensor, torch.nn.Parameter):
                        new = torch.nn.Parameter(new, requires_grad=tensor.requires_grad)
                    done[id(tensor)] = new
                table[name] = done[id(tensor)]  # type: ignore[assignment]


def apply_checkpoint(program: Any, checkpoint: Checkpoint, model: torch.nn.Module) -> Any:
    """`program.apply_weights` from the checkpoint, each tensor converted to the dtype the
    model declares for it as it is streamed.

    Raises:
        WeightsError: the checkpoint's names, shapes or dtypes do not fit the model (every
            problem listed).
    """
    from onnxport.weights import WeightsMismatchError

    try:
        return program.apply_weights(match_names(checkpoint, model), module=model,
                                     dtype="auto")
    except WeightsMismatchError as e:
        raise WeightsError(
            f"{e}\n  fix: the in-memory route (--no-stream-weights) loads the model with "
            f"transformers, which also renames legacy checkpoint keys") from e


# -- checks of the files written -------------------------------------------------------------------

def check_saved(path: Path) -> list[Check]:
    """The external data's CRC-32s against those `save` recorded, and an ONNX Runtime session
    created for the file (optimizations off: the data stays memory-mapped, nothing is run)."""
    import onnxruntime

    from onnxport.weights import verify_external_data

    checks = []
    data = sorted(p.name for p in path.parent.glob(path.name + "*.data"))
    if data:
        problems = verify_external_data(path)
        checks.append(Check(path.name, f"external data CRC-32 ({', '.join(data)})",
                            not problems, "; ".join(problems)))
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises plain RuntimeErrors/Fail; reported
        checks.append(Check(path.name, "ONNX Runtime session created", False,
                            f"{type(e).__name__}: {e}"[:300]))
    else:
        checks.append(Check(path.name, "ONNX Runtime session created (optimizations off)",
                            True))
    return checks
