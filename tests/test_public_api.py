"""The public surface: every documented name of both flavours is there, nothing else."""

from __future__ import annotations

import onnxport
import onnxport.errors

DOCUMENTED = {  # ../shared/reference/001 (TorchDynamo-based exporter)
    "export", "dynamo_export", "ExportOptions", "enable_fake_mode", "ONNXFakeContext",
    "ONNXProgram", "ONNXRuntimeOptions", "OnnxRegistry", "DiagnosticOptions", "OnnxExporterError",
}
DOCUMENTED_TORCHSCRIPT = {  # ../shared/reference/003 (TorchScript-based exporter)
    "TrainingMode", "OperatorExportTypes", "export_to_pretty_string",
    "register_custom_op_symbolic", "unregister_custom_op_symbolic",
    "select_model_mode_for_export", "enable_log", "disable_log", "JitScalarType",
    "utils", "verification", "symbolic_helper", "CheckerError", "UnsupportedOperatorError",
    "is_in_onnx_export",
}
TORCH_2_13 = {"InputObserver", "ExportableModule"}  # torch.onnx 2.13 (docs/compat.md)
OURS = {"register", "errors", "CaptureError", "ForwardError", "UnsupportedOutputError", "PassError",
        "TranslationError", "VerificationError", "OnnxRuntimeTarget"}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(onnxport.__all__) == DOCUMENTED | DOCUMENTED_TORCHSCRIPT | TORCH_2_13 | OURS
    for name in onnxport.__all__:
        assert hasattr(onnxport, name), name


def test_every_error_derives_from_the_documented_base() -> None:
    for name in onnxport.errors.__all__:
        cls = getattr(onnxport.errors, name)
        assert issubclass(cls, onnxport.OnnxExporterError)
        assert getattr(onnxport, name, cls) is cls


def test_program_and_registry_members() -> None:
    for member in ("model", "model_proto", "exported_program", "save", "apply_weights",
                   "initialize_inference_session", "release", "optimize", "save_diagnostics"):
        if member in ("model", "exported_program"):
            continue  # instance attributes, set in __init__
        assert callable(getattr(onnxport.ONNXProgram, member)) or member == "model_proto"
    registry = onnxport.OnnxRegistry()
    for member in ("opset_version", "is_registered_op", "get_op_functions", "register_op"):
        assert hasattr(registry, member)


def test_torchscript_modules() -> None:
    """The documented names of torch.onnx.utils / verification / symbolic_helper."""
    import onnxport.symbolic_helper
    import onnxport.utils
    import onnxport.verification

    for name in ("unconvertible_ops", "export_to_pretty_string", "register_custom_op_symbolic",
                 "unregister_custom_op_symbolic", "select_model_mode_for_export",
                 "is_in_onnx_export", "enable_log", "disable_log"):
        assert callable(getattr(onnxport.utils, name)), name
    for name in ("find_mismatch", "GraphInfo", "VerificationOptions"):
        assert hasattr(onnxport.verification, name), name
    assert callable(onnxport.symbolic_helper.parse_args)
