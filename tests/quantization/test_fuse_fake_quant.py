"""FuseFakeQuantPass on hand-written fake-quantization graphs, one per pattern: it matches
(the test fails if it stops matching) and the fused graph equals the unfused one in ONNX
Runtime bit for bit (exact rewrites), or differs only at rounding ties by one step (the
multiplication-by-1/s form under `exact=False`).

Exactness: ONNX Runtime's QuantizeLinear computes `round_half_even(x / s) + zp`, saturated,
in float32 as the arithmetic does (checked here on values at ties); DequantizeLinear
`(q - zp) * s`; a constant weight's integers are computed by the pass with numpy's IEEE
float32 arithmetic, the same as the graph's.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnx_ir.passes.common as common
import pytest

from onnxport.passes.fuse_fake_quant import FuseFakeQuantPass
from tests.quantization import _helpers as h

RNG = np.random.default_rng(0)


def _model(body: str, inputs: str, outputs: str, opset: int = 18,
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    text = f'<ir_version: 10, opset_import: ["" : {opset}]>\ng ({inputs}) => ({outputs}) {{\n{body}\n}}'
    proto = onnx.parser.parse_model(text)
    for name, data in (inits or {}).items():
        proto.graph.initializer.append(onnx.numpy_helper.from_array(data, name))
    return proto


def _fuse(proto: onnx.ModelProto, exact: bool = True) -> tuple[onnx.ModelProto, bool]:
    """The pass on `proto` (shapes inferred first, as the translator records them), then dead
    code removal (the inverse scale the rewrite no longer reads)."""
    model = ir.from_proto(onnx.shape_inference.infer_shapes(proto, data_prop=True))
    modified = FuseFakeQuantPass(exact=exact)(model).modified
    common.RemoveUnusedNodesPass()(model)
    fused = ir.to_proto(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, modified


def _ops(proto: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in proto.graph.node if n.op_type != "Constant")


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = h.ort_session(proto)
    return session.run(None, feeds)[0]


def _ties(scale: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Random values, a quarter of them at or next to a rounding tie (k + 0.5) * scale."""
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    k = RNG.integers(-60, 60, shape)
    tie = ((k + 0.5) * scale).astype(np.float32)
    tie = np.where(RNG.random(shape) < 0.5, tie, np.nextafter(tie, np.float32(np.inf)))
    return np.where(RNG.random(shape) < 0.25, tie, x).astype(np.float32)


CONSTS = """
    s = Constant<value = float {0.05}>()
    z = Constant<value = float {3}>()
    lo = Constant<value = float {-128}>()
    hi = Constant<value = float {127}>()"""


def test_division_per_tensor_activation_exact() -> None:
    proto = _model(CONSTS + """
    d = Div(x, s)
    r = Round(d)
    a = Add(r, z)
    c = Clip(a, lo, hi)
    b = Sub(c, z)
    y = Mul(b, s)""", "float[8,64] x", "float[8,64] y")
    fused, modified = _fuse(proto)
    assert modified and _ops(fused) == {"QuantizeLinear": 1, "DequantizeLinear": 1}, _ops(fused)
    x = _ties(np.float32(0.05), (8, 64)) * 2  # some saturate at -128 / 127 too
    np.testing.assert_array_equal(_run(fused, {"x": x}), _run(proto, {"x": x}))


PER_TOKEN = """
    axes = Constant<value = int64[1] {-1}>()
    zero = Constant<value = float {0}>()
    range = Constant<value = float {255}>()
    eps = Constant<value = float {1e-9}>()
    lo = Constant<value = float {-128}>()
    hi = Constant<value = float {127}>()
    mn = ReduceMin<keepdims = 1>(x, axes)
    mx = ReduceMax<keepdims = 1>(x, axes)
    mn0 = Min(mn, zero)
    mx0 = Max(mx, zero)
    width = Sub(mx0, mn0)
    s0 = Div(width, range)
    s = Max(s0, eps)
    steps = Div(mn0, s)
    rs = Round(steps)
    zf = Sub(lo, rs)
    zc = Clip(zf, lo, hi)
    zi = Cast<to = 6>(zc)
    z = Cast<to = 1>(zi)"""


@pytest.mark.parametrize("opset,shape", [(18, (6, 64)), (18, (2, 3, 64)), (21, (2, 3, 64))],
                         ids=["per-axis-2d", "per-axis-3d", "blocked-21"])
def test_division_per_token_activation_exact(opset, shape) -> None:
    """Per-token scales and zero points computed in the graph (choose_qparams' arithmetic):
    QuantizeLinear per axis of the rows (opset 18) or blocked along the last axis (21)."""
    dims = ",".join(map(str, shape))
    proto = _model(PER_TOKEN + """
    d = Div(x, s)
    r = Round(d)
    a = Add(r, z)
    cmax = Max(a, lo)
    c = Min(cmax, hi)
    b = Sub(c, z)
    y = Mul(b, s)""", f"float[{dims}] x", f"float[{dims}] y", opset)
    fused, modified = _fuse(proto)
    ops = _ops(fused)
    assert modified and ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 1, ops
    assert ops["Round"] == 1, ops  # the zero point's
    q = next(n for n in fused.graph.node if n.op_type == "QuantizeLinear")
    attrs = {a.name: a.i for a in q.attribute}
    assert attrs == ({"axis": len(shape) - 1, "block_size": 64} if opset >= 21 else {"axis": 0})
    for _ in range(3):
        x = (RNG.standard_normal(shape) * 3).astype(np.float32)
        x[0, ...] = np.abs(x[0, ...])  # a row without negatives (zero point -128)
        np.testing.assert_array_equal(_run(fused, {"x": x}), _run(proto, {"x": x}))


INVERSE = CONSTS + """
    one = Constant<value = float {1}>()
    rc = Reciprocal(s)
    inv = Mul(rc, one)
    m = Mul(x, inv)
    r = Round(m)
    a = Add(r, z)
    c = Clip(a, lo, hi)
    b = Sub(c, z)
    y = Mul(b, s)"""


def test_inverse_activation_only_when_inexact_allowed() -> None:
    """torchao's x * (1.0 / s): left alone by exact=True; exact=False writes QDQ, equal to the
    arithmetic except where x * fl(1/s) and x / s round to different sides of a tie: there
    it differs by exactly one step (s), which is QuantizeLinear's x / s."""
    proto = _model(INVERSE, "float[16,64] x", "float[16,64] y")
    same, modified = _fuse(proto, exact=True)
    assert not modified and _ops(same) == _ops(proto)
    fused, modified = _fuse(proto, exact=False)
    assert modified and _ops(fused) == {"QuantizeLinear": 1, "DequantizeLinear": 1}, _ops(fused)
    s = np.float32(0.05)
    x = _ties(s, (16, 64))
    got, want = _run(fused, {"x": x}), _run(proto, {"x": x})
    diff = np.abs(got - want)
    assert diff.max() <= s * (1 + 1e-6)
    moved = diff > 0
    assert moved.any()  # the ties exist: the two forms really differ there
    by_division = (np.clip(np.rint(x / s) + 3, -128, 127) - 3) * s
    np.testing.assert_array_equal(got, by_division.astype(np.float32))


W = RNG.standard_normal((8, 64)).astype(np.float32)


@pytest.mark.parametrize("form", ["div-clip", "inverse-minmax"])
def test_weight_per_channel_int8(form) -> None:
    """A constant weight, per-output-channel scale and zero point: an INT8 initializer +
    DequantizeLinear(axis 0), equal to the arithmetic bit for bit."""
    scale = (np.abs(W).max(1, keepdims=True) / 120).astype(np.float32)
    zp = RNG.integers(-3, 3, (8, 1)).astype(np.float32)
    if form == "div-clip":
        quant = "d = Div(w, s)\n r = Round(d)\n a = Add(r, z)\n c = Clip(a, lo, hi)"
    else:
        quant = ("rc = Reciprocal(s)\n m = Mul(rc, w)\n r = Round(m)\n a = Add(z, r)\n"
                 " cmin = Min(a, hi)\n c = Max(cmin, lo)")
    proto = _model(f"""
    lo = Constant<value = float {{-128}}>()
    hi = Constant<value = float {{127}}>()
    {quant}
    b = Sub(c, z)
    wq = Mul(s, b)
    y = MatMul(x, wq)""", "float[4,8] x", "float[4,64] y, float[8,64] wq",
                   inits={"w": W, "s": scale, "z": zp})
    fused, modified = _fuse(proto, exact=True)
    ops = _ops(fused)
    assert modified and ops == {"DequantizeLinear": 1, "MatMul": 1}, ops
    weights = [t for t in fused.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert [list(t.dims) for t in weights] == [[8, 64]] and weights[0].name == "w_quantized"
    dq = next(n for n in fused.graph.node if n.op_type == "DequantizeLinear")
    assert {a.name: a.i for a in dq.attribute} == {"axis": 0}
    _same_weight_and_product(fused, proto, {"x": RNG.standard_normal((4, 8)).astype(np.float32)})


def _same_weight_and_product(fused: onnx.ModelProto, proto: onnx.ModelProto,
                             feeds: dict[str, np.ndarray]) -> None:
    """The dequantized weight (second output) equal bit for bit; the product within float32
    summation order (ORT runs a MatMul by a constant and by a computed weight differently)."""
    got, want = h.ort_session(fused).run(None, feeds), h.ort_session(proto).run(None, feeds)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset,view", [(21, "3d"), (18, "3d"), (21, "rows")],
                         ids=["int4-blocked-21", "int8-per-row-18", "int4-rows-21"])
def test_weight_per_group_int4(opset, view) -> None:
    """torchao's per-group weight: w viewed as [N, groups, g] (or as rows [N * groups, g]),
    symmetric int4 range, reshaped back to [N, K] for the matmul: at opset 21 one INT4
    initializer [N, K] + DequantizeLinear(axis 1, block_size g); at 18 an INT8 one per row of
    the group view + Reshape. Equal to the arithmetic bit for bit."""
    n, k, g = 8, 64, 16
    w = RNG.standard_normal((n, k)).astype(np.float32)
    grouped = [n, k // g, g] if view == "3d" else [n * k // g, g]
    sshape = [*grouped[:-1], 1]
    scale = (np.abs(w.reshape(grouped)).max(-1, keepdims=True) / 7.5).astype(np.float32)
    proto = _model(f"""
    lo = Constant<value = float {{-8}}>()
    hi = Constant<value = float {{7}}>()
    zero = Constant<value = float {{0}}>()
    one = Constant<value = float {{1}}>()
    gshape = Constant<value = int64[{len(grouped)}] {{{",".join(map(str, grouped))}}}>()
    wshape = Constant<value = int64[2] {{{n},{k}}}>()
    wg = Reshape(w, gshape)
    rc = Reciprocal(s)
    inv = Mul(rc, one)
    m = Mul(wg, inv)
    r = Round(m)
    a = Add(r, zero)
    cmax = Max(a, lo)
    c = Min(cmax, hi)
    flat = Reshape(c, wshape)
    back = Reshape(flat, gshape)
    b = Sub(back, zero)
    wq = Mul(b, s)
    wt = Reshape(wq, wshape)
    y = Gemm<transB = 1>(x, wt)""", f"float[4,{k}] x", f"float[4,{n}] y, float[{n},{k}] wt", opset,
                   inits={"w": w, "s": scale.reshape(sshape)})
    fused, modified = _fuse(proto, exact=True)
    assert modified
    ops = _ops(fused)
    dq = next(n for n in fused.graph.node if n.op_type == "DequantizeLinear")
    attrs = {a.name: a.i for a in dq.attribute}
    if opset >= 21:
        assert ops == {"DequantizeLinear": 1, "Gemm": 1}, ops
        assert attrs == {"axis": 1, "block_size": g}
        weights = [t for t in fused.graph.initializer if t.data_type == onnx.TensorProto.INT4]
        assert [list(t.dims) for t in weights] == [[n, k]]
        assert h.optimized_op_counts(fused)["MatMulNBits"] == 0  # a Gemm: ORT keeps it exact
    else:
        assert ops == {"DequantizeLinear": 1, "Reshape": 2, "Gemm": 1}, ops
        assert attrs == {"axis": 0}
        assert [list(t.dims) for t in fused.graph.initializer
                if t.data_type == onnx.TensorProto.INT8] == [[n * k // g, g]]
    _same_weight_and_product(fused, proto, {"x": RNG.standard_normal((4, k)).astype(np.float32)})


def test_symmetric_without_zero_point_narrow_range() -> None:
    """clamp(round(w / s), -127, 127) * s (no zero point, per tensor): INT8 weight and a
    DequantizeLinear without zero point; an activation in the same form gets QuantizeLinear
    + Clip(-127, 127) on the integers."""
    proto = _model("""
    s = Constant<value = float {0.02}>()
    lo = Constant<value = float {-127}>()
    hi = Constant<value = float {127}>()
    d = Div(w, s)
    r = Round(d)
    c = Clip(r, lo, hi)
    wq = Mul(c, s)
    dx = Div(x, s)
    rx = Round(dx)
    cx = Clip(rx, lo, hi)
    xq = Mul(cx, s)
    y = MatMul(xq, wq)""", "float[4,8] x", "float[4,64] y, float[8,64] wq", inits={"w": W})
    fused, modified = _fuse(proto)
    ops = _ops(fused)
    assert modified and ops == {"QuantizeLinear": 1, "Clip": 1, "DequantizeLinear": 2,
                                "MatMul": 1}, ops
    _same_weight_and_product(fused, proto,
                             {"x": (RNG.standard_normal((4, 8)) * 4).astype(np.float32)})


@pytest.mark.parametrize("case", ["zero-point-unbounded", "other-scale", "float-bounds",
                                  "infinite-bound"])
def test_not_fused(case) -> None:
    """Left alone: a zero point that is not provably an integer in the type's range (a graph
    input), a dequantize by another scale than the quantize's, non-integer clamp bounds, an
    infinite bound (timm's Gemma 4 ViT clamps with max=inf; the pass crashed converting it)."""
    t = {"zero-point-unbounded": ("z", "s", "-128", "127"),
         "other-scale": ("zc", "s2", "-128", "127"),
         "float-bounds": ("zc", "s", "-128.5", "127"),
         "infinite-bound": ("zc", "s", "-128", "inf")}[case]
    proto = _model(f"""
    s = Constant<value = float {{0.05}}>()
    s2 = Constant<value = float {{0.1}}>()
    zc = Constant<value = float {{3}}>()
    lo = Constant<value = float {{{t[2]}}}>()
    hi = Constant<value = float {{{t[3]}}}>()
    d = Div(x, s)
    r = Round(d)
    a = Add(r, {t[0]})
    c = Clip(a, lo, hi)
    b = Sub(c, {t[0]})
    y = Mul(b, {t[1]})""", "float[4,8] x, float z", "float[4,8] y")
    _, modified = _fuse(proto, exact=False)
    assert not modified
