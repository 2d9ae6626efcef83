"""Patches of other libraries' code that torch.export cannot trace, active only during capture.

Each patch replaces one function of a library the model's code calls with one that computes
the same values without a Python branch torch.export cannot capture for every input: on data
(the number of boxes left after score filtering or NMS is an unbacked size) or on a size asked
to be dynamic (a window-attention model's `if pad > 0:` captures one branch, and the graph
holds only at sizes where the branch goes the same way). A patch applies only if its library
is already imported (this module never imports one), only inside `library_patches()`,
and the original is restored on exit. docs/models.md lists them.

The patches, a module per library (each module's docstring says what its patches compute):

* `torchvision_detection`: torchvision's detection models;
* `torchvision_models`: torchvision's classification and video models;
* `timm`: timm's models;
* `transformers`: transformers' models; `transformers_detr`: its DETR-style detectors;
  `transformers_vits`: VITS's rational-quadratic spline without in-place writes;
  `transformers_longformer`: Longformer's and LED's windowed attention with global tokens;
* `diffusers`: diffusers' models.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from onnxport.capture.library_patches import diffusers as _diffusers
from onnxport.capture.library_patches import state
from onnxport.capture.library_patches import timm as _timm
from onnxport.capture.library_patches import torchvision_detection as _torchvision_detection
from onnxport.capture.library_patches import torchvision_models as _torchvision_models
from onnxport.capture.library_patches import transformers as _transformers
from onnxport.capture.library_patches import transformers_detr as _transformers_detr
from onnxport.capture.library_patches import transformers_vits as _transformers_vits
from onnxport.capture.library_patches import transformers_longformer as _transformers_longformer
# (tests reach these through the package)
from onnxport.capture.library_patches.torchvision_detection import (  # noqa: F401
    _batched_nms, _heatmaps_to_keypoints, _paste_masks_in_image)

# library -> its patches ((module, attribute) -> replacement), applied when it is imported
_PATCHES: dict[str, dict[tuple[str, str], Callable[..., Any]]] = {
    "torchvision": {**_torchvision_detection.PATCHES, **_torchvision_models.PATCHES},
    "timm": {**_timm.PATCHES},
    "transformers": {**_transformers.PATCHES, **_transformers_detr.PATCHES,
                     **_transformers_vits.PATCHES,
                     **_transformers_longformer.PATCHES},
    "diffusers": {**_diffusers.PATCHES},
}


def _resolve(path: str) -> Any:
    """The imported module (or a class in it) at a dotted path, or None."""
    module_name, owner = path, []
    while module_name not in sys.modules:
        module_name, _, name = module_name.rpartition(".")
        if not module_name:
            return None
        owner.insert(0, name)
    found: Any = sys.modules[module_name]
    for name in owner:
        # A module's own namespace only: getattr on a lazy module (transformers.models)
        # would import the submodule, a patch's library the model never imported.
        found = vars(found).get(name) if isinstance(found, type(sys)) else getattr(found, name,
                                                                                   None)
    return found


@contextlib.contextmanager
def library_patches(size_names: dict[str, str] | None = None) -> Iterator[None]:
    """Within this context, the patches of the libraries the process has imported apply;
    `size_names` receives the names they give data-dependent sizes (expression -> name)."""
    saved: list[tuple[Any, str, Any]] = []
    absent = object()  # a builtin a module's global shadows (`len`): deleted again on exit
    outer_names = state.size_names
    state.size_names = size_names if size_names is not None else {}
    outermost = not state.ORIGINALS
    try:
        for library, patches in _PATCHES.items():
            if library not in sys.modules:
                continue
            for (module_name, attribute), replacement in patches.items():
                module = _resolve(module_name)
                builtin = isinstance(module, type(sys)) and hasattr(builtins, attribute)
                # (a method a class inherits, such as torch.Tensor's from its C base: the
                # patch on the class is deleted again on exit, as a builtin's shadow)
                inherited = isinstance(module, type) and attribute not in vars(module)
                if module is not None and (hasattr(module, attribute) or builtin):
                    current = vars(module).get(attribute, absent) if builtin or inherited \
                        else getattr(module, attribute)
                    saved.append((module, attribute, current))
                    # (nested: the outer context's original, not its replacement)
                    state.ORIGINALS.setdefault(
                        (module_name, attribute),
                        getattr(module if inherited else builtins, attribute)
                        if current is absent else current)
                    setattr(module, attribute, replacement)
        yield
    finally:
        for module, attribute, original in reversed(saved):
            if original is absent:
                delattr(module, attribute)
            else:
                setattr(module, attribute, original)
        if outermost:
            state.ORIGINALS.clear()
            state.EXAMPLE_SIZES.clear()
        state.size_names = outer_names
