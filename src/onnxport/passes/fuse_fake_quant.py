"""FuseFakeQuantPass: fake-quantization arithmetic -> QuantizeLinear + DequantizeLinear.

Fake quantization written as float arithmetic (torchao's QAT fake quantizers, hand-written
QAT code) reaches the graph as

    y = (clamp(round(x / s) + zp, qmin, qmax) - zp) * s          the division form
    y = (clamp(round(x * r) + zp, qmin, qmax) - zp) * s          r = 1 / s (torchao: x * (1.0 / s))

clamp as Clip or Min(Max(.)), the zero point optional (both `+ zp` and `- zp` absent), s
(and zp) a scalar (per tensor), varying along one axis (per channel), or a tensor of x's shape
but 1 along the last axis (per token / per row, and per group: x viewed as [..., groups,
group_size]). Matched on the arithmetic, wherever it appears.

* x a constant (a weight): the integers are computed here, op for op as the graph would
  (float32 division or multiplication by the graph's own r, round half to even, add, clamp),
  and stored as an integer initializer `<weight>_quantized` (INT4/UINT4 at opset 21 when
  [qmin, qmax] fits 4 bits, else the narrowest 8/16-bit type) + DequantizeLinear, which
  computes the same `(q - zp) * s`: exact, so ORT forms its weight kernels (MatMulNBits,
  QGemm, MatMulInteger). A per-group weight viewed as [N * groups, group_size] (or
  [N, groups, group_size]) and reshaped back to [N, K] becomes one blocked DequantizeLinear of
  the [N, K] weight (axis 1, block_size group_size) at opset 21.
* x computed (an activation): QuantizeLinear(x, s, zp) [+ Clip to a range narrower than the
  type] + DequantizeLinear. ONNX's QuantizeLinear computes `saturate(round(x / s) + zp)`
  (ONNX Runtime divides, rounds half to even, verified bit for bit), so the division form is
  exact. The multiplication form is not: `x * fl(1/s)` and `x / s` can differ in the last
  bit, which moves an element sitting at a rounding tie by one quantization step (within
  the one-step bar of issue #15). `FuseFakeQuantPass(exact=True)` (the default pipeline)
  leaves it as arithmetic; `exact=False` (the ONNX Runtime target) rewrites it too.
  Per-token scales use blocked QuantizeLinear at opset 21 (axis -1, block_size = the last
  dim), per-axis on rows (x reshaped to [rows, last dim]) before.

The zero point becomes the quantized type only when it is provably an integer inside that
type's range (a constant, or a value clamped/cast to integers: torchao's choose_qparams).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

# QuantizeLinear/DequantizeLinear types, the opset that has them, and their ranges
_QTYPES = ((ir.DataType.INT4, 21, -8, 7), (ir.DataType.UINT4, 21, 0, 15),
           (ir.DataType.INT8, 13, -128, 127), (ir.DataType.UINT8, 13, 0, 255),
           (ir.DataType.INT16, 21, -32768, 32767), (ir.DataType.UINT16, 21, 0, 65535))
_VIEWS = ("Reshape", "Identity", "Squeeze", "Unsqueeze", "Expand")  # keep values (bounds)
_SAME_ORDER = ("Reshape", "Identity", "Squeeze", "Unsqueeze")  # keep values and their order


# -- constants -------------------------------------------------------------------------------
def _evaluate(value: ir.Value | None, depth: int = 6) -> np.ndarray | None:
    """The data of a constant expression: a constant through Reshape/Transpose/Cast/Squeeze/
    Unsqueeze/Identity, Reciprocal, Neg and Mul/Div of constants (numpy's float32 arithmetic
    is IEEE, as ONNX Runtime's and torch's are)."""
    data = f.constant(value)
    if data is not None or value is None or depth == 0:
        return data
    node = value.producer()
    if node is None or node.domain or value is not node.outputs[0]:
        return None
    args = [_evaluate(v, depth - 1) if v is not None else None for v in node.inputs]
    if not args or args[0] is None:
        return None
    x = args[0]
    op = node.op_type
    if op == "Identity":
        return x
    if op == "Reshape" and len(args) > 1 and args[1] is not None:
        shape = [int(d) for d in args[1]]
        if not (node.attributes.get("allowzero") and node.attributes["allowzero"].as_int()):
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return x.reshape(shape)
    if op == "Transpose":
        perm = node.attributes.get("perm")
        return np.transpose(x, None if perm is None else list(perm.as_ints()))
    if op == "Cast" and "to" in node.attributes:
        to = ir.DataType(node.attributes["to"].as_int())
        if to.is_floating_point() and to != ir.DataType.FLOAT and to != ir.DataType.DOUBLE:
            return None
        return x.astype(to.numpy())
    if op in ("Squeeze", "Unsqueeze"):
        return x.reshape([int(d) for d in value.shape]) if value.shape is not None \
            and value.shape.is_static() else None
    if op == "Reciprocal":
        return (np.ones((), x.dtype) / x).astype(x.dtype)
    if op == "Neg":
        return -x
    if op in ("Mul", "Div") and len(args) == 2 and args[1] is not None:
        y = args[1]
        if x.dtype != y.dtype:
            return None
        return (x * y if op == "Mul" else x / y).astype(x.dtype)
    return None


def _same(a: ir.Value | None, b: ir.Value | None) -> bool:
    """The same value (through views of one value), or constants holding equal data."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    da, db = _evaluate(a), _evaluate(b)
    if da is not None and db is not None:
        try:
            return bool(np.array_equal(*np.broadcast_arrays(da, db)))
        except ValueError:
            return False
    ra, rb = _through_views(a), _through_views(b)
    return ra is rb and a.shape is not None and b.shape is not None \
        and list(a.shape) == list(b.shape)


def _through_views(value: ir.Value) -> ir.Value:
    while True:
        node = f.producer(value, *_SAME_ORDER)
        if node is None or node.inputs[0] is None:
            return value
        value = node.inputs[0]


def _is_inverse(r: ir.Value | None, s: ir.Value | None) -> bool:
    """Whether r is 1 / s: Reciprocal(s) [* 1], Div(1, s), or constants with r == fl(1 / s)."""
    if r is None or s is None:
        return False
    node = f.producer(r, "Mul")
    if node is not None:  # torchao: x * (1.0 / scale), the 1.0 as a Mul
        for i in (0, 1):
            if f.is_scalar(node.inputs[1 - i], 1.0, 0) and _is_inverse(node.inputs[i], s):
                return True
    node = f.producer(r, "Reciprocal")
    if node is not None and _same(node.inputs[0], s):
        return True
    node = f.producer(r, "Div")
    if node is not None and f.is_scalar(node.inputs[0], 1.0, 0) and _same(node.inputs[1], s):
        return True
    dr, ds = _evaluate(r), _evaluate(s)
    if dr is None or ds is None or dr.dtype != np.float32 or ds.dtype != np.float32:
        return False
    try:
        return bool(np.array_equal(*np.broadcast_arrays(dr, np.float32(1) / ds)))
    except ValueError:
        return False


def _integer_bounds(value: ir.Value | None, depth: int = 8) -> tuple[float, float] | None:
    """(lo, hi) when `value` provably holds integers in [lo, hi]: integer constants, integer
    types, Round, Cast to an integer type of a value with bounds, and Clip/Max/Min/Add/Sub,
    views and casts of such values."""
    if value is None or depth == 0:
        return None
    data = _evaluate(value)
    if data is not None:
        if data.size == 0 or not np.all(np.isfinite(data)) or not np.all(np.rint(data) == data):
            return None
        return float(data.min()), float(data.max())
    node = value.producer()
    if node is None or node.domain:
        if value.dtype is not None and value.dtype.is_integer():
            info = np.iinfo(value.dtype.numpy())
            return float(info.min), float(info.max)
        return None
    op, ins = node.op_type, node.inputs
    if op in _VIEWS:
        return _integer_bounds(ins[0], depth - 1)
    if op == "Cast":
        to = ir.DataType(node.attributes["to"].as_int())
        inner = _real_bounds(ins[0], depth - 1)
        if to.is_integer():
            info = np.iinfo(to.numpy())
            if inner is not None and info.min <= inner[0] and inner[1] <= info.max:
                return float(np.trunc(inner[0])), float(np.trunc(inner[1]))
            return float(info.min), float(info.max)
        integral = _integer_bounds(ins[0], depth - 1)
        if integral is not None and to in (ir.DataType.FLOAT, ir.DataType.DOUBLE) \
                and max(abs(integral[0]), abs(integral[1])) < 2 ** 24:
            return integral
        return None
    if op in ("Clip", "Max", "Min", "Round", "Add", "Sub"):
        return _real_bounds(value, depth) if _is_integral(value, depth) else None
    return None


def _is_integral(value: ir.Value | None, depth: int) -> bool:
    if value is None or depth == 0:
        return False
    if _integer_bounds_leaf(value):
        return True
    node = value.producer()
    if node is None or node.domain:
        return False
    if node.op_type == "Round":
        return True
    if node.op_type in ("Clip", "Max", "Min", "Add", "Sub"):
        return all(_is_integral(v, depth - 1) for v in node.inputs if v is not None)
    if node.op_type in _VIEWS or node.op_type == "Cast":
        to = node.attributes.get("to")
        if to is not None and ir.DataType(to.as_int()).is_integer():
            return True
        return _is_integral(node.inputs[0], depth - 1)
    return False


def _integer_bounds_leaf(value: ir.Value) -> bool:
    data = _evaluate(value)
    if data is not None:
        return bool(np.all(np.isfinite(data)) and np.all(np.rint(data) == data))
    return value.dtype is not None and value.dtype.is_integer()


def _real_bounds(value: ir.Value | None, depth: int) -> tuple[float, float] | None:
    """(lo, hi) when the value is known to lie in [lo, hi] (not necessarily integers)."""
    if value is None or depth == 0:
        return None
    data = _evaluate(value)
    if data is not None:
        return (float(data.min()), float(data.max())) if data.size and \
            np.all(np.isfinite(data)) else None
    node = value.producer()
    if node is None or node.domain:
        return None
    op, ins = node.op_type, node.inputs
    if op in _VIEWS:
        return _real_bounds(ins[0], depth - 1)
    if op == "Cast":
        return _integer_bounds(value, depth)
    if op == "Clip" and len(ins) == 3:
        lo, hi = f.scalar(ins[1]), f.scalar(ins[2])
        return (lo, hi) if lo is not None and hi is not None else None
    if op in ("Max", "Min") and len(ins) == 2:
        for i in (0, 1):
            c = f.scalar(ins[1 - i])
            if c is None:
                continue
            inner = _real_bounds(ins[i], depth - 1)
            if op == "Max":
                return (c, max(c, inner[1])) if inner is not None else None
            return (min(c, inner[0]), c) if inner is not None else None
        return None
    if op in ("Add", "Sub") and len(ins) == 2:
        a, b = _real_bounds(ins[0], depth - 1), _real_bounds(ins[1], depth - 1)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if op == "Add" else (a[0] - b[1], a[1] - b[0])
    return None


# -- matching --------------------------------------------------------------------------------
class _Match:
    """One fake quantization: y = (clamp(round(x op s') + zp, lo, hi) - zp) * s."""

    def __init__(self, x: ir.Value, scale: ir.Value, inverse: ir.Value | None,
                 zero: ir.Value | None, lo: int, hi: int, nodes: list[ir.Node]) -> None:
        self.x, self.scale, self.inverse, self.zero = x, scale, inverse, zero
        self.lo, self.hi, self.nodes = lo, hi, nodes


def _clamp(value: ir.Value | None) -> tuple[ir.Value, float, float, list[ir.Node]] | None:
    """value = clamp(a, lo, hi) with constant bounds: (a, lo, hi, nodes)."""
    node = f.producer(value, "Clip", "Min", "Max")
    if node is None:
        return None
    if node.op_type == "Clip":
        if len(node.inputs) != 3 or node.inputs[0] is None:
            return None
        lo, hi = f.scalar(node.inputs[1]), f.scalar(node.inputs[2])
        return None if lo is None or hi is None else (node.inputs[0], lo, hi, [node])
    outer_is_min = node.op_type == "Min"
    for i in (0, 1):
        bound = f.scalar(node.inputs[1 - i])
        inner = f.producer(node.inputs[i], "Max" if outer_is_min else "Min")
        if bound is None or inner is None:
            continue
        for j in (0, 1):
            other = f.scalar(inner.inputs[1 - j])
            if other is None or inner.inputs[j] is None:
                continue
            lo, hi = (other, bound) if outer_is_min else (bound, other)
            return inner.inputs[j], lo, hi, [inner, node]
    return None


def _round_trip(value: ir.Value | None) -> tuple[ir.Value | None, list[ir.Node]]:
    """`value` before the longest chain of Reshapes that ends in the shape it started from
    (torchao views the quantized integers as the weight and back as groups; with dynamic
    shapes the identity views stay), with those nodes."""
    nodes: list[ir.Node] = []
    best: tuple[ir.Value | None, list[ir.Node]] = (value, [])
    start = value
    while (node := f.producer(start, "Reshape")) is not None and node.inputs[0] is not None:
        nodes.append(node)
        start = node.inputs[0]
        if value is not None and _same_shape(start, value):
            best = (start, list(nodes))
    return best


def _same_shape(a: ir.Value, b: ir.Value) -> bool:
    """Whether two values provably have one shape: equal static dims or equally named
    symbolic ones (a dynamic batch), no unknown dim."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    for da, db in zip(a.shape, b.shape):
        if isinstance(da, int) or isinstance(db, int):
            if da != db:
                return False
        elif da.value is None or da.value != db.value:
            return False
    return True


def _match(mul: ir.Node, exact: bool) -> _Match | None:
    for i in (0, 1):
        scale, inner = mul.inputs[1 - i], mul.inputs[i]
        sub = f.producer(inner, "Sub")
        zero = None
        nodes = [mul]
        if sub is not None:
            zero, inner = sub.inputs[1], sub.inputs[0]
            nodes.append(sub)
        inner, views = _round_trip(inner)
        nodes += views
        clamp = _clamp(inner)
        if clamp is None or scale is None:
            continue
        a, lo, hi, clamp_nodes = clamp
        nodes += clamp_nodes
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo != int(lo) or hi != int(hi) \
                or lo >= hi:
            # (an unbounded clamp, such as Gemma 4's `clamp(max=inf)`, quantizes nothing)
            continue
        if zero is not None:
            add = f.producer(a, "Add")
            if add is None:
                continue
            k = next((k for k in (0, 1) if _same(add.inputs[1 - k], zero)
                      and f.producer(add.inputs[k], "Round") is not None), None)
            if k is None:
                continue
            nodes.append(add)
            a = add.inputs[k]
        rnd = f.producer(a, "Round")
        if rnd is None:
            continue
        nodes.append(rnd)
        op = f.producer(rnd.inputs[0], "Div", "Mul")
        if op is None:
            continue
        nodes.append(op)
        x, inverse = None, None
        if op.op_type == "Div" and _same(op.inputs[1], scale):
            x = op.inputs[0]
        elif op.op_type == "Mul":
            for k in (0, 1):
                if _is_inverse(op.inputs[1 - k], scale):
                    x, inverse = op.inputs[k], op.inputs[1 - k]
                    break
        if x is None or x.dtype != ir.DataType.FLOAT or not f.internal(nodes, mul.outputs[0]):
            continue
        if inverse is not None and exact and _evaluate(x) is None:
            continue  # x * fl(1/s) vs QuantizeLinear's x / s: a tie may move by one step
        return _Match(x, scale, inverse, zero, int(lo), int(hi), nodes)
    return None


def _qtype(lo: int, hi: int, opset: int, *, four_bits: bool
           ) -> tuple[ir.DataType, int, int] | None:
    """The narrowest quantized type holding [lo, hi] at `opset` (4 bits only if allowed)."""
    for qtype, since, qlo, qhi in _QTYPES:
        if opset >= since and qlo <= lo and hi <= qhi and (four_bits or qhi > 15):
            return qtype, qlo, qhi
    return None


def _dims(value: ir.Value) -> list[object] | None:
    return None if value.shape is None else list(value.shape)


def _layout(x_dims: list[object], s_dims: list[object]) -> tuple[str, int] | None:
    """How a scale of `s_dims` broadcasts over x: ('tensor', 0), ('axis', a) when it varies
    along axis a only, ('rows', 0) when it matches x except 1 along the last axis."""
    if all(d == 1 for d in s_dims):
        return "tensor", 0
    if len(s_dims) > len(x_dims):
        return None
    s = [1] * (len(x_dims) - len(s_dims)) + list(s_dims)
    varying = [i for i, d in enumerate(s) if d != 1]
    if len(varying) == 1 and s[varying[0]] == x_dims[varying[0]]:
        return "axis", varying[0]
    if len(x_dims) >= 2 and s[-1] == 1 and s[:-1] == x_dims[:-1]:
        return "rows", 0
    return None


class FuseFakeQuantPass(ir.passes.InPlacePass):
    """`(clamp(round(x / s) + zp, qmin, qmax) - zp) * s` as QuantizeLinear + DequantizeLinear.

    Args:
        exact: rewrite only what equals the arithmetic bit for bit (the default pipeline);
            False also rewrites activations quantized by multiplication with 1 / s (the ONNX
            Runtime target), where a value at a rounding tie may move by one step.
    """

    def __init__(self, exact: bool = True) -> None:
        super().__init__()
        self.exact = exact

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = f.opset(model)
        modified = False
        for graph, namer, node in f.standard_nodes(model, ("Mul",)):
            match = _match(node, self.exact)
            if match is None:
                continue
            if _evaluate(match.x) is not None:
                modified |= self._weight(model, graph, namer, node, match, opset)
            else:
                modified |= self._activation(graph, namer, node, match, opset)
        return ir.passes.PassResult(model, modified)

    # -- constant x: an integer initializer + DequantizeLinear -------------------------------
    def _weight(self, model: ir.Model, graph: ir.Graph, namer: f.Namer, mul: ir.Node,
                m: _Match, opset: int) -> bool:
        x, s = _evaluate(m.x), _evaluate(m.scale)
        zp = np.zeros((), np.float32) if m.zero is None else _evaluate(m.zero)
        if x is None or s is None or zp is None or s.dtype != np.float32:
            return False
        if m.inverse is None:
            t = x / s
        else:
            r = _evaluate(m.inverse)
            if r is None or r.dtype != np.float32:
                return False
            t = x * r
        zpf = zp.astype(np.float32)
        if not np.all(np.rint(zpf) == zpf):
            return False
        try:
            q = np.clip(np.rint(t.astype(np.float32)) + zpf, m.lo, m.hi)
            params = np.broadcast_shapes(s.shape, zpf.shape)
        except ValueError:
            return False
        layout = _layout(list(x.shape), list(params))
        found = _qtype(int(min(m.lo, zpf.min())), int(max(m.hi, zpf.max())), opset,
                       four_bits=True)
        if q.shape != x.shape or found is None or layout is None:
            return False
        qtype = found[0]
        s_data = np.broadcast_to(s, params)
        z_data = np.broadcast_to(zpf, params)
        out = mul.outputs[0]
        reshape = f.only_user(out, "Reshape")
        target = None if reshape is None else _dims(reshape.outputs[0])
        kind, axis = layout
        if kind == "axis" and len(x.shape) == 2 and axis == 0:
            kind = "rows"  # per row of a 2-D weight: a view of groups may be reshaped back
        attrs: dict[str, object] = {}
        regrouped = False
        if kind == "tensor":
            s_data, z_data = s_data.reshape(()), z_data.reshape(())
        elif kind == "axis":
            s_data, z_data = s_data.reshape(-1), z_data.reshape(-1)
            attrs["axis"] = axis
        else:  # rows: x [..., g], one scale per row of g
            g = int(x.shape[-1])
            s_data, z_data = s_data.reshape(-1), z_data.reshape(-1)
            if len(x.shape) == 2 and not (target is not None and len(target) == 2
                                          and target[1] != g):
                attrs = {"axis": 0}
            elif target is not None and len(target) == 2 \
                    and all(isinstance(d, int) for d in target) \
                    and int(target[0]) * int(target[1]) == q.size and int(target[1]) % g == 0 \
                    and (opset >= 21 or int(target[1]) == g):
                # the per-group view reshaped back to the [N, K] weight: one DequantizeLinear
                # of the [N, K] weight, blocked along K (per row when K is one group)
                rows, cols = (int(d) for d in target)  # type: ignore[call-overload]
                q = q.reshape(rows, cols)
                if cols == g:
                    attrs = {"axis": 0}
                else:
                    s_data = s_data.reshape(rows, cols // g)
                    z_data = z_data.reshape(rows, cols // g)
                    attrs = {"axis": 1, "block_size": g}
                regrouped = True
            elif opset >= 21:
                s_data = s_data.reshape((*x.shape[:-1], 1))
                z_data = z_data.reshape((*x.shape[:-1], 1))
                attrs = {"axis": len(x.shape) - 1, "block_size": g}
            else:
                q = q.reshape(-1, g)
                attrs = {"axis": 0}
        new: list[ir.Node] = []
        name = _root_name(m.x)
        q_value = _initializer(graph, namer, f"{name}_quantized", q, qtype)
        inputs = [q_value, namer.constant(mul, np.ascontiguousarray(s_data, np.float32))]
        if m.zero is not None:
            inputs.append(_zero_point(namer, mul, np.ascontiguousarray(z_data), qtype))
        dq = f.make_node(namer, mul, "DequantizeLinear", inputs, attrs, dtype=ir.DataType.FLOAT)
        new.append(dq)
        y = dq.outputs[0]
        if not regrouped and list(q.shape) != list(x.shape):
            shape = namer.constant(mul, np.asarray(x.shape, np.int64))
            new.append(f.make_node(namer, mul, "Reshape", [y, shape], dtype=ir.DataType.FLOAT))
            y = new[-1].outputs[0]
        if regrouped:
            assert reshape is not None
            f.replace(graph, [*m.nodes, reshape], new, reshape.outputs[0], y)
        else:
            f.replace(graph, m.nodes, new, out, y)
        return True

    # -- computed x: QuantizeLinear + DequantizeLinear ---------------------------------------
    def _activation(self, graph: ir.Graph, namer: f.Namer, mul: ir.Node, m: _Match,
                    opset: int) -> bool:
        found = _qtype(m.lo, m.hi, opset, four_bits=False)
        if found is None:
            return False
        qtype, qlo, qhi = found
        if m.zero is not None:
            bounds = _integer_bounds(m.zero)
            if bounds is None or bounds[0] < qlo or bounds[1] > qhi:
                return False
        x_dims = _dims(m.x)
        s_const = _evaluate(m.scale)
        z_const = None if m.zero is None else _evaluate(m.zero)
        s_dims = list(s_const.shape) if s_const is not None else _dims(m.scale)
        if x_dims is None or s_dims is None or (s_const is not None
                                                 and s_const.dtype != np.float32):
            return False
        if m.zero is not None:
            z_dims = list(z_const.shape) if z_const is not None else _dims(m.zero)
            if z_dims is None or (z_dims != s_dims and any(d != 1 for d in z_dims)):
                return False
        layout = _layout(x_dims, s_dims)
        if layout is None:
            return False
        kind, axis = layout
        new: list[ir.Node] = []

        def add(op_type: str, inputs: list[ir.Value | None], dtype: ir.DataType,
                **attrs: object) -> ir.Value:
            new.append(f.make_node(namer, mul, op_type, inputs, attrs, dtype=dtype))
            return new[-1].outputs[0]

        def as_shape(v: ir.Value, shape: list[int], dtype: ir.DataType) -> ir.Value:
            data = _evaluate(v)
            if data is not None:
                return namer.constant(mul, np.ascontiguousarray(data.reshape(shape)))
            return add("Reshape", [v, namer.constant(mul, np.asarray(shape, np.int64))], dtype)

        x, s = m.x, m.scale
        z: ir.Value | None = None
        if m.zero is not None:
            z = namer.constant(mul, np.rint(z_const).astype(qtype.numpy())) \
                if z_const is not None else add("Cast", [m.zero], qtype, to=int(qtype))
            if z_dims != s_dims:
                z = add("Expand", [z, add("Shape", [s], ir.DataType.INT64)], qtype)
        attrs: dict[str, object] = {}
        back = None
        if kind == "tensor":
            s = as_shape(s, [], ir.DataType.FLOAT) if len(s_dims) else s
            z = as_shape(z, [], qtype) if z is not None and len(s_dims) else z
        elif kind == "axis":
            s = as_shape(s, [-1], ir.DataType.FLOAT)
            z = as_shape(z, [-1], qtype) if z is not None else None
            attrs["axis"] = axis
        else:
            last = x_dims[-1]
            if not isinstance(last, int):
                return False
            if opset >= 21 and len(s_dims) == len(x_dims):
                attrs = {"axis": len(x_dims) - 1, "block_size": last}
            else:
                if len(x_dims) > 2:
                    back = add("Shape", [x], ir.DataType.INT64)
                    x = as_shape(x, [-1, last], ir.DataType.FLOAT)
                s = as_shape(s, [-1], ir.DataType.FLOAT)
                z = as_shape(z, [-1], qtype) if z is not None else None
                attrs = {"axis": 0}
        if z is None:  # QuantizeLinear's type is its zero point's (uint8 without one)
            z = namer.constant(mul, np.zeros((), qtype.numpy()))
            if kind != "tensor":
                z = add("Expand", [z, add("Shape", [s], ir.DataType.INT64)], qtype)
        q = add("QuantizeLinear", [x, s, z], qtype, **attrs)
        if (m.lo, m.hi) != (qlo, qhi):
            q = add("Clip", [q, namer.constant(mul, np.asarray(m.lo, qtype.numpy())),
                             namer.constant(mul, np.asarray(m.hi, qtype.numpy()))], qtype)
        y = add("DequantizeLinear", [q, s, z], ir.DataType.FLOAT, **attrs)
        if back is not None:
            y = add("Reshape", [y, back], ir.DataType.FLOAT)
        f.replace(graph, m.nodes, new, mul.outputs[0], y)
        return True


def _root_name(value: ir.Value) -> str:
    """The name of the initializer a constant expression starts from (else the value's)."""
    v = value
    while v.producer() is not None and v.producer().inputs:  # type: ignore[union-attr]
        v = v.producer().inputs[0]  # type: ignore[union-attr,assignment]
        if v is None:
            return value.name or "weight"
    return v.name or value.name or "weight"


def _initializer(graph: ir.Graph, namer: f.Namer, name: str, data: np.ndarray,
                 qtype: ir.DataType) -> ir.Value:
    """An initializer of `qtype` holding the integers `data` (INT4/UINT4 via ml_dtypes)."""
    if qtype in (ir.DataType.INT4, ir.DataType.UINT4):
        import ml_dtypes  # onnx_ir's representation of 4-bit types

        array = data.astype(np.int8).astype(
            ml_dtypes.int4 if qtype == ir.DataType.INT4 else ml_dtypes.uint4)
    else:
        array = data.astype(qtype.numpy())
    taken = set(graph.initializers) | namer.taken
    unique, i = name, 0
    while unique in taken:
        i += 1
        unique = f"{name}_{i}"
    namer.taken.add(unique)
    tensor = ir.Tensor(array, dtype=qtype, name=unique)
    value = ir.Value(name=unique, type=ir.TensorType(qtype), shape=ir.Shape(list(data.shape)),
                     const_value=tensor)
    graph.initializers[unique] = value
    return value


def _zero_point(namer: f.Namer, anchor: ir.Node, data: np.ndarray, qtype: ir.DataType
                ) -> ir.Value:
    if qtype in (ir.DataType.INT4, ir.DataType.UINT4):
        import ml_dtypes

        array = data.astype(np.int8).astype(
            ml_dtypes.int4 if qtype == ir.DataType.INT4 else ml_dtypes.uint4)
        tensor = ir.Tensor(array, dtype=qtype)
        node = f.make_node(namer, anchor, "Constant", [], {"value": tensor}, dtype=qtype,
                           shape=ir.Shape(list(data.shape)))
        node.outputs[0].const_value = tensor
        namer.at_top(node)
        return node.outputs[0]
    return namer.constant(anchor, data.astype(qtype.numpy()))
