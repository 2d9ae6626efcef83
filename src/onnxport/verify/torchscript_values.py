"""The TorchScript flavour's values for `find_first_divergence(model, args, dynamo=False)`.

The model is traced at the inputs given and translated as `export(dynamo=False)` translates
it (same translator, registry, user symbolic functions and passes), after one change: each
traced value an ATen node computes is given a unique debug name (`ts<id>`), which the
translator gives the ONNX value it becomes (it names values after their traced names). The
traced graph is run node by node in PyTorch (the interpreter `find_mismatch` uses), and its
values are compared with the ONNX values of those names. Node names, module paths
(`pkg.onnxport.module`) and source lines (`pkg.onnxport.source`) are the export's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from onnxport.verify.inputs import flatten_outputs
from onnxport.verify.intermediates import Compared, _Item

if TYPE_CHECKING:
    from onnxport.capture.torchscript import ScriptCaptured

_SKIPPED = ("prim::", "onnx::")


def _name(value: torch._C.Value) -> str:
    return f"ts{value.unique()}"


class TorchScriptCase:
    """A traced model, its translation, and its recorded values."""

    def __init__(self, model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, *,
                 opset_version: int | None = None, do_constant_folding: bool = True,
                 registry: Any = None, input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None) -> None:
        from onnxport._state import _as_registry, _exporting
        from onnxport._torchscript_api import DEFAULT_TORCHSCRIPT_OPSET, _run_passes
        from onnxport.capture.torchscript import capture_torchscript
        from onnxport.passes.convert_opset import LIBRARY_OPSET
        from onnxport.program import ONNXProgram
        from onnxport.translate.torchscript import translate_script

        if isinstance(args, torch.Tensor):
            args = (args,)
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        target_opset = opset_version or DEFAULT_TORCHSCRIPT_OPSET
        opset = max(target_opset, LIBRARY_OPSET)
        with _exporting():
            captured = capture_torchscript(model, self.args, self.kwargs)
            self.values = Interpreter(captured).values
            self.nodes = [n for n in captured.graph.nodes()
                          if not n.kind().startswith(_SKIPPED)]
            self.traced_names: dict[str, str] = {}
            for node in self.nodes:
                for out in node.outputs():
                    self.traced_names[_name(out)] = out.debugName()
                    out.setDebugName(_name(out))
            self.outputs = [self.values[v.unique()] for v in captured.graph.outputs()]
            onnx_model = translate_script(captured, _as_registry(registry), opset,
                                          input_names=input_names, output_names=output_names,
                                          symbolic_opset=target_opset)
            onnx_model = _run_passes(onnx_model, opset, target_opset, fold=do_constant_folding)
        self.program = ONNXProgram(onnx_model, None)
        self.program.capture_strategy = captured.strategy
        self.kinds = {v.debugName(): "graph input or weight (exact)"
                      for v in captured.graph.inputs()}
        self._dynamic = self._depends_on_inputs(captured)

    def _depends_on_inputs(self, captured: Any) -> set[int]:
        inputs = list(captured.graph.inputs())
        if captured.module is not None:
            inputs = inputs[1:]   # `self`: weights are read through it
        dynamic = {v.unique() for v in inputs}
        for node in captured.graph.nodes():
            if any(v.unique() in dynamic for v in node.inputs()):
                dynamic.update(v.unique() for v in node.outputs())
        return dynamic

    def items(self, wanted: set[str] | None = None) -> Any:
        order = 0
        for node in self.nodes:
            inputs = tuple(_name(v) if v.node() in self._node_set else v.debugName()
                           for v in node.inputs()
                           if isinstance(self.values.get(v.unique()), torch.Tensor))
            for out in node.outputs():
                value = self.values.get(out.unique())
                if not isinstance(value, torch.Tensor):
                    continue
                order += 1
                name = _name(out)
                if wanted is None or name in wanted:
                    yield _Item(name, name, value, node, inputs,
                                out.unique() not in self._dynamic, order)

    @property
    def _node_set(self) -> set[Any]:
        if not hasattr(self, "_nodes_cache"):
            self._nodes_cache = set(self.nodes)
        return self._nodes_cache

    def shown(self, name: str) -> str:
        return f"%{self.traced_names.get(name, name)}"

    def expected_outputs(self) -> list[torch.Tensor]:
        return flatten_outputs(self.outputs)

    def describe(self, c: Compared) -> tuple[str, str, tuple[str, ...], str, str]:
        from onnxport.translate.ts_graph import _scope_path, _source

        node = c.key
        producers = [n for n in self.program.model.graph
                     if any(o.name == c.info.name for o in n.outputs)]
        module, source = _scope_path(node)[0], _source(node)
        for n in producers:
            module = n.metadata_props.get("pkg.onnxport.module", module)
            source = n.metadata_props.get("pkg.onnxport.source", source)
        nodes = tuple(f"{n.name or '?'} ({n.op_type})" for n in producers)
        return self.shown(c.info.name), node.kind(), nodes, module, source


class Interpreter:
    """Runs a traced TorchScript graph op by op, recording every value by its unique id."""

    def __init__(self, captured: ScriptCaptured) -> None:
        self.values: dict[int, Any] = {}
        inputs = list(captured.graph.inputs())
        if captured.module is not None:
            self.values[inputs[0].unique()] = captured.module
            inputs = inputs[1:]
        for value, example in zip(inputs, captured.example_inputs):
            self.values[value.unique()] = example
        with torch.no_grad():
            for node in captured.graph.nodes():
                self._node(node)

    def _node(self, node: torch._C.Node) -> None:
        kind = node.kind()
        args = [self.values[v.unique()] for v in node.inputs()]
        outs = list(node.outputs())
        if kind == "prim::Constant":
            results = [outs[0].toIValue()]
        elif kind == "prim::GetAttr":
            results = [getattr(args[0], node.s("name"))]
        elif kind == "prim::ListConstruct":
            results = [list(args)]
        elif kind == "prim::TupleConstruct":
            results = [tuple(args)]
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            results = list(args[0])
        elif kind == "prim::PythonOp":
            fn = node.pyobj()
            tensors = iter(args)
            scalars = iter(node.scalar_args())
            result = fn(*[next(tensors) if c == "d" else next(scalars) for c in node.cconv()])
            results = list(result) if isinstance(result, (tuple, list)) and len(outs) > 1 \
                else [result]
        else:
            from onnxport.translate.ts_graph import _node_overload

            overload = _node_overload(node)
            if overload is None:
                raise NotImplementedError(f"find_mismatch cannot run {kind} (a traced graph "
                                          "without control flow is needed)")
            positional, keywords = [], {}
            for arg, value in zip(overload._schema.arguments, args):
                if arg.kwarg_only:
                    keywords[arg.name] = value
                else:
                    positional.append(value)
            result = overload(*positional, **keywords)
            results = list(result) if len(outs) > 1 else [result]
        for out, res in zip(outs, results):
            self.values[out.unique()] = res


def torchscript_case(model: Any, args: Any, kwargs: Any, **options: Any) -> TorchScriptCase:
    """The TorchScript flavour's case for `find_first_divergence(..., dynamo=False)`."""
    if args is None:
        raise TypeError("find_first_divergence(model, args, dynamo=False) needs the inputs")
    from onnxport.program import ONNXProgram

    if isinstance(model, ONNXProgram):
        raise TypeError("find_first_divergence(..., dynamo=False) takes the model, not its "
                        "ONNXProgram: the model is traced and translated again, so that its "
                        "traced values can be named")
    if not isinstance(model, torch.nn.Module) and not callable(model):
        raise TypeError(f"find_first_divergence(dynamo=False) takes the model (an nn.Module or "
                        f"function), got {type(model).__name__}")
    return TorchScriptCase(model, args, kwargs, **options)
