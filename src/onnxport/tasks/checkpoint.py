"""Reading a local transformers checkpoint: config, weight files, the model for a task.

Weights are read with safetensors, or with `torch.load(weights_only=True)` for `.bin` files
(transformers' `from_pretrained(weights_only=True)`); never with an unrestricted unpickle.
Every weight file is opened before the model is built, so a truncated or foreign file is
reported by name instead of deep inside transformers.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from onnxport.tasks.errors import CheckpointError, WeightsError

__all__ = ["COPIED_FILES", "check_weights", "load_config", "load_model", "offline",
           "weight_files"]

# Files copied from the checkpoint into the output folder, as optimum does.
COPIED_FILES = (
    "config.json", "generation_config.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
    "tokenizer.model", "chat_template.jinja", "chat_template.json",
    "preprocessor_config.json", "processor_config.json", "feature_extractor_config.json",
    "image_processor_config.json", "normalizer.json",
)

_SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
_TORCH = ("pytorch_model.bin", "pytorch_model.bin.index.json")


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """The Hugging Face Hub off while transformers reads a checkpoint: nothing it builds
    (a backbone, a sub-config) may fetch a file; a missing one fails instead."""
    import huggingface_hub.constants as hub

    saved = hub.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    hub.HF_HUB_OFFLINE = True
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = saved[0]
        if saved[1] is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved[1]


def _hub_reference(raw: dict[str, Any]) -> str:
    """The hub model a config.json names for a part whose config it does not hold, or ''."""
    for part in (raw, *(v for v in raw.values() if isinstance(v, dict))):
        name = part.get("backbone")
        if (isinstance(name, str) and "/" in name and not part.get("backbone_config")
                and not part.get("use_timm_backbone")):
            return name
    return ""


def _no_pretrained_backbone(config: Any) -> None:
    # The checkpoint holds the backbone's weights: transformers needs not fetch them.
    for part in (config, getattr(config, "backbone_config", None)):
        if getattr(part, "use_pretrained_backbone", False):
            part.use_pretrained_backbone = False


def load_config(model_dir: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    """The checkpoint's transformers config.

    Raises:
        CheckpointError: no folder, no config.json, unreadable JSON, or remote code required
            without `trust_remote_code`.
    """
    path = Path(model_dir)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {str(path)!r} does not exist")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(
            f"{str(path)!r} has no config.json: not a transformers checkpoint folder "
            f"(save one with model.save_pretrained(DIR))")
    try:
        raw = json.loads(config_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {str(config_file)!r}: {e}") from e
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise CheckpointError(f"{str(config_file)!r} has no 'model_type'")
    if raw.get("auto_map") and not trust_remote_code:
        raise CheckpointError(
            f"{str(config_file)!r} needs the checkpoint's own Python code (auto_map); onnxport "
            f"does not run it unless you pass --trust-remote-code")
    hub = _hub_reference(raw)
    if hub:
        raise CheckpointError(
            f"{str(config_file)!r} names the backbone {hub!r} on the Hugging Face Hub "
            f"(\"backbone\") without its config, and onnxport never downloads: put the "
            f"backbone's config into config.json as \"backbone_config\" (a model loaded "
            f"once online and saved with save_pretrained has it)")
    import transformers

    try:
        with deferred_imports(quantized=bool(raw.get("quantization_config"))), offline():
            config = transformers.AutoConfig.from_pretrained(
                str(path), trust_remote_code=trust_remote_code, local_files_only=True)
    except (ValueError, KeyError, OSError) as e:
        fix = (" (it needs a file from the Hugging Face Hub, and onnxport never downloads: "
               "put the file, or the part's config, into the checkpoint folder)"
               if "offline" in str(e).lower() else "")
        raise CheckpointError(f"transformers cannot read {str(config_file)!r}: {e}{fix}") from e
    _no_pretrained_backbone(config)
    return config


# Functions transformers imports at the top of its modeling modules whenever their package is
# installed, for paths a float checkpoint's export never takes: saving a torchao-quantized
# model, and the Hungarian matching of the detection losses (training). Importing torchao
# (its kernels, its pytree registrations) and scipy.optimize costs about a second per process.
_DEFERRED_FUNCTIONS = {
    "torchao.prototype.safetensors.safetensors_support": frozenset({
        "flatten_tensor_state_dict", "unflatten_tensor_state_dict"}),
    "scipy.optimize": frozenset({"linear_sum_assignment"}),
}
_QUANTIZATION_MODULES = ("torchao.",)


class _DeferredModule(types.ModuleType):
    """Stands in sys.modules for a module until one of its functions is called.

    `from MODULE import f` gets a function that imports MODULE on its first call and calls
    the real `f`; any other attribute imports the real module at once and returns its own.
    """

    def __init__(self, name: str, functions: frozenset[str]) -> None:
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        self._functions = functions

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._functions:
            return _forwarder(self.__name__, attr)
        return getattr(_real_module(self.__name__), attr)


def _real_module(name: str) -> types.ModuleType:
    if isinstance(sys.modules.get(name), _DeferredModule):
        del sys.modules[name]
    return importlib.import_module(name)


def _forwarder(module: str, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = module
    return call


@contextlib.contextmanager
def deferred_imports(*, quantized: bool) -> Iterator[None]:
    """While transformers imports its modeling code: torchao's and scipy's functions that
    loading and exporting a float checkpoint never call are imported when first called.

    A quantized checkpoint (`quantized`) gets torchao at once. Modules already imported are
    left alone; the stand-ins leave sys.modules on exit, so later imports get the real ones.
    """
    placed = []
    for name, functions in _DEFERRED_FUNCTIONS.items():
        if name in sys.modules or (quantized and name.startswith(_QUANTIZATION_MODULES)):
            continue
        if importlib.util.find_spec(name.partition(".")[0]) is None:
            continue
        sys.modules[name] = _DeferredModule(name, functions)
        placed.append(name)
    try:
        yield
    finally:
        for name in placed:
            if isinstance(sys.modules.get(name), _DeferredModule):
                del sys.modules[name]


def weight_files(model_dir: str | os.PathLike[str]) -> list[Path]:
    """The checkpoint's weight files (shards listed by the index), safetensors first.

    Raises:
        WeightsError: no weight file, an unreadable index, or a shard the index lists missing.
    """
    path = Path(model_dir)
    for single, index in (_SAFETENSORS, _TORCH):
        if (path / index).is_file():
            try:
                weight_map = json.loads((path / index).read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise WeightsError(f"cannot read the weight index {str(path / index)!r}: "
                                   f"{e}") from e
            shards = [path / name for name in sorted(set(weight_map.values()))]
            missing = [str(s) for s in shards if not s.is_file()]
            if missing:
                raise WeightsError(f"the weight index {str(path / index)!r} lists missing "
                                   f"files: {', '.join(missing)}")
            return shards
        if (path / single).is_file():
            return [path / single]
    raise WeightsError(
        f"{str(path)!r} holds no weights: expected model.safetensors (or sharded "
        f"model-0000i-of-0000n.safetensors with model.safetensors.index.json), or "
        f"pytorch_model.bin")


def check_weights(files: list[Path]) -> int:
    """Open each weight file and read its tensor list; the number of tensors.

    safetensors files are read through their header (no tensor data is loaded); `.bin` files
    are loaded with `torch.load(weights_only=True)` onto the meta device.

    Raises:
        WeightsError: a file is truncated, corrupt, or would need an unsafe unpickle.
    """
    count = 0
    for file in files:
        try:
            if file.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(file), framework="pt") as f:
                    keys = list(f.keys())
                    if keys:
                        f.get_slice(keys[-1]).get_shape()
                # The header's offsets must fit the file: a truncated file fails here.
                _check_safetensors_size(file)
            else:
                import torch

                state = torch.load(str(file), map_location="meta", weights_only=True)
                keys = list(state)
        except WeightsError:
            raise
        except Exception as e:  # safetensors, pickle and OS errors alike
            raise WeightsError(f"cannot read the weight file {str(file)!r}: "
                               f"{type(e).__name__}: {e}") from e
        count += len(keys)
    return count


def _check_safetensors_size(file: Path) -> None:
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
              default=0)
    size = file.stat().st_size
    if 8 + n + end > size:
        raise WeightsError(f"the weight file {str(file)!r} is truncated: its header needs "
                           f"{8 + n + end} bytes, the file has {size}")


def load_model(model_dir: str | os.PathLike[str], config: Any, auto_class: str, *,
               dtype: Any = None, trust_remote_code: bool = False) -> Any:
    """The checkpoint's model for a task's Auto class, in eval mode, eager attention.

    Raises:
        WeightsError: the weights cannot be read, or do not fit the architecture.
    """
    import transformers

    files = weight_files(model_dir)
    check_weights(files)
    quantized = getattr(config, "quantization_config", None) is not None
    with deferred_imports(quantized=quantized):
        cls = getattr(transformers, auto_class)
    kwargs: dict[str, Any] = {"config": config, "local_files_only": True,
                              "trust_remote_code": trust_remote_code,
                              "use_safetensors": files[0].suffix == ".safetensors",
                              "weights_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    # sdpa with a mask exports as plain matmuls + softmax in onnxport; keep what the config
    # says, but never a kernel only a GPU has.
    try:
        with warnings.catch_warnings(), deferred_imports(quantized=quantized), offline():
            warnings.simplefilter("ignore")
            model = cls.from_pretrained(str(model_dir), **kwargs)
    except OSError as e:
        if "offline" in str(e).lower() or "huggingface.co" in str(e):
            raise CheckpointError(
                f"loading {str(model_dir)!r} as {auto_class} needs a file from the Hugging "
                f"Face Hub, and onnxport never downloads: {e}. Put the file into the "
                f"checkpoint folder (or the part's config into config.json)") from e
        raise WeightsError(f"cannot load the weights of {str(model_dir)!r} into "
                           f"{auto_class} for model_type {config.model_type!r}: {e}") from e
    except (RuntimeError, ValueError, KeyError) as e:
        raise WeightsError(f"cannot load the weights of {str(model_dir)!r} into "
                           f"{auto_class} for model_type {config.model_type!r}: {e}") from e
    model.eval()
    if dtype is not None:
        model.to(dtype)
    return model
