"""onnxport.InputObserver: observe real calls, infer export arguments and dynamic shapes.

Each observation is also made with torch.onnx.InputObserver (torch 2.13), on the same calls,
and the inferred arguments and dynamic shapes must be the same. The exported models run in
ONNX Runtime and are compared with eager PyTorch at the default tolerances.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import onnxport
from onnxport.input_observer import InputObserverError

DYNAMIC = torch.export.Dim.DYNAMIC


def assert_same_arguments(ours: Any, theirs: Any) -> None:
    """Same pytree structure (types, keys, cache layout), equal tensors and constants."""
    ours_leaves, ours_spec = pytree.tree_flatten(ours)
    theirs_leaves, theirs_spec = pytree.tree_flatten(theirs)
    assert ours_spec == theirs_spec
    for a, b in zip(ours_leaves, theirs_leaves, strict=True):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor) and a.dtype == b.dtype
            assert a.shape == b.shape and torch.equal(a, b)
        else:
            assert a == b


def tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


# -- a small MLP called with batch 2, 3, 5 ---------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_mlp_batches_export_and_match_torch_onnx() -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    inputs = [torch.randn(b, 4) for b in (2, 3, 5)]
    ours, theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with ours(model), theirs(model):
        for x in inputs:
            model(x)
    assert "forward" not in vars(model)  # the method is restored
    assert ours.num_obs() == theirs.num_obs() == 3

    args = ours.infer_arguments()
    dynamic_shapes = ours.infer_dynamic_shapes()
    assert isinstance(args, tuple) and torch.equal(args[0], inputs[0])
    assert dynamic_shapes == ({0: DYNAMIC},)
    assert_same_arguments(args, theirs.infer_arguments())
    assert dynamic_shapes == theirs.infer_dynamic_shapes()
    for index in range(3):
        assert_same_arguments(ours.infer_arguments(index), theirs.infer_arguments(index))
    assert_same_arguments(ours.infer_arguments(flat=True), theirs.infer_arguments(flat=True))
    assert_same_arguments(ours.infer_arguments(as_args_kwargs=True),
                          theirs.infer_arguments(as_args_kwargs=True))

    program = onnxport.export(model, args, dynamic_shapes=dynamic_shapes)
    assert program.model.graph.inputs[0].shape[1] == 4
    assert not isinstance(program.model.graph.inputs[0].shape[0], int)  # dynamic batch
    with torch.no_grad():
        for x in [*inputs, torch.randn(7, 4)]:
            torch.testing.assert_close(program(x)[0], model(x))
    rows = ours.check_discrepancies(program)
    assert [r["SUCCESS"] for r in rows] == [True, True, True]
    assert [r["index"] for r in rows] == [0, 1, 2]


def test_set_batch_dimension_for_matches_torch_onnx() -> None:
    model = MLP().eval()
    ours, theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with ours(model), theirs(model):
        model(torch.randn(2, 4))
        model(torch.randn(2, 4))
    assert ours.infer_dynamic_shapes() == theirs.infer_dynamic_shapes() == ({},)
    for batch_for in (True, {0}, {"x"}):
        assert ours.infer_dynamic_shapes(batch_for) == ({0: DYNAMIC},)
        assert ours.infer_dynamic_shapes(batch_for) == theirs.infer_dynamic_shapes(batch_for)


def test_store_n_calls() -> None:
    model = MLP().eval()
    ours = onnxport.InputObserver()
    with ours(model, store_n_calls=2):
        for b in (2, 3, 5):
            model(torch.randn(b, 4))
    assert ours.num_obs() == 2
    assert ours.infer_dynamic_shapes() == ({0: DYNAMIC},)


# -- optional inputs missing in some calls -----------------------------------------------------


class WithOptional(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        out = self.linear(x)
        if y is not None:
            out = out + y.sum(dim=0, keepdim=True)
        return out


def test_optional_input_missing_in_a_call() -> None:
    torch.manual_seed(0)
    model = WithOptional().eval()
    calls = [(torch.randn(2, 4), None), (torch.randn(3, 4), torch.randn(4, 4)),
             (torch.randn(5, 4), torch.randn(6, 4))]
    ours, theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with ours(model), theirs(model):
        for x, y in calls:
            model(x) if y is None else model(x, y=y)

    # The first call with every input is the one to export with; both inputs vary.
    kwargs = ours.infer_arguments()
    dynamic_shapes = ours.infer_dynamic_shapes()
    assert list(kwargs) == ["x", "y"] and torch.equal(kwargs["x"], calls[1][0])
    assert dynamic_shapes == {"x": {0: DYNAMIC}, "y": {0: DYNAMIC}}
    assert_same_arguments(kwargs, theirs.infer_arguments())
    assert dynamic_shapes == theirs.infer_dynamic_shapes()
    # The call without y gets an empty y, its dynamic dimension set to 0.
    first = ours.infer_arguments(0)
    assert first["y"].shape == (0, 4)
    assert_same_arguments(first, theirs.infer_arguments(0))
    # Inputs given by the user are completed the same way.
    given = ours.infer_arguments((calls[0][0],))
    assert_same_arguments(given, first)
    assert_same_arguments(given, theirs.infer_arguments((calls[0][0],)))
    # By name too (torch.onnx 2.13 drops x here, as the reference call passes it by position).
    assert_same_arguments(ours.infer_arguments({"x": calls[0][0]}), first)

    program = onnxport.export(model, (), kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    with torch.no_grad():
        for index, (x, y) in enumerate(calls):
            feeds = ours.infer_arguments(index)
            torch.testing.assert_close(program(**feeds)[0], model(x, y))
    assert all(r["SUCCESS"] for r in ours.check_discrepancies(program))


def test_value_if_missing_matches_torch_onnx() -> None:
    model = WithOptional().eval()
    missing = {"y": torch.empty(0, 4)}
    ours = onnxport.InputObserver(value_if_missing=missing)
    theirs = torch.onnx.InputObserver(value_if_missing=missing)
    with ours(model), theirs(model):
        model(torch.randn(2, 4), y=torch.randn(3, 4))  # y only in the first call
        model(torch.randn(3, 4))
        model(torch.randn(4, 4))
    assert_same_arguments(ours.infer_arguments(), theirs.infer_arguments())
    assert ours.infer_dynamic_shapes() == theirs.infer_dynamic_shapes() == {
        "x": {0: DYNAMIC}, "y": {0: DYNAMIC}}
    for index in range(3):
        assert_same_arguments(ours.infer_arguments(index), theirs.infer_arguments(index))


# -- errors the user can cause ----------------------------------------------------------------


def test_nothing_observed_is_a_runtime_error() -> None:
    for observer in (onnxport.InputObserver(), torch.onnx.InputObserver()):
        with pytest.raises(RuntimeError):
            observer.infer_arguments()
        with pytest.raises(RuntimeError):
            observer.infer_dynamic_shapes()
        with observer(MLP()):
            pass  # entered, but the model never ran
        with pytest.raises(RuntimeError):
            observer.infer_arguments()
    with pytest.raises(InputObserverError, match="No inputs were captured: no call was observed"):
        onnxport.InputObserver().infer_dynamic_shapes()
    assert issubclass(InputObserverError, onnxport.OnnxExporterError)
    with pytest.raises(ValueError, match="no method 'generate'"):
        with onnxport.InputObserver()(MLP(), method_name="generate"):
            pass


class WithConstant(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale


def test_different_constants_are_refused_like_torch_onnx() -> None:
    model = WithConstant()
    ours, theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with ours(model), theirs(model):
        model(torch.randn(2, 3), scale=2.0)
        model(torch.randn(3, 3), scale=3.0)
    with pytest.raises(RuntimeError, match="different constant"):
        theirs.infer_arguments()
    with pytest.raises(InputObserverError, match="different constant"):
        ours.infer_arguments()


def test_unflattenable_argument_is_named() -> None:
    class Box:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, box: Box) -> torch.Tensor:
            return x + box.t

    model = Model()
    ours = onnxport.InputObserver()
    with ours(model):
        model(torch.randn(2, 3), Box(torch.randn(3)))
    with pytest.raises(InputObserverError, match=r"argument '1' holds Box.*pytree"):
        ours.infer_arguments()


# -- a tiny Llama observed during generate ----------------------------------------------------


@pytest.fixture(scope="module")
def dynamic_cache_is_a_pytree() -> Iterator[None]:
    """transformers' own registration of DynamicCache as a pytree node (undone afterwards)."""
    from transformers import DynamicCache
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    added = DynamicCache not in pytree.SUPPORTED_NODES
    register_dynamic_cache_export_support()
    yield
    if added:
        pytree._deregister_pytree_node(DynamicCache)
        import torch.fx._pytree as fx_pytree

        fx_pytree.SUPPORTED_NODES.pop(DynamicCache, None)
        fx_pytree.SUPPORTED_NODES_EXACT_MATCH.pop(DynamicCache, None)


def _llama() -> Any:
    import transformers

    torch.manual_seed(0)
    # Eager attention: with sdpa, transformers computes `is_causal = q_length > 1 and ...`,
    # a SymBool at the decode step torch.export is given, which torch.export (for onnxport
    # and torch.onnx alike) cannot pass to scaled_dot_product_attention.
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=99, attn_implementation="eager")
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def observed_llama(dynamic_cache_is_a_pytree: None) -> tuple[Any, Any, Any]:
    model = _llama()
    input_ids = torch.randint(3, 99, (2, 5))
    ours, theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with ours(model), theirs(model):
        model.generate(input_ids, max_new_tokens=3, do_sample=False)
    return model, ours, theirs


def test_llama_generate_arguments_and_shapes(observed_llama: tuple[Any, Any, Any]) -> None:
    model, ours, theirs = observed_llama
    assert ours.num_obs() == theirs.num_obs() == 3
    kwargs = ours.infer_arguments()
    dynamic_shapes = ours.infer_dynamic_shapes()
    # The first decode step: the prefill holds no cache tensor yet.
    assert list(kwargs) == ["input_ids", "position_ids", "cache", "logits_to_keep"]
    assert type(kwargs["cache"]).__name__ == "DynamicCache"
    assert [tuple(t.shape) for t in tensors(kwargs)] == [(2, 1), (2, 1)] + [(2, 2, 5, 8)] * 4
    assert kwargs["logits_to_keep"] == 1
    cache_spec = {2: DYNAMIC}
    assert dynamic_shapes == {"input_ids": {1: DYNAMIC}, "position_ids": {1: DYNAMIC},
                              "cache": [[cache_spec, cache_spec], [cache_spec, cache_spec]],
                              "logits_to_keep": None}
    # The prefill, completed with empty cache tensors (past length 0).
    prefill = ours.infer_arguments(0)
    assert [tuple(t.shape) for t in tensors(prefill)] == [(2, 5), (2, 5)] + [(2, 2, 0, 8)] * 4

    # torch.onnx 2.13 refuses this observation: transformers 5 passes the prefill an empty
    # DynamicCache (0 tensors), the later steps one with 4 tensors.
    with pytest.raises(RuntimeError, match="has 4 tensors but previously got 0 tensors"):
        theirs.infer_arguments()

    # The same calls with the prefill's empty cache given as None (as transformers 4 did):
    # torch.onnx accepts them, and both observers infer the same as from generate.
    replay_ours, replay_theirs = onnxport.InputObserver(), torch.onnx.InputObserver()
    with replay_ours(model), replay_theirs(model), torch.no_grad():
        for index in range(3):
            call = ours.infer_arguments(index)
            if index == 0:
                call["cache"] = None
            model(**call)
    for replay in (replay_ours, replay_theirs):
        assert_same_arguments(replay.infer_arguments(), kwargs)
        assert replay.infer_dynamic_shapes() == dynamic_shapes
    for index in (1, 2):
        assert_same_arguments(replay_theirs.infer_arguments(index), ours.infer_arguments(index))
    # torch.onnx completes the missing cache of the prefill the same way.
    assert_same_arguments(replay_theirs.infer_arguments(0), prefill)


def test_llama_export_runs_other_steps_in_ort(observed_llama: tuple[Any, Any, Any]) -> None:
    model, ours, _ = observed_llama
    program = onnxport.export(model, (), kwargs=ours.infer_arguments(),
                              dynamic_shapes=ours.infer_dynamic_shapes())
    input_shapes = {v.name: [d if isinstance(d, int) else "dyn" for d in v.shape]
                    for v in program.model.graph.inputs}
    assert input_shapes["input_ids"] == [2, "dyn"]
    assert all(s == [2, 2, "dyn", 8] for n, s in input_shapes.items() if n.startswith("cache"))
    # Steps other than the exported one: the prefill (sequence 5, empty cache) and the
    # second decode step (sequence 1, past 6).
    for index in (0, 2):
        got = program(**ours.infer_arguments(index))
        with torch.no_grad():
            expected = tensors(model(**ours.infer_arguments(index)))
        assert len(got) == len(expected) == 5
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e)
    rows = ours.check_discrepancies(program)
    assert [r["SUCCESS"] for r in rows] == [True, True, True]
    assert [r["n_empty"] for r in rows] == [4, 0, 0]
