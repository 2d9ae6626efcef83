"""ONNXProgram: the exported model, callable with torch tensors through ONNX Runtime.

Only this module serializes. Weights stay in the torch tensors they came from (zero-copy
adapters) until `save` streams them to the .onnx file or to external data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport._serialize import write_model
from onnxport.errors import OnnxExporterError

if TYPE_CHECKING:
    import onnxruntime as ort

_COMPLEX_OUTPUTS = "pkg.onnxport.complex_outputs"
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

    Complex tensors: ONNX Runtime has no complex kernels, so a complex64 (complex128) input or
    output of shape S is a float32 (float64) tensor of shape S + [2] in the ONNX model (real,
    imaginary in the last axis, the layout of ONNX's DFT). The model lists them by position in
    its `metadata_props` (`pkg.onnxport.complex_inputs`, `pkg.onnxport.complex_outputs`,
    comma-separated indices); calling the program takes and returns complex torch tensors,
    converted with `torch.view_as_real` and `torch.view_as_complex`.

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
                None: only when the weights exceed 2 GB.

        Raises:
            TypeError: `external_data` is True and `destination` is not a path.
        """
        is_path = isinstance(destination, (str, os.PathLike))
        if include_initializers:
            self._check_weights("save the weights")
        if external_data and not is_path:
            raise TypeError("external_data=True needs a file path as destination, not a file object")
        with self._save_view(include_initializers, keep_initializers_as_inputs):
            if external_data is None:
                external_data = include_initializers and _weights_bytes(self.model) > _EXTERNAL_THRESHOLD
                if external_data and not is_path:
                    raise TypeError("the weights exceed 2 GB: save to a file path (external data)")
            if not is_path:
                write_model(self.model, destination)  # type: ignore[arg-type]
                return
            _save_atomically(self.model, os.fspath(destination), bool(external_data))

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
        missing = [name for name, v in self.model.graph.initializers.items() if v.const_value is None]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise OnnxExporterError(
                f"cannot {purpose}: {len(missing)} weights have no data ({shown}); the model was "
                "exported in fake mode. Call apply_weights(state_dict) first, or save with "
                "include_initializers=False")

    def apply_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Attach (or replace) weights by their state_dict names, e.g. after fake mode.

        Raises:
            OnnxExporterError: a tensor's dtype or shape differs from the model's.
        """
        initializers = self.model.graph.initializers
        for name, tensor in state_dict.items():
            value = initializers.get(name)
            if value is None:
                continue
            tensor = tensor.detach()
            if tensor.is_complex():
                # Complex weights are stored as real (..., 2) pairs (see ONNXProgram).
                tensor = torch.view_as_real(tensor.resolve_conj())
            expected = value.shape
            if expected is not None and tuple(expected) != tuple(tensor.shape):
                raise OnnxExporterError(
                    f"apply_weights: '{name}' has shape {tuple(tensor.shape)}, the model expects "
                    f"{tuple(expected)}")
            if value.dtype is not None and value.dtype != _dtypes.to_ir(tensor.dtype):
                raise OnnxExporterError(
                    f"apply_weights: '{name}' has dtype {tensor.dtype}, the model expects {value.dtype}")
            value.const_value = TorchTensor(tensor, name=name)
        self.release()

    def optimize(self) -> None:
        """Fold constants and remove redundancies, in place."""
        from onnxport.passes import run_passes

        run_passes(self.model)
        self.release()

    # -- running -------------------------------------------------------------------------
    def initialize_inference_session(
        self, initializer: Callable[..., ort.InferenceSession] = _ort_session_initializer
    ) -> None:
        """Create the ONNX Runtime session `__call__` uses (done on first call otherwise)."""
        self.release()
        self._check_weights("run the model")
        if _weights_bytes(self.model) > _EXTERNAL_THRESHOLD:
            self._tempdir = tempfile.TemporaryDirectory(prefix="onnxport_")
            path = os.path.join(self._tempdir.name, "model.onnx")
            ir.save(self.model, path, external_data="model.onnx.data")
            model: str | bytes = path
        else:
            model = ir.to_proto(self.model).SerializeToString()
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
        if self._session is None:
            self.initialize_inference_session()
        assert self._session is not None
        tensors = self.flatten_inputs(args, kwargs)
        input_names = [i.name for i in self._session.get_inputs()]
        if len(tensors) != len(input_names):
            raise OnnxExporterError(
                f"the model takes {len(input_names)} tensor inputs ({', '.join(input_names)}), "
                f"got {len(tensors)}")
        feed = {name: _to_numpy(t) for name, t in zip(input_names, tensors)}
        if _has_bfloat16(self._session):
            outputs = _run_with_bfloat16(self._session, feed)
        else:
            outputs = [_from_numpy(o) for o in self._session.run(None, feed)]
        for index in self._complex_indices(_COMPLEX_OUTPUTS):
            outputs[index] = _complex_from_pairs(outputs[index])
        return outputs

    def _complex_indices(self, key: str) -> list[int]:
        """Positions of the inputs or outputs that carry complex tensors as real pairs."""
        listed = self.model.metadata_props.get(key, "")
        return [int(i) for i in listed.split(",") if i]

    def flatten_inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """The tensor leaves of (args, kwargs), in the order of the graph inputs."""
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
        return [x for x in leaves if isinstance(x, (torch.Tensor, np.ndarray))]


def _to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.stack([t.real, t.imag], axis=-1) if t.dtype.kind == "c" else t
    t = t.detach().cpu()
    if t.is_complex():
        # The model takes complex inputs as real (..., 2) pairs (see ONNXProgram).
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _complex_from_pairs(t: torch.Tensor) -> torch.Tensor:
    """The complex tensor whose real (..., 2) pairs `t` holds."""
    if t.numel() == 0:
        # view_as_complex wants a unit stride, which an empty array need not have.
        dtype = torch.complex128 if t.dtype == torch.float64 else torch.complex64
        return torch.zeros(t.shape[:-1], dtype=dtype)
    return torch.view_as_complex(t.contiguous())


_BFLOAT16 = "tensor(bfloat16)"


def _has_bfloat16(session: ort.InferenceSession) -> bool:
    """Whether a graph input or output is bfloat16, which numpy (and so `run`) cannot hold."""
    return any(v.type == _BFLOAT16 for v in (*session.get_inputs(), *session.get_outputs()))


def _run_with_bfloat16(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> list[Any]:
    """`session.run` through OrtValues: bfloat16 goes in as its raw 16-bit patterns and comes
    out through DLPack, as ONNX Runtime's numpy conversion has no bfloat16."""
    import onnxruntime as ort

    values = {}
    for name, array in feed.items():
        # (np.ascontiguousarray would make a 0-d array 1-d)
        array = np.require(array, requirements="C")
        if array.dtype.name == "bfloat16":
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                array.view(np.uint16), int(ir.DataType.BFLOAT16))
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    outputs: list[Any] = []
    for value in session.run_with_ort_values(None, values):
        if value.is_tensor() and value.data_type() == _BFLOAT16:
            outputs.append(torch.from_dlpack(value).clone())
        else:
            outputs.append(_from_numpy(value.numpy()))
    return outputs


def _from_numpy(a: Any) -> torch.Tensor:
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _weights_bytes(model: ir.Model) -> int:
    total = 0
    for value in model.graph.initializers.values():
        if value.const_value is not None:
            total += value.const_value.nbytes
    return total


def _save_atomically(model: ir.Model, path: str, external_data: bool) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    base = os.path.basename(path)
    data_name = f"{base}.data"
    staging = tempfile.mkdtemp(prefix=f".{base}.", dir=directory)
    try:
        staged = os.path.join(staging, base)
        if external_data:
            ir.save(model, staged, external_data=data_name)
            os.replace(os.path.join(staging, data_name), os.path.join(directory, data_name))
        else:
            with open(staged, "wb") as fh:
                write_model(model, fh)
        os.replace(staged, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
