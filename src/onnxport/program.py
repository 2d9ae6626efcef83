"""ONNXProgram: the exported model, callable with torch tensors through ONNX Runtime.

Only this module serializes. Weights stay in the torch tensors they came from (zero-copy
adapters) until `save` streams them to the .onnx file or to external data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport._external import DETACHED as _DETACHED
from onnxport._external import (  # noqa: F401  (ExternalDataError: public here)
    ExternalDataError, check_external_data, check_external_location)
from onnxport._external import has_external_data as _has_external_data
from onnxport._validate import check_destination
from onnxport import _serialize
from onnxport.errors import OnnxExporterError
from onnxport import weights as _weights
from onnxport.passes.pretranspose_weights import as_stored, transposed_weights

if TYPE_CHECKING:
    import onnxruntime as ort

_TWO_GB = 2 * 1024**3
# Protobuf cannot hold a message of 2 GiB; leave room for the graph itself.
_EXTERNAL_THRESHOLD = _TWO_GB - 64 * 1024**2


@dataclasses.dataclass
class ONNXRuntimeOptions:
    """Options to influence the execution of the ONNX model through ONNX Runtime.

    Attributes:
        session_options: ONNX Runtime session options.
        execution_providers: Execution providers, names or (name, options) pairs.
        execution_provider_options: One options dict per execution provider.
    """

    session_options: Any = None
    execution_providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None
    execution_provider_options: Sequence[dict[Any, Any]] | None = None

    def __init__(self, *, session_options: Any = None,
                 execution_providers: Sequence[str | tuple[str, dict[Any, Any]]] | None = None,
                 execution_provider_options: Sequence[dict[Any, Any]] | None = None) -> None:
        self.session_options = session_options
        self.execution_providers = execution_providers
        self.execution_provider_options = execution_provider_options


def _ort_session_initializer(model: str | bytes, options: ONNXRuntimeOptions | None = None
                             ) -> ort.InferenceSession:
    """Create an ONNX Runtime session on CPU (or the providers `options` name)."""
    import onnxruntime as ort

    session_options = None
    providers: Any = ["CPUExecutionProvider"]
    provider_options = None
    if options is not None:
        session_options = options.session_options
        if isinstance(session_options, (list, tuple)):
            session_options = session_options[0] if session_options else None
        providers = options.execution_providers or providers
        provider_options = options.execution_provider_options
    if session_options is None:
        session_options = ort.SessionOptions()
        session_options.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=session_options, providers=providers,
                                provider_options=provider_options)


class ONNXProgram:
    """An exported ONNX model that can be saved, inspected and run with torch tensors.

    Calling the program takes what the exported program takes: tensors, and Python
    ints / floats / bools where torch.export kept a SymInt / SymFloat / SymBool input
    symbolic; inputs torch.export specialised (plain Python values, None) are not graph
    inputs and are skipped.

    Complex tensors: ONNX Runtime has no complex kernels, so a complex64 (complex128) input or
    output of shape S is a float32 (float64) tensor of shape S + [2] in the ONNX model (real,
    imaginary in the last axis, the layout of ONNX's DFT). The model lists them by position in
    its `metadata_props` (`pkg.onnxport.complex_inputs`, `pkg.onnxport.complex_outputs`,
    comma-separated indices). Calling the program takes complex torch tensors (converted with
    `torch.view_as_real`) and returns what the graph holds, the real (..., 2) pairs, as
    torch.onnx's ONNXProgram does; `torch.view_as_complex(out)` turns one back.

    Attributes:
        model: The ONNX model, an `onnx_ir.Model`.
        exported_program: The torch.export program the model was translated from, or None.
        capture_strategy: How the model was captured: "non-strict", "strict" (torch.export),
            "exported-program" (the caller passed an ExportedProgram), "torchscript"; None
            when not known. Set by the exporter.
        runtime_options: The `ONNXRuntimeOptions` sessions are created with, or None.

    Example:
        >>> import torch, onnxport
        >>> program = onnxport.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
        >>> program(torch.ones(4, 3))[0].shape
        torch.Size([4, 2])
    """

    def __init__(self, model: ir.Model, exported_program: torch.export.ExportedProgram | None) -> None:
        self.model = model
        self.exported_program = exported_program
        self._session: ort.InferenceSession | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self.runtime_options: ONNXRuntimeOptions | None = None
        self.diagnostic_context: Any = None
        self.capture_strategy: str | None = None
        # The nn.Module exported (set by the exporter), weakly: `apply_weights` computes its
        # non-persistent buffers and reads its tied weights while it lives.
        self._module: weakref.ReferenceType[torch.nn.Module] | None = None

    def __repr__(self) -> str:
        return f"ONNXProgram(\n{self.model}\n)"

    # -- inspection ----------------------------------------------------------------------
    @property
    def model_proto(self) -> onnx.ModelProto:
        """The model as an onnx.ModelProto (serializes the weights into it)."""
        return ir.to_proto(self.model)

    @property
    def diagnostics(self) -> list[Any]:
        """The export's diagnostics (rule, level, message, source), if any were recorded."""
        return list(self.diagnostic_context.diagnostics) if self.diagnostic_context else []

    def save_diagnostics(self, destination: str | os.PathLike[str]) -> None:
        """Write the export's diagnostics as a SARIF 2.1.0 log."""
        from onnxport.diagnostics import DiagnosticContext

        (self.diagnostic_context or DiagnosticContext()).save_sarif(destination)

    # -- saving --------------------------------------------------------------------------
    def save(
        self,
        destination: str | os.PathLike[str] | IO[bytes],
        *,
        include_initializers: bool = True,
        keep_initializers_as_inputs: bool = False,
        external_data: bool | None = None,
        external_data_max_shard_bytes: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Save the model, atomically: nothing is left at `destination` if saving fails.

        | include_initializers | keep_initializers_as_inputs | weights are ...                  |
        | -------------------- | --------------------------- | -------------------------------- |
        | True (default)       | False (default)             | stored in the model              |
        | True                 | True                        | stored, and overridable inputs   |
        | False                | False                       | left out (attach them later)     |
        | False                | True                        | left out, listed as graph inputs |

        Args:
            destination: A file path, or a binary file object.
            include_initializers: Whether to store the weights.
            keep_initializers_as_inputs: Whether to list the weights as graph inputs too.
            external_data: Store the weights in `<destination>.data` beside the model.
                None: only when the weights exceed 2 GB (or a shard size is given).
            external_data_max_shard_bytes: Split the external data into files
                `<destination>-0000i-of-0000N.data` of at most this many bytes each (a
                larger tensor gets a file of its own). None: one `.data` file.
            progress: Called as `progress(bytes_written, total_bytes)` after each weight
                written to external data.

        External data is streamed: each weight is read (from its tensor's memory, or from
        the memory-mapped checkpoint `apply_weights` attached) and written in large
        sequential writes by a thread, one weight in memory at a time, its CRC-32 computed
        while the data before it is written. On Linux the data goes straight to the disk
        (O_DIRECT, through 16 MB aligned buffers; where the file system refuses it, buffered
        writes whose writeback starts at once), and weights held in memory-mapped files are
        read ahead. Tensors of 64 KiB or more start at 64 KiB-aligned offsets
        (runtimes can memory-map them), and the CRC-32 of every data file is recorded in the
        model's metadata (`pkg.onnxport.external_data_crc32`; check it with
        `onnxport.weights.verify_external_data(path)`).

        Saving to a path is atomic for the model and its `.data` file together: they are
        written in full to a staging folder beside `destination`, then renamed into place. If
        saving fails (an exception while writing, disk full, permission denied), the files
        that were at `destination` are left byte-identical and no temporary file is left.
        A staging folder that a killed process left is removed by the next save to the same
        path (only once the process that wrote it is gone).

        Raises:
            ValueError: `destination` is a directory, or its directory does not exist.
            TypeError: `destination` is neither a path nor a binary file object;
                `external_data` is True and `destination` is not a path.
            ExternalDataError: a weight of the model is external data whose location leaves
                its folder (see `check_external_location`).
            OSError: the file cannot be written (disk full, permission denied); nothing at
                `destination` changed.
        """
        check_destination(destination, "destination")
        is_path = isinstance(destination, (str, os.PathLike))
        if include_initializers:
            self._check_weights("save the weights")
        if external_data_max_shard_bytes is not None:
            if external_data_max_shard_bytes <= 0:
                raise ValueError("external_data_max_shard_bytes must be positive")
            if external_data is None:
                external_data = include_initializers
        if external_data and not is_path:
            raise TypeError("external_data=True needs a file path as destination, not a file object")
        with self._save_view(include_initializers, keep_initializers_as_inputs):
            if external_data is None:
                external_data = include_initializers and _weights_bytes(self.model) > _EXTERNAL_THRESHOLD
                if external_data and not is_path:
                    raise TypeError("the weights exceed 2 GB: save to a file path (external data)")
            if not is_path:
                check_external_data(self.model)
                _serialize.write_model(self.model, destination)  # type: ignore[arg-type]
                return
            _save_atomically(self.model, os.fspath(destination), bool(external_data),
                             max_shard_bytes=external_data_max_shard_bytes, progress=progress)

    @contextlib.contextmanager
    def _save_view(self, include_initializers: bool, keep_as_inputs: bool) -> Iterator[None]:
        graph = self.model.graph
        initializers = list(graph.initializers.values())
        inputs = list(graph.inputs)
        try:
            if keep_as_inputs:
                graph.inputs.extend(v for v in initializers if v not in inputs)
            if not include_initializers:
                graph.initializers.clear()
            yield
        finally:
            if not include_initializers:
                for v in initializers:
                    graph.initializers[v.name] = v
            if keep_as_inputs:
                graph.inputs.clear()
                graph.inputs.extend(inputs)

    # -- weights -------------------------------------------------------------------------
    def _check_weights(self, purpose: str) -> None:
        missing = [name for name, v in self.model.graph.initializers.items()
                   if not _holds_data(v.const_value)]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise OnnxExporterError(
                f"cannot {purpose}: {len(missing)} weights have no data ({shown}); the model was "
                "exported in fake mode or on the meta device. Call apply_weights(state_dict or "
                "checkpoint path, module=model) first, or save with include_initializers=False")

    def apply_weights(
        self,
        state_dict: Mapping[str, torch.Tensor | ir.TensorProtocol] | str | os.PathLike[str]
        | torch.nn.Module,
        *,
        dtype: torch.dtype | str | None = None,
        module: torch.nn.Module | None = None,
        strict: bool = False,
    ) -> _weights.WeightsReport:
        """Attach (or replace) weights by their state_dict names, e.g. after fake mode.

        `state_dict` is a mapping of names to torch tensors or onnx_ir tensors (an
        `onnx_ir.ExternalTensor` reads its data lazily, from a file that must be inside its
        folder), a real `nn.Module` (its state_dict and non-persistent buffers), or a
        checkpoint path: a safetensors file, a folder of sharded safetensors with
        `model.safetensors.index.json`, or a `torch.save` file (read with
        `weights_only=True`). Checkpoint files are not read here, only their headers: each
        weight is read from the memory-mapped file when `save` streams it to disk (see
        `onnxport.weights`).

        Args:
            dtype: Convert floating-point checkpoint tensors to this dtype as they are read
                (tensor by tensor, at save time); "auto" converts each to the dtype the
                model declares for it. None: dtypes must match the model's.
            module: The model that was exported (a fake or meta-device one is fine). With
                it, non-persistent buffers that checkpoints never hold (a rotary
                embedding's `inv_freq`) are computed on the CPU by constructing their
                submodule again, and tied weights are read under any of their names.
                None: the nn.Module `export` was given, while it is alive (the program
                holds it only by a weak reference).
            strict: Also refuse checkpoint tensors the model does not use.

        Names are matched exactly. A model weight the checkpoint lacks is an error unless
        it is found under a tied name, computed (above), or already has data (it is then
        kept: a partial update). A checkpoint tensor the model does not use is fine (a tied
        duplicate, a weight the export folded away, an unused head) and is listed in the
        report, unless `strict=True`.

        Returns:
            A `WeightsReport`: weights applied, aliased, computed, kept, unused, converted.

        Raises:
            WeightsMismatchError (an OnnxExporterError): missing weights, unused ones with
                `strict=True`, or shapes and dtypes that differ; every problem is listed,
                with the unmatched names on each side. Nothing is changed then.
            ExternalDataError: an external tensor's location leaves its folder.
        """
        initializers = self.model.graph.initializers
        stored_transposed = transposed_weights(self.model)
        ir_tensors: dict[str, ir.TensorProtocol] = {}
        source: Any = state_dict
        if isinstance(state_dict, Mapping):
            ir_tensors = {k: v for k, v in state_dict.items()
                          if not isinstance(v, torch.Tensor) and isinstance(v, ir.TensorProtocol)}
            source = {k: v for k, v in state_dict.items() if k not in ir_tensors}
        if isinstance(state_dict, torch.nn.Module) and module is None:
            module = state_dict
        if module is None and self._module is not None:
            module = self._module()
        checkpoint = _weights.open_checkpoint(source)
        expected = {
            name: _weights._Expected(value.dtype, tuple(value.shape) if value.shape is not None
                                     else None, _holds_data(value.const_value) or name in ir_tensors,
                                     name in stored_transposed)
            for name, value in initializers.items()}
        assignments, report = _weights.match_weights(expected, checkpoint, dtype=dtype,
                                                     module=module, strict=strict)
        for name, tensor in ir_tensors.items():
            value = initializers.get(name)
            if value is None:
                report.unused.append(name)
                continue
            self._apply_ir_tensor(value, name, as_stored(self.model, name, tensor))
            report.applied.append(name)
        for name, tensor in assignments.items():
            initializers[name].const_value = tensor
        self.release()
        return report

    def _apply_ir_tensor(self, value: ir.Value, name: str, tensor: ir.TensorProtocol) -> None:
        if isinstance(tensor, ir.ExternalTensor) and tensor.location != _DETACHED:
            check_external_location(tensor.location, tensor.base_dir, name=name)
        expected = value.shape
        if expected is not None and tuple(expected) != tuple(tensor.shape):
            raise OnnxExporterError(
                f"apply_weights: '{name}' has shape {tuple(tensor.shape)}, the model expects "
                f"{tuple(expected)}")
        if value.dtype is not None and value.dtype != tensor.dtype:
            raise OnnxExporterError(
                f"apply_weights: '{name}' has dtype {tensor.dtype}, the model expects {value.dtype}")
        value.const_value = tensor

    def optimize(self, target: str = "onnx") -> None:
        """Fold constants, remove redundancies and fuse, in place; `target="onnxruntime"`
        also rewrites into ONNX Runtime's contrib ops (as `export(target=...)`)."""
        from onnxport.passes import run_passes, target_passes

        run_passes(self.model)
        run_passes(self.model, target_passes(target))
        self.release()

    # -- running -------------------------------------------------------------------------
    def _session_model(self) -> tuple[str | bytes, tempfile.TemporaryDirectory[str] | None]:
        """The model as ONNX Runtime loads it: bytes, or a file with external data past 2 GB."""
        self._check_weights("run the model")
        # Weights read from external data (a model loaded with onnx_ir.load) are checked to
        # stay in their folder, then rewritten beside a temporary copy, which ONNX Runtime
        # can follow (it cannot from bytes).
        check_external_data(self.model)
        if _has_external_data(self.model) or _weights_bytes(self.model) > _EXTERNAL_THRESHOLD:
            tempdir = tempfile.TemporaryDirectory(prefix="onnxport_")
            path = os.path.join(tempdir.name, "model.onnx")
            ir.save(self.model, path, external_data="model.onnx.data")
            return path, tempdir
        return ir.to_proto(self.model).SerializeToString(), None

    def initialize_inference_session(
        self, initializer: Callable[..., ort.InferenceSession] = _ort_session_initializer
    ) -> None:
        """Create the ONNX Runtime session `__call__` uses (done on first call otherwise)."""
        self.release()
        model, self._tempdir = self._session_model()
        if initializer is _ort_session_initializer:
            self._session = initializer(model, self.runtime_options)
        else:
            self._session = initializer(model)

    def release(self) -> None:
        """Drop the inference session and its temporary files."""
        self._session = None
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __call__(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model in ONNX Runtime on the same (structured) inputs as the PyTorch model.

        Takes what the exported program takes (see the class docstring): tensors, and Python
        numbers for symbolic scalar inputs. Returns the graph outputs as torch tensors;
        complex outputs come back as their real (..., 2) pairs, as from torch.onnx.

        Two keyword arguments are taken for onnxport itself, as in torch.onnx 2.1:
        `options=ONNXRuntimeOptions(...)` (session options, execution providers) and
        `model_with_state_dict=module` (weights for a model exported in fake mode).
        """
        options = kwargs.pop("options", None) if isinstance(kwargs.get("options"),
                                                               ONNXRuntimeOptions) else None
        weights_from = kwargs.pop("model_with_state_dict", None) \
            if isinstance(kwargs.get("model_with_state_dict"), torch.nn.Module) else None
        if weights_from is not None:
            self.apply_weights(weights_from.state_dict())
        if options is not None and options is not self.runtime_options:
            self.runtime_options = options
            self.release()
        feed = self._feed(args, kwargs)
        if self._session is None:
            self.initialize_inference_session()
        assert self._session is not None
        return _run_session(self._session, feed)

    def call_reference(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model with ONNX's reference evaluator (`onnx.reference.ReferenceEvaluator`).

        Takes and returns what `__call__` does; slow, but independent of ONNX Runtime.
        """
        from onnx.reference import ReferenceEvaluator

        feed = self._feed(args, kwargs)
        self._check_weights("run the model")
        evaluator = ReferenceEvaluator(self.model_proto)
        return [_from_numpy(o) for o in evaluator.run(None, feed)]

    def compute_values(self, value_names: Sequence[str], args: Sequence[Any] = (),
                       kwargs: Mapping[str, Any] | None = None) -> list[torch.Tensor]:
        """Run the model in ONNX Runtime and return the named values, in the order named.

        Any value of the main graph can be named: a graph input, a weight, or the output of
        a node (values inside subgraphs cannot). The model itself is left as it is; the run
        uses a session of its own, so the session `__call__` uses is kept.

        Args:
            value_names: Names of values of the main graph.
            args: The model's positional inputs, as for `__call__`.
            kwargs: The model's keyword inputs, as for `__call__`.

        Raises:
            ValueError: a name is not a value of the main graph.
        """
        if isinstance(value_names, str):
            raise TypeError(f"compute_values: value_names must be a sequence of value names, "
                            f"not the str {value_names!r}; pass [{value_names!r}]")
        graph = self.model.graph
        values = _values_by_name(graph)
        carried = _carried_as_rows(values)
        for name in value_names:
            if name not in values and name in carried:
                values[name] = values[carried[name][0]]
            elif name not in values:
                raise ValueError(f"Value '{name}' not found in the model. Please provide a valid "
                                 "value name (graph inputs, initializers and node outputs of "
                                 "the main graph).")
        feed = self._feed(args, kwargs or {})
        wanted = list(dict.fromkeys(value_names))
        original_outputs = list(graph.outputs)
        try:
            graph.outputs.clear()
            graph.outputs.extend(values[name] for name in wanted)
            model, tempdir = self._session_model()
        finally:
            graph.outputs.clear()
            graph.outputs.extend(original_outputs)
        try:
            session = _ort_session_initializer(model, self.runtime_options)
            results = dict(zip(wanted, _run_session(session, feed)))
            del session
        finally:
            if tempdir is not None:
                tempdir.cleanup()
        return [results[name].reshape(carried[name][1])
                if name in carried and values[name].name != name else results[name]
                for name in value_names]

    def rename_axes(self, rename_mapping: Mapping[str | ir.SymbolicDim, str]) -> None:
        """Rename symbolic dimensions everywhere in the model, as torch.onnx does.

        Every value's shape is updated: graph inputs and outputs, weights, intermediate
        values, values inside subgraphs (If/Loop/Scan bodies) and model-local functions.
        A dimension named exactly by a key is renamed; in a dimension that is an expression
        ("2*s1", "s1 + s2") each key is replaced where it appears as a whole word, longest
        keys first and in one pass (so {"a": "b", "b": "a"} swaps).

        Example:
            >>> batch = program.model.graph.inputs[0].shape[0]
            >>> program.rename_axes({batch: "batch"})

        Args:
            rename_mapping: Old axis (its name, or an `onnx_ir.SymbolicDim` taken from the
                model) to new name.

        Raises:
            ValueError: a key is neither a str nor a SymbolicDim with a name, or a new name
                is not a non-empty str.
        """
        mapping: dict[str, str] = {}
        for key, new_name in rename_mapping.items():
            if isinstance(key, ir.SymbolicDim):
                if not isinstance(key.value, str):
                    raise ValueError(f"rename_mapping: the SymbolicDim key {key!r} has no name; "
                                     "expected a named dimension")
                old_name = key.value
            elif isinstance(key, str):
                old_name = key
            else:
                raise ValueError(f"rename_mapping: keys must be str or onnx_ir.SymbolicDim, got "
                                 f"{type(key).__name__} {key!r}")
            if not isinstance(new_name, str) or not new_name:
                raise ValueError(f"rename_mapping: the new name for {old_name!r} must be a "
                                 f"non-empty str, got {new_name!r}")
            mapping[old_name] = new_name
        self.release()
        if not mapping:
            return
        pattern = re.compile("|".join(
            rf"(?<!\w){re.escape(name)}(?!\w)" for name in sorted(mapping, key=len, reverse=True)))

        def renamed(name: str) -> str:
            if name in mapping:
                return mapping[name]
            return pattern.sub(lambda m: mapping[m.group(0)], name)

        for value in _all_values(self.model):
            shape = value.shape
            if shape is None:
                continue
            dims: list[Any] = []
            changed = False
            for dim in shape:
                if isinstance(dim, ir.SymbolicDim) and isinstance(dim.value, str):
                    new = renamed(dim.value)
                    changed |= new != dim.value
                    dims.append(new)
                else:
                    dims.append(dim)
            if changed:
                denotations = [shape.get_denotation(i) for i in range(shape.rank())]
                value.shape = ir.Shape(dims, denotations=denotations)

    def _feed(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The ONNX Runtime feed: graph input name to array."""
        leaves = self.flatten_inputs(args, kwargs)
        inputs = list(self.model.graph.inputs)
        if len(leaves) != len(inputs):
            names = ", ".join(str(v.name) for v in inputs)
            raise OnnxExporterError(
                f"the model takes {len(inputs)} inputs ({names}), got {len(leaves)} (tensors, "
                "and Python numbers for symbolic int/float/bool inputs)")
        return {str(v.name): _input_array(x, v) for v, x in zip(inputs, leaves)}

    def flatten_inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """The leaves of (args, kwargs) that are graph inputs, in the order of the graph inputs.

        With an exported program, a leaf is a graph input when torch.export made it a tensor,
        SymInt, SymFloat or SymBool input; leaves it specialised (Python values, None) are left
        out. Without one, the tensor and array leaves.
        """
        ordered_kwargs = dict(kwargs)
        spec = None
        if self.exported_program is not None:
            spec = self.exported_program.call_spec.in_spec
        if spec is not None and spec.num_children == 2:
            keys = spec.children()[1].context if hasattr(spec, "children") else None
            if isinstance(keys, list):
                ordered_kwargs = {k: kwargs[k] for k in keys if k in kwargs}
                ordered_kwargs.update({k: v for k, v in kwargs.items() if k not in ordered_kwargs})
        leaves = torch.utils._pytree.tree_leaves((tuple(args), ordered_kwargs))
        kept = _graph_input_leaves(self.exported_program)
        if kept is not None and len(kept) == len(leaves):
            return [x for x, keep in zip(leaves, kept) if keep]
        return [x for x in leaves if isinstance(x, (torch.Tensor, np.ndarray))]


_SYMBOLIC = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)


def _graph_input_leaves(program: torch.export.ExportedProgram | None) -> list[bool] | None:
    """For each user input of `program`, in order, whether it became a graph input."""
    if program is None:
        return None
    user = {s.arg.name for s in program.graph_signature.input_specs
            if s.kind == torch.export.graph_signature.InputKind.USER_INPUT and hasattr(s.arg, "name")}
    return [isinstance(node.meta.get("val"), _SYMBOLIC) for node in program.graph.nodes
            if node.op == "placeholder" and node.name in user]


def _input_array(x: Any, value: ir.Value) -> np.ndarray:
    """One input as the array ONNX Runtime takes for graph input `value`."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return _to_numpy(x)
    if isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating)):
        if value.dtype is not None:
            return np.asarray(x, dtype=value.dtype.numpy())
        default = np.bool_ if isinstance(x, (bool, np.bool_)) else (
            np.int64 if isinstance(x, (int, np.integer)) else np.float32)
        return np.asarray(x, dtype=default)
    raise TypeError(f"input '{value.name}': expected a torch.Tensor, a numpy array or a Python "
                    f"bool/int/float, got {type(x).__name__}")


def _run_session(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> list[torch.Tensor]:
    if _has_bfloat16(session):
        return _run_with_bfloat16(session, feed)
    return [_from_numpy(o) for o in session.run(None, feed)]


def _carried_as_rows(values: Mapping[str, ir.Value]) -> dict[str, tuple[str, list[int]]]:
    """Original name -> (name, original shape) of the values FuseRowsPass carries as 2-D."""
    from onnxport.passes.fuse_rows import ROWS_OF

    carried: dict[str, tuple[str, list[int]]] = {}
    for name, value in values.items():
        meta = value.metadata_props.get(ROWS_OF)
        if meta:
            original, _, dims = meta.rpartition(":")
            carried[original] = (name, [int(d) for d in dims.split(",")])
    return carried


def _values_by_name(graph: ir.Graph) -> dict[str, ir.Value]:
    """The named values of `graph` (not of its subgraphs): weights, inputs, node outputs."""
    values: dict[str, ir.Value] = dict(graph.initializers)
    values.update((v.name, v) for v in graph.inputs if v.name)
    for node in graph:
        values.update((v.name, v) for v in node.outputs if v.name)
    return values


def _all_values(model: ir.Model) -> Iterator[ir.Value]:
    """Every value of the model: main graph, subgraphs and functions, each once."""
    seen: set[int] = set()
    stack: list[ir.Graph] = [model.graph, *(f.graph for f in model.functions.values())]
    while stack:
        graph = stack.pop()
        for value in (*graph.inputs, *graph.initializers.values(), *graph.outputs):
            if id(value) not in seen:
                seen.add(id(value))
                yield value
        for node in graph:
            for value in node.outputs:
                if id(value) not in seen:
                    seen.add(id(value))
                    yield value
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    stack.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    stack.extend(attr.value)


def _to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.stack([t.real, t.imag], axis=-1) if t.dtype.kind == "c" else t
    t = t.detach().cpu()
    if t.is_complex():
        # The model takes complex inputs as real (..., 2) pairs (see ONNXProgram).
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype in _ML_DTYPES:
        # bfloat16 and float8: their bits, viewed as the ml_dtypes type ONNX uses.
        bits = torch.uint16 if t.dtype == torch.bfloat16 else torch.uint8
        return t.contiguous().view(bits).numpy().view(_dtypes.to_ir(t.dtype).numpy())
    return t.numpy()


# Types numpy has only through ml_dtypes, which `session.run` cannot take or return.
_ML_DTYPES = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2,
              torch.float8_e5m2fnuz)
_ML_ORT_TYPES = {f"tensor({_dtypes.to_ir(t).name.lower()})": t for t in _ML_DTYPES}
_ML_NUMPY_NAMES = {_dtypes.to_ir(t).numpy().name: t for t in _ML_DTYPES}


def _has_bfloat16(session: ort.InferenceSession) -> bool:
    """Whether a graph input or output is bfloat16 or float8, which numpy (and so `run`)
    cannot hold."""
    return any(v.type in _ML_ORT_TYPES for v in (*session.get_inputs(), *session.get_outputs()))


def _run_with_bfloat16(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> list[Any]:
    """`session.run` through OrtValues: bfloat16 and float8 go in as their raw bit patterns
    and come out through DLPack, as ONNX Runtime's numpy conversion has neither."""
    import onnxruntime as ort

    values = {}
    for name, array in feed.items():
        # (np.ascontiguousarray would make a 0-d array 1-d)
        array = np.require(array, requirements="C")
        dtype = _ML_NUMPY_NAMES.get(array.dtype.name)
        if dtype is not None:
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8),
                int(_dtypes.to_ir(dtype)))
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    outputs: list[Any] = []
    for value in session.run_with_ort_values(None, values):
        if value.is_tensor() and value.data_type() in _ML_ORT_TYPES:
            outputs.append(torch.from_dlpack(value).clone())
        else:
            outputs.append(_from_numpy(value.numpy()))
    return outputs


def _from_numpy(a: Any) -> torch.Tensor:
    a = np.asarray(a)
    dtype = _ML_NUMPY_NAMES.get(a.dtype.name)
    if dtype is not None:
        bits = np.uint16 if a.dtype.itemsize == 2 else np.uint8
        return torch.from_numpy(a.view(bits)).view(dtype)
    return torch.from_numpy(a)


def _weights_bytes(model: ir.Model) -> int:
    total = 0
    for value in model.graph.initializers.values():
        if value.const_value is not None:
            total += value.const_value.nbytes
    return total


def _holds_data(tensor: Any) -> bool:
    """Whether a weight's tensor has values (not None, not a fake or meta torch tensor)."""
    if tensor is None:
        return False
    if isinstance(tensor, TorchTensor) and isinstance(tensor.raw, torch.Tensor):
        return _weights.has_data(tensor.raw)
    return True


def _save_atomically(model: ir.Model, path: str, external_data: bool, *,
                     max_shard_bytes: int | None = None,
                     progress: Callable[[int, int], None] | None = None) -> None:
    """Write `model` (and its external data) to `path` as one unit, or change nothing.

    Everything is written and flushed to disk in a staging directory beside `path` first;
    only renames follow. The data file `<name>.data` is renamed into place first (the previous
    one kept as a hard link), the model last; if the model's rename fails, the previous data
    file is put back. A failure at any point (an exception while writing, disk full,
    permission denied, KeyboardInterrupt) leaves the previous model and data byte-identical
    and no staging files behind. The staging folders of earlier saves to `path` whose process
    died (SIGKILL, power loss) are removed first.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    base = os.path.basename(path)
    data_name = f"{base}.data"
    check_external_data(model)
    data_files: list[str] = []
    _remove_abandoned_staging(directory, base)
    staging = tempfile.mkdtemp(prefix=_staging_prefix(base) + _owner() + ".", dir=directory)
    try:
        staged = os.path.join(staging, base)
        if external_data:
            options: dict[str, Any] = {}
            if max_shard_bytes is not None:
                options["max_shard_bytes"] = max_shard_bytes
            if progress is not None:
                options["progress"] = progress
            data_files = _serialize.write_model_external(model, staged, data_name, **options)
        else:
            with open(staged, "wb") as fh:
                _serialize.write_model(model, fh)
        # The data files were flushed to disk as they were written.
        names = [*data_files, base]
        _fsync(os.path.join(staging, base))
        _commit(staging, directory, names)
        # The data files of an earlier save that this one no longer references (its shards
        # when now saved as one file or as another number of shards; its data file when now
        # saved without external data).
        for name in _serialize.stale_data_files(directory, data_name, data_files):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# Staging folders are named `.<base>.onnxport-staging.<host>.<pid>.<start>.<random>`: the
# destination's file name, and the process that writes into it (see `_owner`).
_STAGING = "onnxport-staging"
_OWNED = re.compile(r"(?P<host>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]*)\.(?P<start>[0-9]+|x)\.[a-z0-9_]+")


def _staging_prefix(base: str) -> str:
    """How the names of the staging folders of saves to file name `base` begin."""
    if len(base.encode()) > 160:  # room for the rest within 255 bytes
        base = hashlib.sha256(base.encode()).hexdigest()[:32]
    return f".{base}.{_STAGING}."


@functools.cache
def _host() -> str:
    """This host and PID namespace, as 8 hex digits: elsewhere a PID names another process."""
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = os.readlink("/proc/self/ns/pid")
    return f"{zlib.crc32(f'{socket.gethostname()}|{namespace}'.encode()):08x}"


def _proc_stat(pid: int) -> tuple[bytes, str] | None:
    """State and start time (clock ticks after boot) of process `pid`, from /proc/<pid>/stat
    (fields 3 and 22); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
        return fields[0], fields[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _owner(pid: int | None = None) -> str:
    """`<host>.<pid>.<start>` of process `pid` (this one by default); the start time tells a
    recycled PID from the process that had it ("x" where it is not known)."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return f"{_host()}.{pid}.{stat[1] if stat else 'x'}"


def _owner_alive(pid: int, start: str) -> bool:
    """Whether process `pid`, started at `start`, may still run (yes when unsure)."""
    if os.name != "posix":
        return True  # os.kill would end the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        pass  # it exists (owned by another user), or the PID is out of range
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, now = stat
    return state not in (b"Z", b"X", b"x") and start in ("x", now)  # not a zombie, not dead


def _remove_abandoned_staging(directory: str, base: str) -> None:
    """Remove the staging folders saves to `base` in `directory` left when their process
    was killed; never those of a live process, of other file names, or of other hosts."""
    prefix = _staging_prefix(base)
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries
                     if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for name in names:
        owner = _OWNED.fullmatch(name[len(prefix):])
        if owner is None or owner["host"] != _host() or \
                _owner_alive(int(owner["pid"]), owner["start"]):
            continue
        # Claimed by renaming it as this process's own, so two cleaners never remove it
        # both, and one killed while removing leaves a folder the next save removes.
        claimed = os.path.join(directory, f"{prefix}{_owner()}.{secrets.token_hex(8)}")
        try:
            os.rename(os.path.join(directory, name), claimed)
        except OSError:
            continue
        shutil.rmtree(claimed, ignore_errors=True)


def _fsync(path: str, directory: bool = False) -> None:
    """Flush `path` to disk (best effort for directories, which not every system allows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if directory:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def _commit(staging: str, directory: str, names: list[str]) -> None:
    """Rename the staged files `names` into `directory`, in order, all or none.

    Each file already at a destination is first hard-linked (copied where links are not
    supported) into `staging`, so that a failed rename of a later file can put it back.
    """
    done: list[tuple[str, str | None]] = []  # (destination, backup of what it held)
    try:
        for name in names:
            destination = os.path.join(directory, name)
            backup = None
            if name != names[-1] and os.path.lexists(destination):
                backup = os.path.join(staging, f".previous.{name}")
                try:
                    os.link(destination, backup, follow_symlinks=False)
                except OSError:
                    shutil.copy2(destination, backup, follow_symlinks=False)
            os.replace(os.path.join(staging, name), destination)
            done.append((destination, backup))
    except BaseException:
        for destination, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, destination)
                else:
                    os.remove(destination)
        raise
    _fsync(directory, directory=True)
