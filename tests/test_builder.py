"""GraphBuilder: legacy attribute suffixes, domains, constants and build-time folding."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from onnxport.translate import GraphBuilder


def _builder() -> tuple[GraphBuilder, ir.Value]:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 18})
    return GraphBuilder(graph, 18), x


def test_legacy_attribute_suffixes() -> None:
    g, x = _builder()
    y = g.op("Elu", x, alpha_f=1.0)
    node = y.producer()
    assert node.attributes["alpha"].type == ir.AttributeType.FLOAT
    z = g.op("Foo", x, axes_i=[0, 1], name_s="n", value_t=torch.tensor([1.5]), scales_fs=[1.0],
             domain="custom")
    attrs = z.producer().attributes
    assert attrs["axes"].type == ir.AttributeType.INTS and list(attrs["axes"].value) == [0, 1]
    assert attrs["name"].value == "n"
    assert attrs["value"].type == ir.AttributeType.TENSOR
    assert attrs["scales"].type == ir.AttributeType.FLOATS
    assert "custom" in g.used_domains


def test_domain_qualified_op_and_multiple_outputs() -> None:
    g, x = _builder()
    a, b = g.op("com.microsoft::Foo", x, outputs=2)
    assert a.producer().domain == "com.microsoft" and a.producer() is b.producer()


def test_python_scalars_take_the_dtype_of_the_first_tensor() -> None:
    g, x = _builder()
    y = g.op("Add", x, 2)
    const = y.producer().inputs[1]
    assert const.dtype == ir.DataType.FLOAT


def test_shape_of_static_value_folds_to_a_constant() -> None:
    g, x = _builder()
    shape = g.op("Shape", x)
    assert shape.const_value is not None
    np.testing.assert_array_equal(shape.const_value.numpy(), [2, 3])
    prod = g.op("Mul", g.op("Gather", shape, g.const(0), axis=0), 4)
    assert prod.const_value is not None and int(prod.const_value.numpy()) == 8
    assert [n.op_type for n in g.graph] == ["Constant"] * len(list(g.graph))


def test_constants_are_shared() -> None:
    g, x = _builder()
    assert g.const(1.0) is g.const(1.0)
    assert g.const(1.0) is not g.const(1)
