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

__all__ = ["USE_CACHE_BRANCH", "merge_decoders", "self_attention_cache"]

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


def _rename_values(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename values in `graph` (node inputs and outputs, nested subgraphs' references,
    graph inputs and outputs) by `names`."""
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs):
                _rename_values(sub, names)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        vi.name = names.get(vi.name, vi.name)


def self_attention_cache(no_past: onnx.ModelProto, with_past: onnx.ModelProto) -> None:
    """Change the two decoders of an encoder-decoder to the cache of a decoder-only model:
    `past_key_values.{i}.key/value` in, `present.{i}.key/value` out (the self-attention's),
    with the cross-attention's keys and values computed from `encoder_hidden_states` at every
    step instead of carried in the cache.

    transformers.js runs a vision encoder-decoder whose decoder is a decoder-only type (GPT-2:
    its normalized config has no decoder layers) with that cache. The nodes of the decoder
    without past that compute its `present.{i}.encoder.*` (the cross-attention projections
    of `encoder_hidden_states`) are copied into the decoder with past, in place of its
    `past_key_values.{i}.encoder.*` inputs. Both models are changed in place."""
    g0, g1 = no_past.graph, with_past.graph
    cross = [o.name for o in g0.output if ".encoder." in o.name]
    producer = {out: node for node in g0.node for out in node.output if out}
    inits0 = {i.name: i for i in g0.initializer}
    cone, seen, stack = [], set(), [producer[n] for n in cross]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        cone.append(node)
        refs = list(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs):
                refs += [n for sn in sub.node for n in sn.input]
        stack += [producer[n] for n in refs if n in producer]
    order = {id(n): i for i, n in enumerate(g0.node)}
    cone.sort(key=lambda n: order[id(n)])
    produced = {o for n in cone for o in n.output}
    graph_inputs = {i.name for i in g0.input}
    needed = {n for node in cone for n in node.input if n and n not in produced}
    outer = needed & graph_inputs
    in1 = {i.name for i in g1.input}
    if not outer <= in1 or any(".encoder." in n or "past_key_values" in n for n in outer):
        raise ValueError(f"the cross-attention cache is computed from {sorted(outer)}, not "
                         f"from inputs of the decoder with past")
    inits1 = {i.name: i for i in g1.initializer}
    rename = {o: f"cross_kv/{o}" for o in produced}
    for n in cross:  # the copied nodes give the with-past graph's cross-attention inputs
        rename[n] = n.replace("present.", "past_key_values.", 1)
    for name in sorted(needed - graph_inputs):
        init = inits0.get(name)
        if init is None:
            raise ValueError(f"the cross-attention cache reads {name!r}, neither an input nor "
                             f"a weight of the decoder without past")
        if name in inits1 and not _same(inits1[name], init):
            rename[name] = f"cross_kv/{name}"
        if rename.get(name, name) not in inits1:
            copy = onnx.TensorProto()
            copy.CopyFrom(init)
            copy.name = rename.get(name, name)
            g1.initializer.append(copy)
    copied = []
    for node in cone:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = f"cross_kv/{node.name}" if node.name else ""
        new.input[:] = [rename.get(n, n) for n in new.input]
        new.output[:] = [rename.get(n, n) for n in new.output]
        copied.append(new)
    encoder_past = {n.replace("present.", "past_key_values.", 1) for n in cross}
    kept_inputs = [i for i in g1.input if i.name not in encoder_past]
    del g1.input[:]
    g1.input.extend(kept_inputs)
    nodes = copied + list(g1.node)
    del g1.node[:]
    g1.node.extend(nodes)
    kept_outputs = [o for o in g0.output if o.name not in set(cross)]
    del g0.output[:]
    g0.output.extend(kept_outputs)
    names = {}
    for g in (g0, g1):
        for vi in [*g.input, *g.output]:
            if ".decoder." in vi.name:
                names[vi.name] = vi.name.replace(".decoder.", ".", 1)
    _rename_values(g0, names)
    _rename_values(g1, names)
