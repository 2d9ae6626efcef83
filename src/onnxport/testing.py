"""torch.onnx.testing for onnxport: `assert_onnx_program`."""

from __future__ import annotations

from typing import Any, Literal

import torch

__all__ = ["assert_onnx_program"]

# torch.onnx's capture-strategy class names for onnxport's `capture_strategy` words.
_STRATEGY_NAMES = {"non-strict": "TorchExportNonStrictStrategy",
                   "strict": "TorchExportStrictStrategy"}


def _strategy(program: Any) -> str | None:
    ours = getattr(program, "capture_strategy", None)
    if ours is None:
        return getattr(program, "_capture_strategy", None)
    return _STRATEGY_NAMES.get(ours, ours)


def assert_onnx_program(program: Any, *, rtol: float | None = None, atol: float | None = None,
                        args: tuple[Any, ...] | None = None,
                        kwargs: dict[str, Any] | None = None,
                        strategy: str | None = "TorchExportNonStrictStrategy",
                        backend: Literal["onnxruntime", "reference"] = "onnxruntime") -> None:
    """Assert that the ONNX program's outputs match its ExportedProgram's (torch.onnx 2.13).

    Args:
        program: An ONNXProgram from `export(..., dynamo=True)`.
        rtol, atol: Tolerances of `torch.testing.assert_close` (its defaults when None).
        args, kwargs: The inputs; None for both: the exported program's example inputs.
        strategy: The capture strategy the export must have used, as torch.onnx names it
            ("TorchExportNonStrictStrategy", "TorchExportStrictStrategy"; onnxport's own
            `capture_strategy` words are accepted too); None: not checked.
        backend: "onnxruntime" or "reference" (ONNX's reference evaluator).

    Raises:
        ValueError: the strategy differs, or no exported program / example inputs.
        AssertionError: an output differs. On failure the message ends with the first
            wrong node (see `onnxport.verification.find_first_divergence`).
    """
    if strategy is not None:
        used = _strategy(program)
        if strategy not in (used, getattr(program, "capture_strategy", None)):
            raise ValueError(f"Expected strategy '{strategy}' is used to capture the exported "
                             f"program, but got '{used}'.")
    from onnxport.verify.inputs import example_inputs

    args, kwargs = example_inputs(program, args, kwargs)
    with torch.no_grad():
        expected_tree = program.exported_program.module()(*args, **kwargs)
    expected = []
    for leaf in torch.utils._pytree.tree_leaves(expected_tree):
        if leaf is None:
            continue  # ONNX graphs have no None outputs
        if not isinstance(leaf, torch.Tensor):
            leaf = torch.tensor(leaf)
        expected.append(torch.view_as_real(leaf) if leaf.is_complex() else leaf)
    if backend == "onnxruntime":
        actual = program(*args, **kwargs)
    elif backend == "reference":
        actual = program.call_reference(*args, **kwargs)
    else:
        raise ValueError(f"Unsupported backend '{backend}'. Supported backends are "
                         "'onnxruntime' and 'reference'.")
    names = [str(v.name) for v in program.model.graph.outputs]
    try:
        torch.testing.assert_close(tuple(actual), tuple(expected), rtol=rtol, atol=atol,
                                   equal_nan=True, check_device=False)
    except AssertionError as error:
        raise AssertionError(f"{error}\n(outputs: {', '.join(names)})"
                             f"{_first_wrong_node(program, args, kwargs, backend)}") from None


def _first_wrong_node(program: Any, args: Any, kwargs: Any, backend: str) -> str:
    if backend != "onnxruntime":
        return ""
    from onnxport.verify.localize import find_first_divergence

    try:
        report = find_first_divergence(program, args, kwargs)
    except Exception as e:  # noqa: BLE001  (the assertion stays the error reported)
        return f"\n(finding the first wrong node failed: {type(e).__name__}: {e})"
    return "\n" + str(report)
