"""`InputObserver`: learn export arguments and dynamic shapes from real calls of a model.

The observer replaces a method of the model (`forward` by default) for the duration of a
`with` block, records the arguments of the first `store_n_calls` calls (tensors cloned, so
in-place updates such as a growing KV cache do not change what was recorded) and their
outputs. Afterwards:

* `infer_dynamic_shapes()` compares the shapes of every tensor across the recorded calls: a
  dimension whose size changed is dynamic (`torch.export.Dim.DYNAMIC`), the others are static.
  The spec follows the structure torch.export expects: a dict ``{dim: Dim.DYNAMIC}`` per tensor
  (``{}`` when nothing varies), tuples, lists and dicts kept, any other pytree node (a
  transformers `DynamicCache`, a `ModelOutput`, ...) as the list of its flattened children.
* `infer_arguments()` gives the inputs to export with: the first call with as many arguments
  as the reference call (the first call holding the most tensors). An input this call lacks
  but others have becomes an empty tensor (its first varying dimension set to 0), so the
  exported graph has the input, and its dynamic dimension stays dynamic.
* `check_discrepancies(program)` runs the exported model on every recorded call and compares
  with the recorded outputs.

This is the behaviour torch.onnx 2.13 documents for `torch.onnx.InputObserver`, with one
difference: an argument holding no tensor at all (None, an empty container, or a cache whose
layers are still empty, as transformers 5 passes to the prefill step of `generate`) counts as
missing in that call, where torch.onnx refuses the observation because the number of tensors
of the argument changed between calls.

Example:
    >>> import torch, onnxport
    >>> model = torch.nn.Linear(4, 2)
    >>> observer = onnxport.InputObserver()
    >>> with observer(model):
    ...     _ = model(torch.randn(2, 4)); _ = model(torch.randn(3, 4))
    >>> observer.infer_dynamic_shapes()
    ({0: DimHint(DYNAMIC)},)
    >>> [tuple(t.shape) for t in observer.infer_arguments()]
    [(2, 4)]
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree

from onnxport.errors import OnnxExporterError
from onnxport.program import _ort_session_initializer

__all__ = ["InputObserver", "InputObserverError"]

_SCALARS = (int, float, bool, str)


class InputObserverError(OnnxExporterError):
    """The recorded calls cannot give export arguments or dynamic shapes (a RuntimeError,
    the type torch.onnx raises in the same situations)."""


def _tensor_count(value: Any) -> int:
    return sum(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(value))


def _holds_nothing(value: Any) -> bool:
    """None, or a container without any leaf (an empty list, a cache with empty layers)."""
    if value is None:
        return True
    if isinstance(value, torch.Tensor) or isinstance(value, _SCALARS):
        return False
    return pytree.tree_flatten(value)[1].num_leaves == 0


def _opaque_leaves(value: Any) -> list[str]:
    """Types of leaves that are neither tensors, None nor Python scalars: objects torch's
    pytree cannot see into, whose tensors would be lost."""
    return sorted({type(x).__name__ for x in pytree.tree_leaves(value)
                   if x is not None and not isinstance(x, (torch.Tensor, *_SCALARS))})


def _clone(value: Any) -> Any:
    leaves, spec = pytree.tree_flatten(value)
    leaves = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in leaves]
    return pytree.tree_unflatten(leaves, spec)


def _spec_structure(value: Any, next_spec: Callable[[], Any]) -> Any:
    """`value` with each tensor replaced by `next_spec()`, in the shape of a dynamic_shapes
    spec: tuples, lists and dicts kept, other pytree nodes as the list of their children."""
    if isinstance(value, torch.Tensor):
        return next_spec()
    if value is None:
        return None
    if type(value) in (tuple, list):
        return type(value)(_spec_structure(v, next_spec) for v in value)
    if type(value) is dict:
        return {k: _spec_structure(v, next_spec) for k, v in value.items()}
    node = pytree.SUPPORTED_NODES.get(pytree._get_node_type(value))  # namedtuples too
    if node is None:
        return None  # a constant leaf
    children, _context = node.flatten_fn(value)
    return [_spec_structure(c, next_spec) for c in children]


class _Call:
    """One recorded call: args and kwargs (tensors cloned), constant keyword arguments, and
    after alignment, the tensors in the order of the reference call (None where missing)."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 constants: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.constants = constants
        self.num_tensors = _tensor_count((args, kwargs))
        self.aligned: list[torch.Tensor | None] | None = None
        self.outputs: list[torch.Tensor | None] | None = None
        self.latency = 0.0


class ObservedInputs:
    """The inputs of one recorded call (torch.onnx's `InputCandidate` attributes)."""

    def __init__(self, call: _Call) -> None:
        self.args = call.args
        self.kwargs = call.kwargs
        self.cst_kwargs = dict(call.constants)
        self.flat_list: list[Any] = pytree.tree_leaves((call.args, call.kwargs))
        # The tensors in the order of the call holding the most (None where this one has
        # none); None until arguments or shapes were inferred.
        self.aligned_flat_list = call.aligned

    def __len__(self) -> int:
        return len(self.flat_list)

    def str_obs(self) -> str:
        """A one-line summary."""
        return (f"InputCandidate(args=#{len(self.args)}(...), kwargs=#{len(self.kwargs)}{{...}}, "
                f"cst_kwargs={self.cst_kwargs})")


class ObservedCalls:
    """The recorded calls of an InputObserver, as torch.onnx's `InputObserverInfo` reads."""

    def __init__(self, calls: list[_Call]) -> None:
        self.inputs = [ObservedInputs(c) for c in calls]
        self.flat_outputs = [list(c.outputs or []) for c in calls]
        self.latencies = [c.latency for c in calls]

    def __len__(self) -> int:
        return len(self.inputs)


class _Signature:
    def __init__(self, method: Callable[..., Any]) -> None:
        sig = inspect.signature(method)
        self.signature = sig
        params = list(sig.parameters.values())
        self.names = [p.name for p in params]
        self.defaults = {p.name: p.default for p in params
                         if p.default is not inspect.Parameter.empty
                         and isinstance(p.default, _SCALARS)}
        var_pos = [(p.name, i) for i, p in enumerate(params)
                   if p.kind is inspect.Parameter.VAR_POSITIONAL]
        self.var_positional: tuple[str, int] | None = var_pos[0] if var_pos else None
        var_kw = [p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        self.var_keyword: str | None = var_kw[0] if var_kw else None


class InputObserver:
    """Records the inputs and outputs of a model's method to infer export arguments and
    dynamic shapes, as `torch.onnx.InputObserver` (torch 2.13).

    Args:
        value_if_missing: inputs to use when a call lacks them, by name (keyword argument)
            or position (positional argument), e.g. ``{"pixel_values": torch.empty(0, 3, 8, 8)}``
            for a multimodal model whose later `generate` steps no longer pass the images.
            They only serve the inference of arguments and shapes; the model never sees them.

    Example:
        >>> observer = InputObserver()
        >>> with observer(model):                      # doctest: +SKIP
        ...     model.generate(input_ids, max_new_tokens=4)
        >>> program = onnxport.export(model, (), kwargs=observer.infer_arguments(),
        ...                           dynamic_shapes=observer.infer_dynamic_shapes())  # doctest: +SKIP
    """

    def __init__(self, value_if_missing: dict[str | int, Any] | None = None) -> None:
        self.value_if_missing: dict[str | int, Any] = dict(value_if_missing or {})
        self._signature: _Signature | None = None
        self._calls: list[_Call] = []
        self._opaque: dict[str, list[str]] = {}
        self._aligned_count = -1

    # -- recording -------------------------------------------------------------------------

    def num_obs(self) -> int:
        """The number of recorded calls."""
        return len(self._calls)

    @property
    def info(self) -> ObservedCalls:
        """The recorded calls, read as torch.onnx's `InputObserver.info`: `len(info)`,
        `info.inputs` (each with `args`, `kwargs`, `flat_list`, `aligned_flat_list`,
        `str_obs()`), `info.flat_outputs` and `info.latencies`."""
        return ObservedCalls(self._calls)

    @contextlib.contextmanager
    def __call__(self, model: torch.nn.Module, store_n_calls: int = 3,
                 method_name: str = "forward") -> Iterator[InputObserver]:
        """Record the calls of `model.<method_name>` inside the `with` block.

        Args:
            model: The model (or any object with the method).
            store_n_calls: Record at most this many calls in this block (later calls run
                unrecorded, to bound memory).
            method_name: The method to observe.
        """
        if not hasattr(model, method_name):
            raise ValueError(f"{type(model).__name__} has no method {method_name!r} to observe")
        original = getattr(model, method_name)
        if self._signature is None:
            self._signature = _Signature(original)
        limit = len(self._calls) + store_n_calls
        had_own = method_name in vars(model)
        own_value = vars(model).get(method_name)

        def observed(*args: Any, **kwargs: Any) -> Any:
            record = len(self._calls) < limit
            call = self._record(args, kwargs) if record else None
            begin = time.perf_counter()
            result = original(*args, **kwargs)
            if call is not None:
                call.latency = time.perf_counter() - begin
                call.outputs = [x.detach().clone() if isinstance(x, torch.Tensor) else None
                                for x in pytree.tree_leaves(result)]
            return result

        # transformers' generate reads the forward signature (position_ids, ...).
        observed.__signature__ = self._signature.signature  # type: ignore[attr-defined]
        setattr(model, method_name, observed)
        try:
            yield self
        finally:
            if had_own:
                setattr(model, method_name, own_value)
            else:
                delattr(model, method_name)

    def _record(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        sig = self._signature
        assert sig is not None
        # Python scalars differing from the signature's default are constants of the call.
        constants = {k: v for k, v in kwargs.items()
                     if k in sig.names and isinstance(v, _SCALARS)
                     and sig.defaults.get(k) is not None and v != sig.defaults[k]}
        kwargs = {k: v for k, v in kwargs.items()
                  if not isinstance(v, _SCALARS) and not _holds_nothing(v)}
        args = tuple(None if _holds_nothing(a) else a for a in args)
        for key, value in self.value_if_missing.items():
            if isinstance(key, str):
                if key not in sig.names and not sig.var_keyword:
                    raise ValueError(
                        f"value_if_missing names {key!r}, which is no parameter of the observed "
                        f"method ({', '.join(sig.names)}) and it takes no **kwargs")
                kwargs.setdefault(key, value)
            elif isinstance(key, int):
                if key >= len(sig.names):
                    raise ValueError(
                        f"value_if_missing has position {key}, but the observed method has "
                        f"{len(sig.names)} parameters ({', '.join(sig.names)})")
                if key >= len(args):
                    raise NotImplementedError(
                        f"value_if_missing has position {key}, but the call passed only "
                        f"{len(args)} positional arguments")
                if args[key] is None:
                    args = (*args[:key], value, *args[key + 1:])
            else:
                raise TypeError(f"value_if_missing keys are names or positions, not {key!r}")
        for name, value in [*enumerate(args), *kwargs.items()]:
            opaque = _opaque_leaves(value)
            if opaque:
                self._opaque[str(name)] = opaque
        # torch.export wants kwargs (and their dynamic shapes) in the signature's order.
        ordered = {k: kwargs[k] for k in sig.names if k in kwargs}
        ordered.update({k: v for k, v in kwargs.items() if k not in ordered})
        call = _Call(_clone(args), _clone(ordered), constants)
        self._calls.append(call)
        return call

    # -- alignment -------------------------------------------------------------------------

    def _reference(self) -> _Call:
        """The first call holding the most tensors: its structure is the export's."""
        if not self._calls:
            raise InputObserverError(
                "No inputs were captured: no call was observed; run the model inside "
                "`with observer(model):` before inferring arguments or dynamic shapes")
        if self._opaque:
            found = "; ".join(f"argument {k!r} holds {', '.join(v)}" for k, v in self._opaque.items())
            raise InputObserverError(
                f"{found}, which torch.utils._pytree cannot flatten, so its tensors cannot be "
                "observed; register the class as a pytree node first (for transformers' "
                "DynamicCache: transformers.integrations.executorch."
                "register_dynamic_cache_export_support())")
        best = self._calls[0]
        for call in self._calls[1:]:
            if call.num_tensors > best.num_tensors:
                best = call
        return best

    def _align(self, call: _Call, ref: _Call, recorded: bool = True
               ) -> list[torch.Tensor | None]:
        """The tensors of `call` in the order of `ref`'s, None for each one it lacks.

        A `recorded` call may name only arguments `ref` names, as torch.onnx 2.13 requires
        (a call passing by name what the reference passes by position raises); inputs given
        to `infer_arguments` are aligned by the signature."""
        sig = self._signature
        assert sig is not None
        if call.constants != ref.constants:
            raise InputObserverError(
                f"two calls were made with different constant arguments, {call.constants} "
                f"and {ref.constants}; they cannot share one exported graph")
        if recorded and any(k not in ref.kwargs for k in call.kwargs):
            raise InputObserverError(
                f"At least one call to the observed model must contain all the named "
                f"arguments: a call passed {list(call.kwargs)} by name, the call holding the "
                f"most tensors passes {list(ref.kwargs)} by name (and {len(ref.args)} by "
                f"position); pass each argument the same way in every call")
        args, kwargs = list(call.args), dict(call.kwargs)
        # Positional arguments the reference passes by name, by name here too.
        for i in range(len(ref.args), len(args)):
            if args[i] is not None:
                kwargs.setdefault(sig.names[i], args[i])
        del args[len(ref.args):]
        # ... and those it passes by position, by position.
        for i in range(len(ref.args)):
            if sig.names[i] in kwargs and (i >= len(args) or args[i] is None):
                args += [None] * (i + 1 - len(args))
                args[i] = kwargs.pop(sig.names[i])
        extra = [k for k in kwargs if k not in ref.kwargs]
        if extra:
            raise InputObserverError(
                f"At least one call to the observed model must contain all the named "
                f"arguments: a call passed {extra}, which the call holding the most tensors "
                f"does not pass "
                f"(it passes {list(ref.kwargs)})")
        slots: list[tuple[int | str, Any, Any]] = [
            (i, args[i] if i < len(args) else None, a)
            for i, a in enumerate(ref.args)]
        slots += [(k, kwargs.get(k), v) for k, v in ref.kwargs.items()]
        flat: list[torch.Tensor | None] = []
        for name, value, ref_value in slots:
            expected = _tensor_count(ref_value)
            if value is None:
                flat.extend([None] * expected)
                continue
            tensors = [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]
            if len(tensors) != expected:
                kind = f"Positional argument {name}" if isinstance(name, int) else \
                    f"Named argument {name!r}"
                raise InputObserverError(
                    f"{kind} has {len(tensors)} tensors in one call and {expected} in "
                    "another; the observed calls must agree on its structure")
            flat.extend(tensors)
        return flat

    def _align_all(self) -> _Call:
        ref = self._reference()
        if self._aligned_count != len(self._calls):
            for call in self._calls:
                call.aligned = self._align(call, ref)
            self._aligned_count = len(self._calls)
        return ref

    def _flat_dynamic_dims(self, batch_for: set[int | str] | bool | None = None) -> list[list[int]]:
        """For each tensor of the reference call, the dimensions to make dynamic."""
        ref = self._align_all()
        sig = self._signature
        assert sig is not None
        owners: list[int | str] = []
        for i, a in enumerate(ref.args):
            owners += [i] * _tensor_count(a)
        for k, v in ref.kwargs.items():
            owners += [k] * _tensor_count(v)

        def batch(owner: int | str) -> bool:
            if not batch_for:
                return False
            if batch_for is True or owner in batch_for:  # type: ignore[operator]
                return True
            return isinstance(owner, int) and sig.names[owner] in batch_for  # type: ignore[operator]

        result = []
        for index, owner in enumerate(owners):
            shapes = {tuple(c.aligned[index].shape) for c in self._calls  # type: ignore[index]
                      if c.aligned[index] is not None}  # type: ignore[index]
            if len({len(s) for s in shapes}) > 1:
                raise InputObserverError(
                    f"tensor {index} of argument {owner!r} changed rank between calls "
                    f"(shapes {sorted(shapes)}); no dynamic shape can describe it")
            rank = len(next(iter(shapes)))
            dims = [d for d in range(rank) if len({s[d] for s in shapes}) > 1
                    or (d == 0 and batch(owner))]
            result.append(dims)
        return result

    # -- inference -------------------------------------------------------------------------

    def infer_dynamic_shapes(self, set_batch_dimension_for: set[int | str] | bool | None = None
                             ) -> tuple[Any, ...] | dict[str, Any]:
        """The dynamic_shapes spec for `export`, in the structure `infer_arguments` returns.

        Args:
            set_batch_dimension_for: inputs (by position or name), or True for all, whose
                first dimension is dynamic even if every observed call had the same size.

        Returns:
            A tuple (positional inputs only) or a dict by parameter name, holding for each
            tensor ``{dim: torch.export.Dim.DYNAMIC}`` for the dims that varied; constant
            keyword inputs map to None; inputs of a ``**kwargs`` parameter are grouped under
            its name, as torch.export expects.
        """
        ref = self._align_all()
        specs = iter([dict.fromkeys(d, torch.export.Dim.DYNAMIC)
                      for d in self._flat_dynamic_dims(set_batch_dimension_for)])
        ds_args = _spec_structure(ref.args, lambda: next(specs))
        ds_kwargs = _spec_structure(ref.kwargs, lambda: next(specs))
        ds_kwargs.update(dict.fromkeys(ref.constants))
        return self._group(tuple(ds_args), ds_kwargs, for_shapes=True)

    def _group(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, for_shapes: bool) -> Any:
        sig = self._signature
        assert sig is not None
        if not kwargs and not (for_shapes and sig.var_positional):
            return args
        if not args:
            return self._nest_var_keyword(kwargs) if for_shapes else kwargs
        if sig.var_positional:
            if not for_shapes:
                raise InputObserverError(
                    "the observed method takes *args, so the arguments cannot be given as one "
                    "tuple or one dict; call infer_arguments(as_args_kwargs=True)")
            n = min(len(args), sig.var_positional[1])
            named = {**dict(zip(sig.names[:n], args[:n])), sig.var_positional[0]: args[n:]}
        else:
            named = dict(zip(sig.names[:len(args)], args))
        named.update(kwargs)
        return self._nest_var_keyword(named) if for_shapes else named

    def _nest_var_keyword(self, spec: dict[str, Any]) -> dict[str, Any]:
        sig = self._signature
        assert sig is not None
        extra = [k for k in spec if k not in sig.names]
        if not sig.var_keyword or not extra:
            return spec
        if sig.var_keyword in spec:
            raise ValueError(f"a keyword argument is named {sig.var_keyword!r}, as the "
                             f"**{sig.var_keyword} parameter; the spec cannot hold both")
        out = {k: v for k, v in spec.items() if k not in extra}
        out[sig.var_keyword] = {k: spec[k] for k in extra}
        return out

    def infer_arguments(self, index_or_args_or_kwargs: tuple[Any, ...] | dict[str, Any] | int
                        | None = None, flat: bool = False, as_args_kwargs: bool = False) -> Any:
        """The inputs to export with.

        Args:
            index_or_args_or_kwargs: None picks the first recorded call with as many
                positional and named arguments as the call holding the most tensors; an int
                picks that recorded call; a tuple (args) or dict (kwargs) are inputs to
                complete the same way.
            flat: Return the flat list of tensors (the graph inputs' order) instead.
            as_args_kwargs: Return ``(args, kwargs)`` always.

        Returns:
            A tuple (only positional inputs), a dict (named inputs, positional ones moved to
            their names), ``(args, kwargs)`` or a flat list. An input the chosen call lacks is
            an empty tensor: the size of its first dynamic dimension is 0.
        """
        ref = self._align_all()
        sig = self._signature
        assert sig is not None
        if index_or_args_or_kwargs is None:
            call = next(c for c in self._calls
                        if len(c.args) == len(ref.args) and len(c.kwargs) == len(ref.kwargs))
        elif isinstance(index_or_args_or_kwargs, bool) or not isinstance(
                index_or_args_or_kwargs, (int, tuple, dict)):
            raise ValueError(f"index_or_args_or_kwargs must be None, an int, a tuple or a dict, "
                             f"not {type(index_or_args_or_kwargs).__name__}")
        elif isinstance(index_or_args_or_kwargs, int):
            if not 0 <= index_or_args_or_kwargs < len(self._calls):
                raise InputObserverError(
                    f"no recorded call {index_or_args_or_kwargs}: {len(self._calls)} were recorded")
            call = self._calls[index_or_args_or_kwargs]
        elif isinstance(index_or_args_or_kwargs, tuple):
            call = _Call(index_or_args_or_kwargs, {}, {})
            call.aligned = self._align(call, ref, recorded=False)
        else:
            given = index_or_args_or_kwargs
            call = _Call((), {k: v for k, v in given.items() if k not in sig.defaults},
                         {k: v for k, v in given.items() if k in sig.defaults})
            call.aligned = self._align(call, ref, recorded=False)
        return self._arguments(call, ref, flat=flat, as_args_kwargs=as_args_kwargs)

    def _arguments(self, call: _Call, ref: _Call, *, flat: bool, as_args_kwargs: bool) -> Any:
        assert call.aligned is not None
        tensors = list(call.aligned)
        if any(t is None for t in tensors):
            dynamic = self._flat_dynamic_dims()
            for index, t in enumerate(tensors):
                if t is not None:
                    continue
                seen = [c.aligned[index] for c in self._calls  # type: ignore[index]
                        if c.aligned[index] is not None]  # type: ignore[index]
                if not seen:
                    raise InputObserverError(f"no observed call holds tensor {index}")
                like = seen[-1]
                if like.numel() == 0:
                    tensors[index] = like
                elif not dynamic[index]:
                    tensors[index] = torch.zeros_like(like)
                else:
                    shape = list(like.shape)
                    shape[max(dynamic[index])] = 0
                    tensors[index] = torch.empty(shape, dtype=like.dtype, device=like.device)
        if flat:
            return tensors
        leaves, spec = pytree.tree_flatten((ref.args, ref.kwargs))
        it = iter(tensors)
        leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        kwargs = {**kwargs, **ref.constants}
        if as_args_kwargs:
            return tuple(args), kwargs
        return self._group(tuple(args), kwargs, for_shapes=False)

    # -- verification ----------------------------------------------------------------------

    def check_discrepancies(self, onnx_program: Any, atol: float = 1e-4, rtol: float = 0.1,
                            progress_bar: bool = False,
                            initializer: Callable[..., Any] = _ort_session_initializer,
                            skip_none: bool = True) -> list[dict[str, Any]]:
        """Run `onnx_program` on every recorded call and compare with the recorded outputs.

        Args:
            onnx_program: The exported `ONNXProgram`.
            atol: Largest absolute difference accepted.
            rtol: Largest relative difference accepted, ``|a - b| / (|a| + rtol)``.
            progress_bar: Show a tqdm progress bar.
            initializer: Creates the ONNX Runtime session from the model (ONNX Runtime on CPU
                by default).
            skip_none: Do not count an output that is None on one side as a failure.

        Returns:
            One dict per call (rows for a dataframe): SUCCESS, abs, rel (or error), index,
            duration_torch, ort_duration, n_inputs, n_none, n_empty. Errors in ONNX Runtime
            are reported in the row, not raised.
        """
        self._align_all()
        onnx_program.initialize_inference_session(initializer)
        n_inputs = len(onnx_program.model.graph.inputs)
        calls = self._calls
        if progress_bar:
            from tqdm import tqdm

            calls = tqdm(calls)
        rows: list[dict[str, Any]] = []
        try:
            for index, call in enumerate(calls):
                assert call.aligned is not None
                if len(call.aligned) != n_inputs:
                    raise InputObserverError(
                        f"the recorded calls hold {len(call.aligned)} tensors but the model "
                        f"takes {n_inputs} inputs")
                feeds = self._arguments(call, self._reference(), flat=True, as_args_kwargs=False)
                begin = time.perf_counter()
                try:
                    got: list[Any] | None = onnx_program(*feeds)
                    error = None
                except Exception as e:  # noqa: BLE001 - reported in the row
                    got, error = None, f"{type(e).__name__}: {e}"
                row: dict[str, Any]
                if error is not None:
                    row = {"SUCCESS": False, "error": error}
                else:
                    row = _compare(call.outputs or [], got or [], atol, rtol, skip_none)
                row.update(index=index, duration_torch=call.latency,
                           ort_duration=time.perf_counter() - begin, n_inputs=n_inputs,
                           n_none=sum(t is None for t in call.aligned),
                           n_empty=sum(t is None or t.numel() == 0 for t in call.aligned))
                rows.append(row)
        finally:
            onnx_program.release()
        return rows


def _compare(expected: list[torch.Tensor | None], got: list[Any], atol: float, rtol: float,
             skip_none: bool) -> dict[str, Any]:
    if len(expected) != len(got):
        return {"SUCCESS": False,
                "error": f"{len(got)} outputs, the model returned {len(expected)}"}
    err_abs = err_rel = 0.0
    success = True
    for i, (want, have) in enumerate(zip(expected, got)):
        if want is None or have is None:
            if (want is None) != (have is None) and not skip_none:
                return {"SUCCESS": False, "error": f"output {i} is missing on one side"}
            continue
        if tuple(want.shape) != tuple(have.shape):
            return {"SUCCESS": False, "error": f"output {i}: shape {tuple(have.shape)}, "
                                               f"expected {tuple(want.shape)}"}
        if want.dtype != have.dtype:
            return {"SUCCESS": False, "error": f"output {i}: dtype {have.dtype}, expected {want.dtype}"}
        if want.numel() == 0:
            continue
        diff = (want.double() - have.double()).abs()
        err_abs = max(err_abs, diff.max().item())
        err_rel = max(err_rel, (diff / (want.double().abs() + rtol)).max().item())
    if err_abs > atol or err_rel > rtol:
        success = False
    return {"SUCCESS": success, "abs": err_abs, "rel": err_rel}
