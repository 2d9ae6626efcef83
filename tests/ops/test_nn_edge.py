"""Edge cases for NN layers, reductions and attention beyond what OpInfo samples reach."""

from __future__ import annotations

import functools
from typing import Any

import math

import pytest
import torch
import torch.nn.functional as F

import onnxport
from tests.helpers import Fn, count, export_and_compare


# -- convolution and pooling ------------------------------------------------------------------

def test_conv2d_same_padding_even_kernel() -> None:
    conv = torch.nn.Conv2d(3, 4, (4, 2), padding="same", dilation=(1, 3))
    export_and_compare(conv, (torch.randn(2, 3, 9, 10),), rtol=1e-4, atol=1e-5)


def test_conv2d_unbatched() -> None:
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    export_and_compare(conv, (torch.randn(3, 8, 8),), rtol=1e-4, atol=1e-5)


def test_conv_transpose_output_padding_beyond_stride() -> None:
    """torch allows output_padding < dilation even when >= stride; ORT does not."""
    m = Fn(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=2,
                                              dilation=3))
    export_and_compare(m, (torch.randn(1, 2, 5, 5), torch.randn(2, 3, 3, 3), torch.randn(3)),
                       rtol=1e-4, atol=1e-5)


def test_max_pool2d_indices_ceil_mode() -> None:
    m = Fn(lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True))
    export_and_compare(m, (torch.randn(2, 3, 10, 11),))


@pytest.mark.parametrize("kwargs", [
    {"ceil_mode": True},
    {"ceil_mode": True, "count_include_pad": False, "padding": 1},
    {"divisor_override": 5, "padding": 1},
    {"divisor_override": 3, "ceil_mode": True},
])
def test_avg_pool2d_ceil_and_divisor(kwargs: dict[str, Any]) -> None:
    m = Fn(lambda x: F.avg_pool2d(x, 3, stride=2, **kwargs))
    export_and_compare(m, (torch.randn(1, 2, 10, 9),))


SPATIAL_DIMS = {2: torch.export.Dim("h", min=3, max=64), 3: torch.export.Dim("w", min=3, max=64)}


def _dynamic_spatial(fn: Any, x: torch.Tensor, sizes: list[tuple[int, int]]) -> None:
    """Export with dynamic height and width, run at each size, compare with eager."""
    program = export_and_compare(Fn(fn), (x,), dynamic_shapes=((SPATIAL_DIMS,),))
    for size in sizes:
        x2 = torch.randn(*x.shape[:2], *size)
        (actual,) = program(x2)
        torch.testing.assert_close(actual, fn(x2))


@pytest.mark.parametrize("kwargs", [
    {"ceil_mode": True, "padding": 1},
    {"ceil_mode": True, "count_include_pad": False, "padding": 1},
    {"ceil_mode": True, "kernel_size": 2, "stride": 2},
    {"divisor_override": 5, "padding": 1},
    {"divisor_override": 3, "ceil_mode": True},
])
def test_avg_pool2d_ceil_and_divisor_dynamic(kwargs: dict[str, Any]) -> None:
    """Ceil mode's last window (kept, clipped, or dropped where it would start in the right
    padding) and torch's divisor, from the sizes in the graph."""
    kwargs = {"kernel_size": 3, "stride": 2, **kwargs}
    _dynamic_spatial(lambda x: F.avg_pool2d(x, **kwargs), torch.randn(2, 3, 9, 10),
                     [(6, 7), (13, 8), (16, 16), (5, 12)])


@pytest.mark.parametrize("out", [(7, 7), (3, 5), (1, 4), 2])
def test_adaptive_avg_pool2d_dynamic(out: Any) -> None:
    """Uneven, overlapping windows over dynamic sizes, smaller and larger than the output."""
    _dynamic_spatial(lambda x: F.adaptive_avg_pool2d(x, out), torch.randn(2, 3, 9, 10),
                     [(6, 7), (13, 8), (16, 16), (3, 31)])


def test_adaptive_avg_pool3d_dynamic() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool3d(x, (2, 3, 4))

    t, w = torch.export.Dim("t", min=2, max=64), torch.export.Dim("w", min=2, max=64)
    program = export_and_compare(Fn(fn), (torch.randn(2, 3, 9, 8, 7),),
                                 dynamic_shapes=(({2: t, 4: w},),))
    for size in (5, 13):
        x2 = torch.randn(2, 3, size, 8, size + 2)
        torch.testing.assert_close(program(x2)[0], fn(x2))


def test_adaptive_avg_pool_global_and_uneven() -> None:
    program = export_and_compare(Fn(lambda x: F.adaptive_avg_pool2d(x, 1)), (torch.randn(2, 3, 7, 5),))
    assert count(program, "GlobalAveragePool") == 1
    export_and_compare(Fn(lambda x: F.adaptive_avg_pool2d(x, (3, 4))), (torch.randn(2, 3, 7, 5),))


@pytest.mark.parametrize("size,out", [((7, 7), 3), ((5, 9), (2, 4)), ((1, 6), (3, 4)),
                                      ((6, 6), (None, 4))])
def test_adaptive_max_pool2d_uneven_with_indices(size: tuple[int, int], out: Any) -> None:
    m = Fn(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True))
    export_and_compare(m, (torch.randn(2, 3, *size),))


def test_adaptive_max_pool_uneven_ties_keep_first_index() -> None:
    """torch keeps the first maximum of a window; overlapping windows share positions."""
    x = torch.tensor([[[1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 3.0]]])
    export_and_compare(Fn(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True)), (x,))
    export_and_compare(Fn(lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True)),
                       (torch.randn(2, 5, 4, 5).round(),))


# -- normalization ---------------------------------------------------------------------------

def test_batch_norm_eval_uses_batch_normalization() -> None:
    bn = torch.nn.BatchNorm2d(4)
    bn.running_mean.uniform_()
    bn.running_var.uniform_(0.5, 2)
    program = export_and_compare(bn, (torch.randn(2, 4, 5, 5),), rtol=1e-4, atol=1e-5)
    assert count(program, "BatchNormalization") == 1


def test_layer_norm_uses_layer_normalization() -> None:
    program = export_and_compare(torch.nn.LayerNorm((5, 6)), (torch.randn(2, 3, 5, 6),),
                                 rtol=1e-4, atol=1e-5)
    assert count(program, "LayerNormalization") == 1


def test_group_norm_and_instance_norm_modules() -> None:
    export_and_compare(torch.nn.GroupNorm(2, 4), (torch.randn(2, 4, 3, 5),), rtol=1e-4, atol=1e-5)
    export_and_compare(torch.nn.InstanceNorm2d(4, affine=True), (torch.randn(2, 4, 3, 5),),
                       rtol=1e-4, atol=1e-5)


def test_rms_norm_opset_23() -> None:
    m = torch.nn.RMSNorm(6)
    program = export_and_compare(m, (torch.randn(2, 3, 6),), opset_version=23, rtol=1e-4, atol=1e-5)
    assert count(program, "RMSNormalization") == 1


# -- upsampling and padding ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("how", [{"scale_factor": 1.7}, {"size": (5, 13)}, {"size": (1, 1)}])
def test_interpolate_modes(mode: str, align_corners: bool, how: dict[str, Any]) -> None:
    m = Fn(lambda x: F.interpolate(x, mode=mode, align_corners=align_corners, **how))
    export_and_compare(m, (torch.randn(1, 2, 4, 6),), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_nearest_downsample(mode: str) -> None:
    m = Fn(lambda x: F.interpolate(x, size=(3, 7), mode=mode))
    export_and_compare(m, (torch.randn(1, 2, 7, 5),))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
def test_pad_modes(mode: str) -> None:
    m = Fn(lambda x: F.pad(x, (1, 2, 0, 3), mode=mode))
    export_and_compare(m, (torch.randn(1, 2, 4, 5),))


def test_pixel_shuffle_roundtrip_extra_leading_dims() -> None:
    m = Fn(lambda x: F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2))
    export_and_compare(m, (torch.randn(2, 3, 8, 4, 5),))


# -- reductions ------------------------------------------------------------------------------

def test_integer_sums_promote_to_int64() -> None:
    m = Fn(lambda a, b: (a.sum(), b.sum(dim=-1), a.prod(0)))
    program = export_and_compare(m, (torch.randint(-5, 5, (3, 4), dtype=torch.int32),
                                     torch.rand(3, 4) > 0.5))
    assert program(torch.ones(3, 4, dtype=torch.int32), torch.ones(3, 4, dtype=torch.bool))[0].dtype \
        == torch.int64


def test_reductions_on_empty_and_negative_dims() -> None:
    m = Fn(lambda x: (x.sum(-1), x.mean(-1), x.any(-1), x.all(-1)))
    export_and_compare(m, (torch.randn(3, 0),))
    export_and_compare(Fn(lambda x: torch.count_nonzero(x, -1)), (torch.randn(3, 0),))


def test_reductions_dynamic_shapes() -> None:
    class Stats(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return x.var(1, keepdim=True), x.mean((0, 1)), torch.std_mean(x, 0, correction=0)

    batch = torch.export.Dim("batch")
    program = export_and_compare(Stats(), (torch.randn(4, 5),), dynamic_shapes=({0: batch},),
                                 rtol=1e-4, atol=1e-5)
    x = torch.randn(7, 5)
    for a, e in zip(program(x), (x.var(1, keepdim=True), x.mean((0, 1)), *torch.std_mean(x, 0, correction=0))):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


def test_argmax_keepdim_without_dim_and_max_dim_ties() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    m = Fn(lambda x: (torch.argmax(x, keepdim=True), x.max(1), x.min(0)))
    export_and_compare(m, (x,))


@pytest.mark.parametrize("ord", [1, 2, float("inf"), -float("inf"), 0, 3.5])
def test_vector_norm_orders(ord: float) -> None:
    m = Fn(lambda x: torch.linalg.vector_norm(x, ord=ord, dim=(0, 2)))
    export_and_compare(m, (torch.randn(3, 4, 5),), rtol=1e-4, atol=1e-5)


def test_logsumexp_with_infinities() -> None:
    x = torch.tensor([[0.0, 1.0], [-float("inf"), -float("inf")], [float("inf"), 1.0]])
    export_and_compare(Fn(lambda x: torch.logsumexp(x, 1)), (x,))


# -- attention -------------------------------------------------------------------------------

def _qkv(heads: int = 4, kv_heads: int = 4) -> tuple[torch.Tensor, ...]:
    return torch.randn(2, heads, 5, 8), torch.randn(2, kv_heads, 7, 8), torch.randn(2, kv_heads, 7, 8)


def test_sdpa_bool_and_float_masks() -> None:
    q, k, v = _qkv()
    bool_mask = torch.rand(5, 7) > 0.3
    bool_mask[:, 0] = True
    export_and_compare(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
                       (q, k, v, bool_mask), rtol=1e-4, atol=1e-5)
    export_and_compare(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3)),
                       (q, k, v, torch.randn(2, 1, 5, 7)), rtol=1e-4, atol=1e-5)


def test_sdpa_causal_gqa() -> None:
    q, k, v = _qkv(4, 2)
    m = Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    program = export_and_compare(m, (q, k, v), rtol=1e-4, atol=1e-5)
    assert count(program, "Softmax") == 1


def test_sdpa_fully_masked_row_matches_torch() -> None:
    q, k, v = _qkv()
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False
    export_and_compare(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
                       (q, k, v, mask), rtol=1e-4, atol=1e-5)


def test_sdpa_dropout_warns() -> None:
    """dropout_p > 0 exports as a Dropout node (tests/ops/test_native_ops.py) with a warning."""
    q, k, v = _qkv()
    with pytest.warns(UserWarning, match="dropout_p"):
        onnxport.export(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)),
                        (q, k, v))


def test_decomposed_program_core_aten_level() -> None:
    """run_decompositions() gives convolution, _native_batch_norm_legit_no_training,
    native_layer_norm, native_group_norm and max_pool2d_with_indices; all translate."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.gn = torch.nn.GroupNorm(2, 4)
            self.ln = torch.nn.LayerNorm(4)
            self.up = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.gn(self.bn(self.conv(x)))
            y = F.max_pool2d(y, 2)
            y = self.ln(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return F.interpolate(self.up(y), scale_factor=2, mode="bilinear")

    net = Net().eval()
    net.bn.running_mean.uniform_()
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(net, (x,)).run_decompositions()
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "aten.convolution.default" in targets
    assert "aten._native_batch_norm_legit_no_training.default" in targets
    onnx_program = onnxport.export(program, (x,))
    with torch.no_grad():
        expected = net(x)
    torch.testing.assert_close(onnx_program(x)[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op", "args"), [
    (torch.ops.aten.upsample_nearest2d.default, ([6, 9], 1.5, 1.5)),
    (torch.ops.aten.upsample_nearest2d.default, ([6, 9], None, None)),
    (torch.ops.aten.upsample_bilinear2d.default, ([6, 9], False, 1.5, 1.5)),
    (torch.ops.aten.upsample_bicubic2d.default, ([7, 5], True)),
    (torch.ops.aten._upsample_nearest_exact2d.default, ([3, 9], None, None)),
])
def test_upsample_default_overloads(op: Any, args: tuple[Any, ...]) -> None:
    export_and_compare(Fn(lambda x: op(x, *args)), (torch.randn(1, 2, 4, 6),), rtol=1e-4, atol=1e-5)


def test_upsample_3d_default_overloads() -> None:
    m = Fn(lambda x: (torch.ops.aten.upsample_trilinear3d.default(x, [4, 6, 8], False, 2.0, 2.0, 2.0),
                      torch.ops.aten.upsample_nearest3d.default(x, [3, 5, 7])))
    export_and_compare(m, (torch.randn(1, 2, 2, 3, 4),), rtol=1e-4, atol=1e-5)


def test_max_min_argmax_propagate_nan() -> None:
    x = torch.tensor([[1.0, float("nan"), 2.0, 0.0], [float("nan"), 3.0, 1.0, 1.0], [1.0, 2.0, 3.0, 0.5]])
    m = Fn(lambda x: (x.amax(1), x.max(1), torch.argmin(x, 1), x.max(), x.amin(0), torch.argmax(x)))
    export_and_compare(m, (x,))


def test_dynamic_batch_and_sequence() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
            self.gn = torch.nn.GroupNorm(2, 4)

        def forward(self, x: torch.Tensor, q: torch.Tensor) -> Any:
            y, idx = F.max_pool2d(self.gn(self.conv(x)), 2, return_indices=True)
            up = F.interpolate(y, scale_factor=2.0, mode="bilinear")
            attn = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            return up, idx, F.pixel_shuffle(y, 2), attn, F.adaptive_avg_pool2d(x, 1)

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    net = Net().eval()
    args = (torch.randn(2, 2, 6, 6), torch.randn(2, 3, 5, 8))
    program = export_and_compare(net, args, dynamic_shapes=({0: batch}, {0: batch, 2: seq}),
                                 rtol=1e-4, atol=1e-5)
    other = (torch.randn(3, 2, 6, 6), torch.randn(3, 3, 9, 8))
    with torch.no_grad():
        expected = net(*other)
    for a, e in zip(program(*other), expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["plain", "causal_gqa", "bool_mask", "float_mask", "fp16"])
def test_sdpa_onnx_attention_opset_23(case: str) -> None:
    q, k, v = _qkv(4, 2 if case == "causal_gqa" else 4)
    mask = None
    if case == "bool_mask":
        mask = torch.rand(5, 7) > 0.3
        mask[2] = False  # a fully masked row
    elif case == "float_mask":
        mask = torch.randn(2, 1, 5, 7)
    if case == "fp16":
        q, k, v = q.half(), k.half(), v.half()

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case == "causal_gqa",
                                              enable_gqa=case == "causal_gqa")

    if case != "fp16":
        program = export_and_compare(Fn(fn), (q, k, v), opset_version=23, rtol=1e-4, atol=1e-5)
        assert count(program, "Attention") == 1
        return
    # float16: torch and ORT round differently; require ONNX to be as close to a float64
    # reference as torch itself is.
    program = onnxport.export(Fn(fn), (q, k, v), opset_version=23)
    assert count(program, "Attention") == 1
    reference = fn(q.double(), k.double(), v.double())
    ours = (program(q, k, v)[0].double() - reference).abs().max()
    theirs = (fn(q, k, v).double() - reference).abs().max()
    assert ours <= theirs * 1.5 + 1e-4


@pytest.mark.parametrize("ord", [math.inf, -math.inf])
def test_vector_norm_inf_propagates_nan(ord: float) -> None:
    x = torch.tensor([[1.0, math.nan, -3.0], [2.0, -5.0, 1.0]])
    export_and_compare(Fn(lambda t: (torch.linalg.vector_norm(t, ord, dim=1),
                                     torch.linalg.vector_norm(t, ord))), (x,))


# -- adaptive pooling, antialiased resize, 3-D grid sampling ---------------------------------

def test_adaptive_avg_pool3d_uneven_empty_batch() -> None:
    """ORT's fused Transpose+MatMul and a left-broadcast MatMul both fail on an empty batch."""
    m = Fn(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)))
    export_and_compare(m, (torch.randn(0, 3, 5, 7, 6),))
    export_and_compare(m, (torch.randn(2, 3, 5, 7, 6),))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kwargs", [{"size": (5, 7)}, {"size": (20, 3), "align_corners": True},
                                    {"scale_factor": 0.3}, {"scale_factor": (0.5, 2.5)}])
def test_interpolate_antialias(mode: str, kwargs: dict[str, Any]) -> None:
    m = Fn(lambda x: F.interpolate(x, mode=mode, antialias=True, **kwargs))
    export_and_compare(m, (torch.randn(2, 3, 11, 9),))


@pytest.mark.parametrize("opset", [18, 20])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_3d(opset: int, mode: str, padding_mode: str) -> None:
    grid = torch.rand(2, 3, 4, 2, 3) * 3 - 1.5
    grid[0, 0, 0, 0] = torch.tensor([1.0, -1.0, 0.5])
    for align_corners in (False, True):
        m = Fn(functools.partial(F.grid_sample, mode=mode, padding_mode=padding_mode,
                                 align_corners=align_corners))
        export_and_compare(m, (torch.randn(2, 3, 4, 5, 6), grid), opset_version=opset)


# -- bilinear, batch norm with update, losses ------------------------------------------------

@pytest.mark.parametrize("shapes", [((4,), (5,)), ((0, 4), (0, 5)), ((2, 3, 4), (2, 3, 5))])
def test_bilinear_shapes(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    m = Fn(lambda a, b, w, bias: F.bilinear(a, b, w, bias))
    export_and_compare(m, (torch.randn(*shapes[0]), torch.randn(*shapes[1]),
                           torch.randn(6, 4, 5), torch.randn(6)), rtol=1e-5, atol=1e-5)


def test_trilinear_direct() -> None:
    """aten._trilinear (what bilinear decomposes to) with expand and sum dims of its own."""
    m = Fn(lambda a, b, c: torch.ops.aten._trilinear(a, b, c, [1, 3], [0], [1, 2], [2, 3]))
    export_and_compare(m, (torch.randn(2, 3), torch.randn(4, 3, 5), torch.randn(2, 5)),
                       rtol=1e-5, atol=1e-5)


def test_batch_norm_with_update_returns_running_stats() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
           rv: torch.Tensor) -> Any:
        rm, rv = rm.clone(), rv.clone()
        out = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
        return out[0], out[1], out[2], rm, rv

    args = (torch.randn(4, 3, 5) * 3 + 1, torch.randn(3), torch.randn(3), torch.randn(3),
            torch.rand(3) + 0.5)
    program = export_and_compare(Fn(fn), args, rtol=1e-5, atol=1e-5)
    targets = {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten._batch_norm_with_update_functional.default in targets


@pytest.mark.parametrize("kwargs", [{}, {"ignore_index": 2}, {"reduction": "sum"},
                                    {"reduction": "none", "ignore_index": 0}])
def test_nll_loss_weight_and_ignore_index(kwargs: dict[str, Any]) -> None:
    """nll_loss's decomposition returns a namedtuple, which capture unwraps."""
    m = Fn(lambda x, t, w: F.nll_loss(x, t, weight=w, **kwargs))
    export_and_compare(m, (torch.randn(6, 4).log_softmax(1), torch.tensor([0, 2, 1, 2, 3, 0]),
                           torch.rand(4)))
    export_and_compare(m, (torch.randn(2, 4, 3, 3).log_softmax(1), torch.randint(0, 4, (2, 3, 3)),
                           torch.rand(4)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_linear_cross_entropy_chunked_weight_and_ignore_index(reduction: str) -> None:
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
    m = Fn(lambda x, w, t, b, cw: F.linear_cross_entropy(
        x, w, t, linear_bias=b, weight=cw, reduction=reduction, ignore_index=1, options=options))
    args = (torch.randn(5, 3), torch.randn(4, 3), torch.tensor([0, 1, 3, 1, 2]), torch.randn(4),
            torch.rand(4))
    program = export_and_compare(m, args, rtol=1e-5, atol=1e-5)
    targets = {str(n.target) for n in program.exported_program.graph.nodes}
    assert any("_linear_cross_entropy_batch_chunked" in t for t in targets), targets


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("flags", [(True, True, True), (False, True, False)])
def test_linear_cross_entropy_chunked_precomputed_gradients(reduction: str,
                                                            flags: tuple[bool, ...]) -> None:
    """With an input requiring grad at trace time, the op also returns the loss's gradients."""
    import torch.nn.modules.linear_cross_entropy  # noqa: F401  (defines the torch_nn:: ops)

    op = torch.ops.torch_nn._linear_cross_entropy_batch_chunked
    m = Fn(functools.partial(_chunked_lce, op, reduction, flags))
    args = (torch.randn(5, 3), torch.randn(4, 3), torch.tensor([0, 1, 3, 1, 2]), torch.randn(4),
            torch.rand(4))
    export_and_compare(m, args, rtol=1e-5, atol=1e-5)


def _chunked_lce(op: Any, reduction: str, flags: tuple[bool, ...], x: torch.Tensor,
                 w: torch.Tensor, t: torch.Tensor, b: torch.Tensor, cw: torch.Tensor) -> Any:
    return op(x, w, t, b, cw, reduction, 1, 0.0, 2, "balanced", torch.float32, True, *flags)


def test_linear_cross_entropy_chunked_with_module_parameters() -> None:
    """A module's parameters require grad, so the traced op is asked for its gradients."""
    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
            return F.linear_cross_entropy(x, self.lin.weight, t, linear_bias=self.lin.bias,
                                          options=options)

    export_and_compare(Head(), (torch.randn(5, 3), torch.tensor([0, 1, 3, 1, 2])),
                       rtol=1e-5, atol=1e-5)


def test_batch_norm_no_update() -> None:
    # (torch 2.13's CPU kernel crashes without running statistics, so only with them)
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
           rv: torch.Tensor) -> Any:
        return torch.ops.aten._batch_norm_no_update(x, w, b, rm, rv, 0.1, 1e-5)[0]

    args = (torch.randn(4, 3, 5), torch.randn(3), torch.randn(3), torch.randn(3),
            torch.rand(3) + 0.5)
    export_and_compare(Fn(fn), args, rtol=1e-5, atol=1e-5)


# -- float16: matching ATen's own rounding ------------------------------------------------------

@pytest.mark.parametrize("which", ["batch_norm", "instance_norm"])
def test_norm_float16_uses_rounded_statistics(which: str) -> None:
    """ATen normalizes half inputs with the float statistics rounded to float16 (the dtype of
    save_mean/save_invstd); computing with the unrounded ones is off by an ulp in many places."""
    torch.manual_seed(0)
    x = (torch.randn(4, 3, 6, 7) * 3 + 1).half()
    w, b = torch.randn(3).half(), torch.randn(3).half()
    if which == "batch_norm":
        m = Fn(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3))
    else:
        m = Fn(lambda x, w, b: F.instance_norm(x, weight=w, bias=b))
    export_and_compare(m, (x, w, b))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_soft_margin_loss_rounds_like_aten(reduction: str, dtype: torch.dtype) -> None:
    """In float16 torch's exp(-x*y) overflows to inf past 11.1, and so does the export."""
    x = torch.tensor([[-12.0, 0.5, 3.0], [1e-4, -2.0, 20.0]], dtype=dtype)
    y = torch.tensor([[1.0, -1.0, 1.0], [1.0, 1.0, -1.0]], dtype=dtype)
    m = Fn(lambda x, y: F.soft_margin_loss(x, y, reduction=reduction))
    export_and_compare(m, (x, y))


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Conv1d(3, 4, 3, padding=1),
    lambda: torch.nn.Conv2d(3, 6, 3, stride=2, groups=3),
    lambda: torch.nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1),
    lambda: torch.nn.AvgPool2d(3, stride=2, ceil_mode=True),
    lambda: torch.nn.AvgPool1d(2),
])
def test_float64_conv_and_avg_pool(make: Any) -> None:
    # ORT has float32 kernels only for Conv/ConvTranspose/AveragePool: float64 runs as
    # gathered windows in float64.
    module = make().double()
    spatial = (9,) if isinstance(module, (torch.nn.Conv1d, torch.nn.AvgPool1d)) else (9, 8)
    export_and_compare(module, (torch.randn(2, 3, *spatial, dtype=torch.float64),))
