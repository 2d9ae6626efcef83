"""The op library's registry: lookup by key, opset selection, signatures against schemas."""

from __future__ import annotations

import inspect
import keyword
import operator
from typing import Any

import pytest
import torch

from onnxport.translate import Registry, aten, default_registry
from onnxport.translate.registry import target_name


def test_lookup_by_overload_key() -> None:
    registry = default_registry()
    assert registry.lookup(aten.addmm.default, 18) is not None
    assert registry.lookup(operator.getitem, 18) is not None
    assert registry.lookup(aten.addmm.out, 18) is None


def test_lookup_picks_newest_at_or_below_opset() -> None:
    registry = Registry()

    def old(g: Any) -> None: ...
    def new(g: Any) -> None: ...

    registry.register(aten.relu.default)(old)
    registry.register(aten.relu.default, since_opset=20)(new)
    assert registry.lookup(aten.relu.default, 18).function is old  # type: ignore[union-attr]
    assert registry.lookup(aten.relu.default, 20).function is new  # type: ignore[union-attr]
    assert registry.lookup(aten.relu.default, 23).function is new  # type: ignore[union-attr]


def test_later_registration_wins_and_copy_is_independent() -> None:
    base = default_registry()
    copy = base.copy()

    def mine(g: Any, self: Any) -> Any:
        return self

    copy.register(aten.relu.default)(mine)
    assert copy.lookup(aten.relu.default, 18).function is mine  # type: ignore[union-attr]
    assert base.lookup(aten.relu.default, 18).function is not mine  # type: ignore[union-attr]


def _overload_targets() -> list[Any]:
    return [t for t in default_registry().targets() if isinstance(t, torch._ops.OpOverload)]


@pytest.mark.parametrize("target", _overload_targets(), ids=target_name)
def test_translation_signature_binds_schema(target: torch._ops.OpOverload) -> None:
    """Every schema argument binds: positional ones by position, keyword-only ones by name."""
    for translation in default_registry().all_for(target):
        fn = inspect.unwrap(translation.function)
        sig = inspect.signature(fn)
        schema = target._schema
        kw_only = {p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
        positional = [a for a in schema.arguments if not a.kwarg_only and a.name not in kw_only]
        keywords = {a.name: None for a in schema.arguments if a.kwarg_only or a.name in kw_only}
        try:
            sig.bind(None, *([None] * len(positional)), **keywords)
        except TypeError as e:
            pytest.fail(f"{translation.location} cannot take the arguments of {schema}: {e}")
        params = list(sig.parameters.values())[1:]
        named = [p.name for p in params if p.kind is not p.VAR_POSITIONAL][:len(positional)]
        # A schema argument named after a Python keyword (uniform's `from`) or after the builder
        # (_weight_norm's `g`) is spelled with a trailing underscore.
        named = [n[:-1] if n.endswith("_") and (keyword.iskeyword(n[:-1]) or n == "g_") else n
                 for n in named]
        is_single = len([t for t in default_registry().targets()
                         if any(tr.function is translation.function
                                for tr in default_registry().all_for(t))]) == 1
        if is_single and named and named != [a.name for a in positional][:len(named)]:
            pytest.fail(f"{translation.location}: parameters {named} differ from the schema's "
                        f"{[a.name for a in positional]}")


def test_every_emitted_onnx_op_exists_at_its_opset() -> None:
    """The ONNX op types a translation names exist in the default domain at its since_opset."""
    import onnx

    from tests.ops.op_db import emitted_ops

    problems = []
    registry = default_registry()
    for target in registry.targets():
        for translation in registry.all_for(target):
            opset = max(18, translation.since_opset)
            for op_type in emitted_ops(translation.function):
                if "::" in op_type:
                    continue
                try:
                    onnx.defs.get_schema(op_type, opset, "")
                except onnx.defs.SchemaError:
                    problems.append(f"{translation.location}: {op_type} not in opset {opset}")
    assert not problems, "\n".join(sorted(set(problems)))
