"""Bookkeeping of torch.export's trace that capture makes cheaper, graph unchanged.

A non-strict trace at a symbolic size spends most of its time on every op's fake output: its
symbolic sizes, strides and storage size are sympy arithmetic. Two pieces of that work give
onnxport nothing, and `cheaper_trace()` defers them to when their result is read:

* Stack traces. For every FX node torch builds the whole Python stack as `FrameSummary`s that
  read each frame's source line (~75 frames a node), then keeps the few frames of the model's
  `forward`s. The frames are built without their line here; the lines of the kept frames are
  read when the trace is formatted, so `node.meta["stack_trace"]` is the same text.
* The fake-tensor cache's check of a new entry. After computing an op's output on a cache miss,
  torch builds the output a second time from the entry it stores (empty_strided with symbolic
  sizes), only to check that such a rebuilt tensor has the computed one's dispatch keys and
  needs no data-dependent guard. Here the check runs when the entry is first used: an entry
  whose rebuilt output fails it leaves the cache and the op is computed instead (torch would
  not have stored it). Entries never used again are never rebuilt; entries still unchecked
  when the context exits leave the cache.

Each piece applies only where the installed torch has the functions it wraps, with the
parameters and fields it uses.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import torch

_state = threading.local()
_lock = threading.Lock()
_depth = 0  # contexts open, in every thread
_saved: list[tuple[Any, str, Any]] = []  # (owner, attribute, torch's original)
# id(entry info) -> (info, expected dispatch keys, the cache holding it, its key); the info is
# held so that its id stays its own
_unchecked: dict[int, tuple[Any, Any, dict[Any, Any], Any]] = {}


class _Unusable(Exception):
    """A cache entry's rebuilt output failed torch's check of new entries."""


def _frames_without_lines(tb: Any, skip: int) -> traceback.StackSummary:
    stack = traceback.StackSummary()
    for frame in reversed(tb[skip:]):
        stack.append(traceback.FrameSummary(frame["filename"], frame["line"], frame["name"],
                                            lookup_line=False))
    return stack


# the methods `_wrap_cache` wraps, with the parameters it passes on, as torch 2.13 has them
# (a torch whose cache differs keeps its own check: `_cache_as_expected`)
_CACHE_METHODS = {
    "_get_output_info_for_cache_entry": ["self", "state", "key", "func", "args", "kwargs",
                                         "output"],
    "_output_from_cache_entry": ["self", "state", "entry", "key", "func", "args"],
    "_cached_dispatch_impl": ["self", "func", "types", "args", "kwargs"],
    "_dispatch_impl": ["self", "func", "types", "args", "kwargs"],
}


def _cache_as_expected(mode_class: Any) -> bool:
    """Whether this torch's fake-tensor cache has the methods and fields `_wrap_cache` uses."""
    from torch._subclasses import fake_tensor

    for name, parameters in _CACHE_METHODS.items():
        method = inspect.unwrap(vars(mode_class).get(name, None) or (lambda: None))
        if list(inspect.signature(method).parameters) != parameters:
            return False
    fields = {"_DispatchCacheValidEntry": ("output_infos", "is_output_tuple"),
              "_DispatchCacheEntryOutputInfo": ("inplace_idx", "metadata"),
              "_CacheKeyState": ("cache_on_shape_env", "shape_env")}
    for cls_name, names in fields.items():
        cls = getattr(fake_tensor, cls_name, None)
        if cls is None or not all(n in getattr(cls, "__dataclass_fields__", {}) or hasattr(cls, n)
                                  for n in names):
            return False
    return isinstance(getattr(mode_class, "cache", None), dict)


def _wrap_cache(mode_class: Any) -> dict[str, Any]:
    """Replacements of FakeTensorMode's cache methods that defer the check of new entries."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    dispatch_keys = torch._C._dispatch_key_set
    get_info = mode_class._get_output_info_for_cache_entry
    from_entry = mode_class._output_from_cache_entry
    cached_dispatch = mode_class._cached_dispatch_impl

    def output_info(self: Any, state: Any, key: Any, func: Any, args: Any, kwargs: Any,
                    output: Any) -> Any:
        # torch's check rebuilds `output` from the new entry under this key: `output_from`
        # answers that call with `output` itself
        outer, _state.computed = getattr(_state, "computed", None), (key, output)
        try:
            info = get_info(self, state, key, func, args, kwargs, output)
        finally:
            _state.computed = outer
        if info.metadata is not None and info.inplace_idx is None:
            cache = getattr(state.shape_env, "fake_tensor_cache", None) \
                if state.cache_on_shape_env() else mode_class.cache
            if not isinstance(cache, dict):  # no cache to drop it from: torch checks it now
                return get_info(self, state, key, func, args, kwargs, output)
            _unchecked[id(info)] = (info, dispatch_keys(output), cache, key)
        return info

    def output_from(self: Any, state: Any, entry: Any, key: Any, func: Any, args: Any) -> Any:
        computed = getattr(_state, "computed", None)
        if computed is not None and computed[0] is key:
            return computed[1]
        infos = entry.output_infos
        try:
            output = from_entry(self, state, entry, key, func, args)
        except GuardOnDataDependentSymNode:
            output = None
            failed = [info for info in infos if id(info) in _unchecked]
            if not failed:
                raise
        else:
            outputs = output if entry.is_output_tuple else (output,)
            failed = [info for info, out in zip(infos, outputs)
                      if id(info) in _unchecked and dispatch_keys(out) != _unchecked[id(info)][1]]
        caches = [_unchecked[id(info)][2] for info in failed]
        for info in infos:
            _unchecked.pop(id(info), None)
        if failed:
            caches[0].pop(key, None)
            raise _Unusable
        return output

    def dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        try:
            return cached_dispatch(self, func, types, args, kwargs)
        except _Unusable:
            return self._dispatch_impl(func, types, args, kwargs)

    return {"_get_output_info_for_cache_entry": output_info,
            "_output_from_cache_entry": output_from, "_cached_dispatch_impl": dispatch}


def _apply() -> None:
    import torch.utils._traceback as tracebacks
    from torch._subclasses.fake_tensor import FakeTensorMode

    extract = getattr(tracebacks, "_extract_symbolized_tb", None)
    if extract is not None and list(inspect.signature(extract).parameters) == ["tb", "skip"]:
        _saved.append((tracebacks, "_extract_symbolized_tb", tracebacks._extract_symbolized_tb))
        tracebacks._extract_symbolized_tb = _frames_without_lines
    if _cache_as_expected(FakeTensorMode):
        for name, replacement in _wrap_cache(FakeTensorMode).items():
            _saved.append((FakeTensorMode, name, vars(FakeTensorMode)[name]))
            setattr(FakeTensorMode, name, replacement)


def _restore() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)
    for _info, _keys, cache, key in _unchecked.values():
        cache.pop(key, None)
    _unchecked.clear()


@contextlib.contextmanager
def cheaper_trace() -> Iterator[None]:
    """Within this context torch.export's trace defers the work described in this module.
    Nested and concurrent contexts share one application: the last to exit restores torch."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            try:
                _apply()
            except BaseException:
                _restore()
                _depth -= 1
                raise
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore()
