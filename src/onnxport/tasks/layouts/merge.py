"""One encoder-decoder decoder graph with and without its cache: `decoder_model_merged.onnx`.

transformers.js (and optimum's merged form) runs the first decoder step and the later ones
through one file: an `If` on the boolean input `use_cache_branch` whose `then` branch is the
graph with the past (`decoder_with_past_model.onnx`) and whose `else` branch is the graph
without it (`decoder_model.onnx`). The merged graph takes the inputs of the graph with the
past plus `use_cache_branch` (bool [1]) and gives the outputs of the graph without it: the
cross-attention `present.*.encoder.*` of the cached branch are its past inputs passed through
(the caller keeps the first step's, transformers.js's `getPastKeyValues` does).

Weights the two graphs share (same name, same values) are stored once in the outer graph;
the others stay in their branch, and every other name of a branch gets the branch's prefix,
so the two never collide.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["USE_CACHE_BRANCH", "merge_decoders"]

USE_CACHE_BRANCH = "use_cache_branch"


def _same(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    if a.data_type != b.data_type or list(a.dims) != list(b.dims):
        return False
    return np.array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))


def _rename_graph(graph: onnx.GraphProto, prefix: str, keep: set[str]) -> dict[str, str]:
    """Prefix every value name produced in `graph` (node outputs, initializers not in `keep`)
    and node names; references inside nested subgraphs follow. Returns the renaming."""
    names: dict[str, str] = {}
    for init in graph.initializer:
        if init.name not in keep:
            names[init.name] = prefix + init.name
    for node in graph.node:
        for out in node.output:
            if out:
                names[out] = prefix + out

    def apply(g: onnx.GraphProto, top: bool) -> None:
        for node in g.node:
            if top and node.name:
                node.name = prefix + node.name
            node.input[:] = [names.get(n, n) for n in node.input]
            if top:
                node.output[:] = [names.get(n, n) for n in node.output]
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    apply(attr.g, False)
                for sub in attr.graphs:
                    apply(sub, False)
        if top:
            for init in g.initializer:
                init.name = names.get(init.name, init.name)
            for vi in g.value_info:
                vi.name = names.get(vi.name, vi.name)
            for out in g.output:
                out.name = names.get(out.name, out.name)

    apply(graph, True)
    return names


def _toposort(graph: onnx.GraphProto) -> None:
    """Order `graph`'s nodes so each follows the producers of its inputs (ONNX Runtime
    checks it in subgraphs; ONNX Runtime's float16 converter appends its input Casts)."""
    produced = {out: i for i, node in enumerate(graph.node) for out in node.output if out}

    def needs(node: onnx.NodeProto) -> set[str]:
        names = set(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs):
                names |= {n for sn in sub.node for n in sn.input}
        return {n for n in names if n in produced}

    order: list[int] = []
    state: dict[int, int] = {}
    for start in range(len(graph.node)):
        stack = [(start, False)]
        while stack:
            i, done = stack.pop()
            if done:
                state[i] = 2
                order.append(i)
                continue
            if state.get(i):
                continue
            state[i] = 1
            stack.append((i, True))
            stack += [(produced[n], False) for n in needs(graph.node[i])
                      if not state.get(produced[n])]
    nodes = [graph.node[i] for i in order]
    del graph.node[:]
    graph.node.extend(nodes)


def _output_type(a: onnx.ValueInfoProto, b: onnx.ValueInfoProto | None) -> onnx.TypeProto:
    """The If output's type: `a`'s, with dims the two branches disagree on left unnamed."""
    t = onnx.TypeProto()
    t.CopyFrom(a.type)
    if b is None:
        return t
    da, db = a.type.tensor_type.shape.dim, b.type.tensor_type.shape.dim
    for x, y in zip(da, db):
        if x.SerializeToString() != y.SerializeToString():
            x.Clear()
    return t


def merge_decoders(no_past: onnx.ModelProto, with_past: onnx.ModelProto) -> onnx.ModelProto:
    """The merged decoder of an encoder-decoder (see the module notes). Both models are
    changed (their graphs become the branches)."""
    g0, g1 = no_past.graph, with_past.graph
    inits0 = {i.name: i for i in g0.initializer}
    shared = {i.name for i in g1.initializer if i.name in inits0 and _same(inits0[i.name], i)}
    outer_inputs = list(g1.input)
    for vi in outer_inputs:
        # The first step feeds an empty cache (length 0), also where the cached decoder
        # fixes the encoder's length (Whisper's audio frames): the length is left free.
        dims = vi.type.tensor_type.shape.dim
        if vi.name.startswith("past_key_values.") and len(dims) == 4 and dims[2].HasField(
                "dim_value"):
            dims[2].dim_param = ("encoder_sequence_length" if ".encoder." in vi.name
                                 else "past_sequence_length")
    in1 = {i.name for i in g1.input}
    missing = [i.name for i in g0.input if i.name not in in1]
    if missing:
        raise ValueError(f"the decoder without past takes inputs the one with past lacks: "
                         f"{missing}")
    out0 = {o.name: o for o in g0.output}
    out1 = {o.name: o for o in g1.output}
    outputs = [o.name for o in g0.output]
    extra = [n for n in out1 if n not in out0]
    if extra:
        raise ValueError(f"the decoder with past has outputs the one without lacks: {extra}")

    # Cross-attention presents of the cached branch: its past inputs as they are.
    passthrough = []
    for name in outputs:
        if name not in out1:
            past = name.replace("present.", "past_key_values.", 1)
            if past not in in1:
                raise ValueError(f"no input {past!r} of the decoder with past gives {name!r}")
            passthrough.append(helper.make_node("Identity", [past], [name],
                                                name=f"passthrough_{name}"))
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(out0[name])
            g1.output.append(vi)
    g1.node.extend(passthrough)
    # The cached branch's outputs in the order of the uncached one's.
    by_name = {o.name: o for o in g1.output}
    ordered = [by_name[n] for n in outputs]
    del g1.output[:]
    g1.output.extend(ordered)

    outer_inits = [i for i in g1.initializer if i.name in shared]
    _toposort(g0)
    _toposort(g1)
    _rename_graph(g0, "no_past/", shared)
    _rename_graph(g1, "with_past/", shared)
    for g in (g0, g1):
        # A branch's own weights stay in the branch: ONNX Runtime's weight rewrites
        # (DequantizeLinear -> MatMulNBits) look for them in the subgraph.
        own = [i for i in g.initializer if i.name not in shared]
        del g.initializer[:]
        g.initializer.extend(own)
        del g.input[:]
        del g.sparse_initializer[:]

    cond = helper.make_tensor_value_info(USE_CACHE_BRANCH, onnx.TensorProto.BOOL, [1])
    node = helper.make_node("If", [USE_CACHE_BRANCH], outputs, name="optimum::if",
                            then_branch=g1, else_branch=g0)
    merged_outputs = []
    for name, a, b in zip(outputs, g0.output, g1.output):
        vi = onnx.ValueInfoProto()
        vi.name = name
        vi.type.CopyFrom(_output_type(a, b))
        merged_outputs.append(vi)
    graph = helper.make_graph([node], "decoder_model_merged", [*outer_inputs, cond],
                              merged_outputs, initializer=outer_inits)
    opsets: dict[str, int] = {}
    for m in (no_past, with_past):
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in opsets.items()])
    model.ir_version = max(no_past.ir_version, with_past.ir_version)
    model.producer_name = with_past.producer_name
    model.producer_version = with_past.producer_version
    functions = {(f.domain, f.name, getattr(f, "overload", "")): f
                 for m in (no_past, with_past) for f in m.functions}
    model.functions.extend(functions.values())
    return model
