"""Signatures of onnxport's public names against torch.onnx's, parameter by parameter.

For every name onnxport mirrors, each parameter torch.onnx has must exist in onnxport's with
the same kind (positional / keyword-only / *args / **kwargs) and the same default, positional
ones in the same order. onnxport may add parameters (keyword-only, or with a default after
torch's): each addition is listed in EXTENSIONS with the reason, so any other difference fails.

The reference is torch.onnx as installed (2.13). Names 2.13 no longer has (2.1-2.6 only) are
compared with the signature documented in ../shared/reference, transcribed below as text.
Deliberate differences are strict xfails (DELIBERATE_DIFFERENCES), each with the reason: if
one ever matches, its test XPASSes and fails, so the entry must be revisited. See
docs/compat.md for the full table.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import warnings
from typing import Any

import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torch.onnx
    import torch.onnx.errors
    import torch.onnx.ops
    import torch.onnx.symbolic_helper
    import torch.onnx.testing
    import torch.onnx.utils
    import torch.onnx.verification

import onnxport
import onnxport.errors
import onnxport.symbolic_helper
import onnxport.utils
import onnxport.verification

P = inspect.Parameter

# -- signatures documented for 2.1-2.6 only (../shared/reference), transcribed verbatim ------------

DOCUMENTED = {
    # 001_db668518704619c1.txt (TorchDynamo-based exporter)
    "dynamo_export": "(model, /, *model_args, export_options=None, **model_kwargs)",
    "ExportOptions": "(*, dynamic_shapes=None, fake_context=None, onnx_registry=None, "
                     "diagnostic_options=None)",
    "enable_fake_mode": "()",
    "ONNXRuntimeOptions": "(*, session_options=None, execution_providers=None, "
                          "execution_provider_options=None)",
    "OnnxRegistry": "()",
    "OnnxRegistry.get_op_functions": "(namespace, op_name, overload=None)",
    "OnnxRegistry.is_registered_op": "(namespace, op_name, overload=None)",
    "OnnxRegistry.register_op": "(function, namespace, op_name, overload=None, is_complex=False)",
    "DiagnosticOptions": "(verbosity_level=20, warnings_as_errors=False)",
    # 003_e2771fae61eb6e7a.txt (TorchScript-based exporter)
    "export_to_pretty_string": "(model, args, export_params=True, verbose=False, "
                               "training=<TrainingMode.EVAL: 0>, input_names=None, "
                               "output_names=None, operator_export_type=<OperatorExportTypes.ONNX: 0>, "
                               "export_type=None, google_printer=False, opset_version=None, "
                               "keep_initializers_as_inputs=None, custom_opsets=None, "
                               "add_node_names=True, do_constant_folding=True, dynamic_axes=None)",
    "enable_log": "()",
    "disable_log": "()",
    "verification.find_mismatch": "(model, input_args, do_constant_folding=True, "
                                  "training=<TrainingMode.EVAL: 0>, opset_version=None, "
                                  "keep_initializers_as_inputs=True, verbose=False, options=None)",
}


class _Documented:
    """A documented signature, parsed from its text (enum reprs read as torch's members)."""

    def __init__(self, text: str) -> None:
        self.text = text
        source = re.sub(r"<(\w+)\.(\w+): -?\d+>", r"\1.\2", text)
        namespace: dict[str, Any] = {"TrainingMode": torch.onnx.TrainingMode,
                                     "OperatorExportTypes": torch.onnx.OperatorExportTypes}
        exec(f"def documented{source}: pass", namespace)  # noqa: S102 (our own transcription)
        self.signature = inspect.signature(namespace["documented"])


def _import(path: str) -> Any:
    """`root:dotted.path`: a module attribute, then class attributes (statically)."""
    root, _, rest = path.partition(":")
    obj: Any = importlib.import_module(root)
    for part in rest.split(".") if rest else []:
        if isinstance(obj, type):
            obj = inspect.getattr_static(obj, part)
            if isinstance(obj, (classmethod, staticmethod)):
                obj = obj.__func__
        else:
            obj = getattr(obj, part)
    return obj


def _signature(obj: Any) -> inspect.Signature:
    if isinstance(obj, _Documented):
        return obj.signature
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return inspect.signature(obj.__init__)
    return inspect.signature(obj)


def _params(obj: Any) -> list[inspect.Parameter]:
    params = list(_signature(obj).parameters.values())
    if params and params[0].name in ("self", "cls") and not isinstance(obj, _Documented):
        params = params[1:]  # methods (and classmethods, unwrapped) on both sides
    elif isinstance(obj, type) and issubclass(obj, BaseException):
        params = params[1:]
    return params


# -- the names compared: id -> (torch.onnx's object or documented text, onnxport's path) -------------

CASES: dict[str, tuple[str, str]] = {
    # torch.onnx 2.13
    "export": ("torch.onnx:export", "onnxport:export"),
    "is_in_onnx_export": ("torch.onnx:is_in_onnx_export", "onnxport:is_in_onnx_export"),
    "register_custom_op_symbolic": ("torch.onnx:register_custom_op_symbolic",
                                    "onnxport:register_custom_op_symbolic"),
    "unregister_custom_op_symbolic": ("torch.onnx:unregister_custom_op_symbolic",
                                      "onnxport:unregister_custom_op_symbolic"),
    "select_model_mode_for_export": ("torch.onnx:select_model_mode_for_export",
                                     "onnxport:select_model_mode_for_export"),
    "ONNXProgram": ("torch.onnx:ONNXProgram", "onnxport:ONNXProgram"),
    "InputObserver": ("torch.onnx:InputObserver", "onnxport:InputObserver"),
    "ExportableModule": ("torch.onnx:ExportableModule", "onnxport:ExportableModule"),
    "JitScalarType.from_value": ("torch.onnx:JitScalarType.from_value",
                                 "onnxport:JitScalarType.from_value"),
    "JitScalarType.from_dtype": ("torch.onnx:JitScalarType.from_dtype",
                                 "onnxport:JitScalarType.from_dtype"),
    "JitScalarType.from_onnx_type": ("torch.onnx:JitScalarType.from_onnx_type",
                                     "onnxport:JitScalarType.from_onnx_type"),
    "errors.UnsupportedOperatorError": ("torch.onnx.errors:UnsupportedOperatorError",
                                        "onnxport.errors:UnsupportedOperatorError"),
    "utils.register_custom_op_symbolic": ("torch.onnx.utils:register_custom_op_symbolic",
                                          "onnxport.utils:register_custom_op_symbolic"),
    "utils.unregister_custom_op_symbolic": ("torch.onnx.utils:unregister_custom_op_symbolic",
                                            "onnxport.utils:unregister_custom_op_symbolic"),
    "utils.select_model_mode_for_export": ("torch.onnx.utils:select_model_mode_for_export",
                                           "onnxport.utils:select_model_mode_for_export"),
    "utils.unconvertible_ops": ("torch.onnx.utils:unconvertible_ops",
                                "onnxport.utils:unconvertible_ops"),
    "symbolic_helper.parse_args": ("torch.onnx.symbolic_helper:parse_args",
                                   "onnxport.symbolic_helper:parse_args"),
    # 2.1-2.6 only (documented text)
    "dynamo_export": ("doc:dynamo_export", "onnxport:dynamo_export"),
    "ExportOptions": ("doc:ExportOptions", "onnxport:ExportOptions"),
    "enable_fake_mode": ("doc:enable_fake_mode", "onnxport:enable_fake_mode"),
    "ONNXRuntimeOptions": ("doc:ONNXRuntimeOptions", "onnxport:ONNXRuntimeOptions"),
    "OnnxRegistry": ("doc:OnnxRegistry", "onnxport:OnnxRegistry"),
    "OnnxRegistry.get_op_functions": ("doc:OnnxRegistry.get_op_functions",
                                      "onnxport:OnnxRegistry.get_op_functions"),
    "OnnxRegistry.is_registered_op": ("doc:OnnxRegistry.is_registered_op",
                                      "onnxport:OnnxRegistry.is_registered_op"),
    "OnnxRegistry.register_op": ("doc:OnnxRegistry.register_op",
                                 "onnxport:OnnxRegistry.register_op"),
    "DiagnosticOptions": ("doc:DiagnosticOptions", "onnxport:DiagnosticOptions"),
    "export_to_pretty_string": ("doc:export_to_pretty_string", "onnxport:export_to_pretty_string"),
    "enable_log": ("doc:enable_log", "onnxport:enable_log"),
    "disable_log": ("doc:disable_log", "onnxport:disable_log"),
    "verification.find_mismatch": ("doc:verification.find_mismatch",
                                   "onnxport.verification:find_mismatch"),
    "verification.verify_onnx_program": ("torch.onnx.verification:verify_onnx_program",
                                         "onnxport.verification:verify_onnx_program"),
    "verification.VerificationInfo": ("torch.onnx.verification:VerificationInfo",
                                      "onnxport.verification:VerificationInfo"),
    "verification.VerificationInfo.from_tensors": (
        "torch.onnx.verification:VerificationInfo.from_tensors",
        "onnxport.verification:VerificationInfo.from_tensors"),
    "testing.assert_onnx_program": ("torch.onnx.testing:assert_onnx_program",
                                    "onnxport.testing:assert_onnx_program"),
}

# The public methods of these classes are compared too, each found on torch.onnx's class (so a
# method torch adds later is compared, or fails as missing). ExportableModule: only what it adds
# to nn.Module.
CLASSES = {"ONNXProgram": ("torch.onnx", "onnxport"),
           "InputObserver": ("torch.onnx", "onnxport"),
           "ExportableModule": ("torch.onnx", "onnxport")}


def _class_members(name: str) -> list[str]:
    cls = getattr(torch.onnx, name)
    own = vars(cls) if name == "ExportableModule" else {n: None for n in dir(cls)}
    return sorted(n for n in own if not n.startswith("_") or n == "__call__")


for _cls in CLASSES:
    for _member in _class_members(_cls):
        if not isinstance(inspect.getattr_static(getattr(torch.onnx, _cls), _member), property):
            CASES[f"{_cls}.{_member}"] = (f"torch.onnx:{_cls}.{_member}", f"onnxport:{_cls}.{_member}")


def _torch_side(case: str) -> Any:
    path = CASES[case][0]
    if path.startswith("doc:"):
        return _Documented(DOCUMENTED[path[4:]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _import(path)


def _ours(case: str) -> Any:
    return _import(CASES[case][1])


# -- what onnxport adds, with the reason ------------------------------------------------------------

EXTENSIONS: dict[str, str] = {
    "export.fallback": "torch.onnx 2.6's fallback=True (removed in 2.11): on a dynamo failure, "
                       "export with the TorchScript flavour, with a warning saying why",
    "export.target": "'onnxruntime' also rewrites into ONNX Runtime's contrib ops; the "
                     "default 'onnx' is standard ONNX, as torch.onnx writes",
    "ONNXProgram.optimize.target": "as export(target=): 'onnxruntime' adds ORT's contrib ops",
    "export.registry": "an OnnxRegistry / Registry to translate with instead of the built-in "
                       "op library (what ExportOptions.onnx_registry gave dynamo_export)",
    "export_to_pretty_string.registry": "the op library to translate with, as export()'s",
    "utils.unconvertible_ops.registry": "the op library whose coverage is checked",
    "ONNXProgram.apply_weights.dtype": "convert floating weights while streaming them "
                                       "(float16/bfloat16/'auto'; docs/benchmarks.md big models)",
    "ONNXProgram.apply_weights.module": "the (fake or meta) module, to compute buffers a "
                                        "checkpoint does not hold (rotary inv_freq)",
    "ONNXProgram.apply_weights.strict": "refuse checkpoint tensors the model does not use",
    "ONNXProgram.save.external_data_max_shard_bytes": "split external data into files of at "
                                                      "most this size",
    "ONNXProgram.save.progress": "progress(bytes_written, total) callback while streaming "
                                 "weights",
    "OnnxRegistry.opset_version": "the target opset of the registry (the documented "
                                  "opset_version property, settable at construction; default 18)",
}

# -- deliberate differences (strict xfail), each with its reason -----------------------------

DELIBERATE_DIFFERENCES: dict[str, str] = {
    "export.external_data": "deliberate: torch.onnx 2.13 defaults external_data=True (weights "
                            "always in <f>.data); onnxport defaults None: one self-contained "
                            "file, as 2.1-2.6 wrote, with external data only above 2 GB "
                            "(pass external_data=True for torch.onnx 2.13's layout)",
    "export.keep_initializers_as_inputs": "deliberate: torch.onnx 2.13 defaults False; onnxport "
                                          "None, which is False with dynamo=True and the "
                                          "TorchScript flavour's documented default otherwise "
                                          "(True for the non-ONNX operator_export_types)",
    **{f"errors.UnsupportedOperatorError.{name}": "deliberate: torch.onnx's __init__(name, "
                                                  "version, supported_version) names one op; "
                                                  "onnxport's __init__(message, missing=None) "
                                                  "lists every missing op at once"
       for name in ("name", "version", "supported_version")},
    "errors.UnsupportedOperatorError:order": "positional parameters differ (see above)",
    "errors.UnsupportedOperatorError:additions": "onnxport's message=, missing= are not torch's",
}


# -- comparison ------------------------------------------------------------------------------------

def _same_default(theirs: Any, ours: Any) -> bool:
    if theirs is P.empty or ours is P.empty:
        return theirs is ours
    if callable(theirs) and not isinstance(theirs, type) and callable(ours):
        return getattr(theirs, "__name__", None) == getattr(ours, "__name__", None)
    if type(theirs).__name__ in ("TrainingMode", "OperatorExportTypes", "JitScalarType"):
        return type(ours).__name__ == type(theirs).__name__ and ours.name == theirs.name \
            and int(ours) == int(theirs)
    return type(theirs) is type(ours) and theirs == ours


def _var(params: list[inspect.Parameter], kind: Any) -> inspect.Parameter | None:
    return next((p for p in params if p.kind == kind), None)


def _match(case: str, param: inspect.Parameter) -> str | None:
    """None when onnxport's has torch's parameter with the same kind and default."""
    ours = _params(_ours(case))
    if param.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
        found = _var(ours, param.kind)
        return None if found else f"onnxport has no {param.kind.description} parameter"
    found = next((p for p in ours if p.name == param.name), None)
    if found is None:
        return f"onnxport has no parameter {param.name!r}"
    if found.kind != param.kind:
        return f"{param.name}: kind {found.kind.description}, torch.onnx's is {param.kind.description}"
    if not _same_default(param.default, found.default):
        return f"{param.name}: default {found.default!r}, torch.onnx's is {param.default!r}"
    return None


def _param_id(case: str, param: inspect.Parameter) -> str:
    prefix = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}.get(param.kind, "")
    return f"{case}.{prefix}{param.name}"


def _xfail_if_known(key: str, *values: Any) -> Any:
    if key in DELIBERATE_DIFFERENCES:
        return pytest.param(*values, id=key,
                            marks=pytest.mark.xfail(strict=True, reason=DELIBERATE_DIFFERENCES[key]))
    return pytest.param(*values, id=key)


PARAMETERS = [_xfail_if_known(_param_id(case, p), case, p.name)
              for case in CASES for p in _params(_torch_side(case))]


@pytest.mark.parametrize("case, name", PARAMETERS)
def test_parameter_matches(case: str, name: str) -> None:
    param = next(p for p in _params(_torch_side(case)) if p.name == name)
    problem = _match(case, param)
    assert problem is None, f"{case}: {problem}"


def _positional(params: list[inspect.Parameter]) -> list[str]:
    return [p.name for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize("case", [_xfail_if_known(f"{c}:order", c) for c in CASES])
def test_positional_order(case: str) -> None:
    """torch's positional parameters come first in onnxport's, in torch's order."""
    theirs = _positional(_params(_torch_side(case)))
    ours = _positional(_params(_ours(case)))
    assert ours[:len(theirs)] == theirs, f"{case}: onnxport {ours}, torch.onnx {theirs}"


@pytest.mark.parametrize("case", [_xfail_if_known(f"{c}:additions", c) for c in CASES])
def test_additions_are_explained(case: str) -> None:
    """Every parameter onnxport adds is listed in EXTENSIONS and cannot break torch's calls."""
    theirs = _params(_torch_side(case))
    names = {p.name for p in theirs}
    kinds = {p.kind for p in theirs if p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD)}
    for p in _params(_ours(case)):
        if p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            if p.kind in kinds:
                continue
        elif p.name in names:
            continue
        key = _param_id(case, p)
        assert key in EXTENSIONS, f"{key}: onnxport adds this parameter without a listed reason"
        assert p.kind in (P.KEYWORD_ONLY, P.VAR_KEYWORD) or p.default is not P.empty, \
            f"{key}: an added positional parameter needs a default"


def test_every_listed_exception_is_used() -> None:
    """EXTENSIONS and DELIBERATE_DIFFERENCES name parameters that exist (no stale entries)."""
    added = set()
    for case in CASES:
        theirs = _params(_torch_side(case))
        names = {p.name for p in theirs} | {"*" + p.name for p in theirs} | \
            {"**" + p.name for p in theirs}
        added |= {_param_id(case, p) for p in _params(_ours(case))
                  if _param_id(case, p).split(".")[-1] not in names}
    assert set(EXTENSIONS) <= added, set(EXTENSIONS) - added
    ids = {p.id for p in PARAMETERS} | {f"{c}:order" for c in CASES} | \
        {f"{c}:additions" for c in CASES} | {p.id for p in ENUM_MEMBERS} | \
        {p.id for p in NAMES}
    assert set(DELIBERATE_DIFFERENCES) <= ids, set(DELIBERATE_DIFFERENCES) - ids


# -- class members -------------------------------------------------------------------------------

MEMBERS = [pytest.param(cls, member, id=f"{cls}.{member}")
           for cls in CLASSES for member in _class_members(cls)]


@pytest.mark.parametrize("cls, member", MEMBERS)
def test_class_member_exists(cls: str, member: str) -> None:
    theirs = inspect.getattr_static(getattr(torch.onnx, cls), member)
    ours = inspect.getattr_static(getattr(onnxport, cls), member, None)
    assert ours is not None, f"onnxport.{cls} has no {member}"
    assert isinstance(ours, property) == isinstance(theirs, property), \
        f"{cls}.{member}: property on one side only"
    assert isinstance(ours, classmethod) == isinstance(theirs, classmethod)


def test_program_instance_attributes() -> None:
    """ONNXProgram.model / .exported_program, set by torch.onnx's __init__, are set by ours."""
    import onnx_ir as ir

    model = ir.Model(ir.Graph([], [], nodes=[], opset_imports={"": 18}), ir_version=10)
    theirs, ours = torch.onnx.ONNXProgram(model, None), onnxport.ONNXProgram(model, None)
    public = {n for n in vars(theirs) if not n.startswith("_")}
    assert public == {"model", "exported_program"}
    for name in public:
        assert getattr(ours, name) is getattr(theirs, name)


def test_jit_scalar_type_methods() -> None:
    for member in ("from_value", "from_dtype", "from_onnx_type", "dtype", "onnx_type",
                   "onnx_compatible", "scalar_name", "torch_name"):
        theirs = inspect.getattr_static(torch.onnx.JitScalarType, member)
        ours = inspect.getattr_static(onnxport.JitScalarType, member)
        assert type(ours) is type(theirs), member
        if not isinstance(theirs, classmethod):
            assert [p.name for p in _params(ours)] == [p.name for p in _params(theirs)], member


# -- enums ---------------------------------------------------------------------------------------

ENUMS = ("TrainingMode", "OperatorExportTypes", "JitScalarType")
ENUM_MISMATCHES: dict[str, str] = {}
DELIBERATE_DIFFERENCES.update(ENUM_MISMATCHES)
ENUM_MEMBERS = [_xfail_if_known(f"{e}.{m}", e, m)
                for e in ENUMS for m in getattr(torch.onnx, e).__members__]


@pytest.mark.parametrize("enum_name, member", ENUM_MEMBERS)
def test_enum_member(enum_name: str, member: str) -> None:
    theirs = getattr(torch.onnx, enum_name).__members__[member]
    ours = getattr(onnxport, enum_name).__members__.get(member)
    assert ours is not None, f"onnxport.{enum_name} has no {member}"
    assert int(ours) == int(theirs), f"{enum_name}.{member}: {int(ours)} != {int(theirs)}"
    assert ours.name == theirs.name


@pytest.mark.parametrize("enum_name", ENUMS)
def test_enum_has_no_other_members(enum_name: str) -> None:
    ours = getattr(onnxport, enum_name)
    assert issubclass(ours, enum.Enum)
    assert set(ours.__members__) <= set(getattr(torch.onnx, enum_name).__members__)


# -- which torch.onnx 2.13 names onnxport mirrors ---------------------------------------------------

MODULES = ("torch.onnx", "torch.onnx.errors", "torch.onnx.utils", "torch.onnx.verification",
           "torch.onnx.symbolic_helper", "torch.onnx.testing")

NOT_MIRRORED: dict[str, str] = {
    # torch.onnx
    "torch.onnx.ops": "models call torch.onnx.ops.* themselves; onnxport exports those calls "
                      "(onnxport.ops is its op-translation library, a different module)",
    "torch.onnx.operators": "a TorchScript-era helper module (shape_as_tensor, "
                            "reshape_from_tensor_shape), listed by dir(torch.onnx) once imported; "
                            "use x.shape / Tensor.reshape in models",
    "torch.onnx.TensorProtoDataType": "deprecated in torch.onnx (not in __all__); "
                                      "use onnx.TensorProto / onnx_ir.DataType",
    "torch.onnx.producer_name": "deprecated module constant (a TODO to remove in torch)",
    "torch.onnx.producer_version": "deprecated module constant (a TODO to remove in torch)",
    "torch.onnx.symbolic_opset9": "TorchScript symbolic functions on torch._C.Value; onnxport's "
                                  "translations are keyed by ATen overload (onnxport.ops)",
    **{f"torch.onnx.symbolic_opset{v}": "as symbolic_opset9" for v in range(7, 26) if v != 9},
    # torch.onnx.errors
    "torch.onnx.errors.OnnxExporterWarning": "not provided: onnxport warns with UserWarning",
    "torch.onnx.errors.SymbolicValueError": "not provided: symbolic functions get onnxport's "
                                            "graph values, errors are TranslationError",
    # torch.onnx.utils: TorchScript-exporter internals
    **{f"torch.onnx.utils.{n}": "TorchScript-exporter internal, not provided"
       for n in ("disable_apex_o2_state_dict_hook", "exporter_context", "model_signature",
                 "setup_onnx_logging", "unpack_quantized_tensor", "warn_on_static_input_change")},
    "torch.onnx.utils.export": "not provided: use onnxport.export(..., dynamo=False)",
    # torch.onnx.symbolic_helper: helpers on torch._C.Value / GraphContext
    **{f"torch.onnx.symbolic_helper.{n}": "TorchScript helper on torch._C values, not provided "
                                          "(only parse_args is)"
       for n in ("args_have_same_dtype", "cast_pytorch_to_onnx", "check_training_mode",
                 "dequantize_helper", "is_complex_value", "pytorch_name_to_type",
                 "quantize_helper", "quantized_args", "requantize_bias_helper",
                 "scalar_name_to_pytorch", "scalar_type_to_onnx",
                 "scalar_type_to_pytorch_type")},
}


def _public_names() -> list[str]:
    # Submodules appear in dir(torch.onnx) once something imports them: import them all, so
    # every pytest-xdist worker collects the same tests.
    for sub in ("operators", "errors", "utils", "verification", "symbolic_helper", "testing"):
        importlib.import_module(f"torch.onnx.{sub}")
    for version in range(7, 26):   # torch.onnx's own exports import some of these lazily
        try:
            importlib.import_module(f"torch.onnx.symbolic_opset{version}")
        except ImportError:
            pass
    names = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in dir(module):
            obj = getattr(module, name)
            if name.startswith("_") or name in ("annotations", "TYPE_CHECKING", "Any", "torch",
                                               "textwrap"):
                continue
            if module_name != "torch.onnx" and inspect.ismodule(obj):
                continue
            names.append(f"{module_name}.{name}")
    return names


NAMES = [pytest.param(n, id=n) for n in _public_names()]


@pytest.mark.parametrize("qualname", NAMES)
def test_public_name(qualname: str) -> None:
    """Each torch.onnx 2.13 name is in onnxport, or is listed in NOT_MIRRORED with a reason."""
    module_name, _, name = qualname.rpartition(".")
    ours_module = module_name.replace("torch.onnx", "onnxport")
    try:
        present = hasattr(importlib.import_module(ours_module), name)
    except ImportError:
        present = False
    if qualname == "torch.onnx.ops":
        return  # onnxport.ops exists, as the op-translation library: see test_torch_onnx_ops
    if qualname in NOT_MIRRORED:
        assert not present, f"{qualname} is provided now: compare it and drop it from NOT_MIRRORED"
    else:
        assert present, f"onnxport has no {ours_module}.{name}"


def test_torch_onnx_ops() -> None:
    """torch.onnx.ops: called inside models, exported by onnxport (docs/compat.md).

    A function torch adds to torch.onnx.ops fails here until docs/compat.md covers it.
    """
    assert set(torch.onnx.ops.__all__) == {"aten_decompositions", "symbolic",
                                           "symbolic_multi_out", "rotary_embedding", "attention"}


def test_every_documented_name_is_provided() -> None:
    """The 2.1-2.6 names (../shared/reference) onnxport keeps."""
    for name in ("dynamo_export", "ExportOptions", "enable_fake_mode", "ONNXFakeContext",
                 "ONNXRuntimeOptions", "OnnxRegistry", "DiagnosticOptions",
                 "export_to_pretty_string", "enable_log", "disable_log", "CheckerError",
                 "UnsupportedOperatorError"):
        assert hasattr(onnxport, name), name
    assert hasattr(onnxport.errors, "CheckerError")
    for name in ("find_mismatch", "GraphInfo", "VerificationOptions"):
        assert hasattr(onnxport.verification, name), name
    assert isinstance(inspect.getattr_static(onnxport.OnnxRegistry, "opset_version"), property)
    assert onnxport.OnnxRegistry().opset_version == 18  # documented: "Defaults to ... 18"


def test_documented_transcriptions_parse() -> None:
    for text in DOCUMENTED.values():
        assert _Documented(text).signature is not None
