"""Make `import torchvision` work on a CPU-only torch, for the torchvision operator tests.

Why this exists: the torchvision wheel on the package index is built against the CUDA build of
torch. Its compiled extension (`torchvision/_C.so`) does not load into the CPU wheel of torch,
so none of the `torchvision::` operators (nms, roi_align, ...) get defined, and
`import torchvision` then fails in `torchvision/_meta_registrations.py`, which registers fake
kernels for `torchvision::nms` / `torchvision::qnms` unconditionally ("operator torchvision::nms
does not exist"). Even past the import, `torchvision.ops.*` refuse to run without the
extension (`_assert_has_ops`).

`load_torchvision()` fixes both, only when the real operators are absent (a feature test, so on
a CUDA torch with a working extension nothing is replaced):

* it defines the operator schemas torchvision 0.28 registers in C++ (copied from its
  `TORCH_LIBRARY_FRAGMENT` definitions, so FX graphs hold the very same
  `torchvision::<op>.default` overloads a real install gives), with reference CPU kernels
  written in plain torch from torchvision's documented semantics, and fake (meta) kernels for
  torch.export;
* it imports torchvision, then tells its Python layer that the operators exist
  (`torchvision.extension._has_ops`), so `torchvision.ops.nms` etc. call them.

The reference kernels favour clarity over speed: loops over boxes / rois in Python, fine for
the small tensors tests use. No autograd is registered (the tests export inference graphs).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import torch

# The schemas of torchvision 0.28's operators (torchvision/csrc/ops/*.cpp).
SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": ("(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                  "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor"),
    "roi_pool": ("(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width) -> (Tensor, Tensor)"),
    "ps_roi_align": ("(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                     "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)"),
    "ps_roi_pool": ("(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                    "SymInt pooled_width) -> (Tensor, Tensor)"),
    "deform_conv2d": ("(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
                      "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
                      "SymInt dilation_h, SymInt dilation_w, SymInt groups, "
                      "SymInt offset_groups, bool use_mask) -> Tensor"),
}

_OPS: dict[str, Any] = {}  # the CustomOpDefs, kept alive for the process


# -- reference kernels -----------------------------------------------------------------------

def nms_reference(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS: visit boxes by decreasing score (ties: lower index first), keep a box unless
    a kept box overlaps it with IoU > iou_threshold. Indices of kept boxes, by decreasing score."""
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = torch.sort(scores, descending=True, stable=True).indices
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.long, device=dets.device)


def _bilinear_clamped(plane: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """RoIAlign's bilinear sample of `plane` [C, H, W] at points y, x (same shape S): zero
    beyond one pixel outside the map, coordinates clamped to the border inside it. [C, *S]"""
    height, width = plane.shape[-2:]
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y = y.clamp(min=0)
    x = x.clamp(min=0)
    y_low = y.floor().long()
    x_low = x.floor().long()
    y_top = y_low >= height - 1
    x_top = x_low >= width - 1
    y_low = torch.where(y_top, height - 1, y_low)
    x_low = torch.where(x_top, width - 1, x_low)
    y_high = torch.where(y_top, height - 1, y_low + 1)
    x_high = torch.where(x_top, width - 1, x_low + 1)
    y = torch.where(y_top, y_low.to(y.dtype), y)
    x = torch.where(x_top, x_low.to(x.dtype), x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    v = (hy * hx * plane[:, y_low, x_low] + hy * lx * plane[:, y_low, x_high]
         + ly * hx * plane[:, y_high, x_low] + ly * lx * plane[:, y_high, x_high])
    return torch.where(outside, torch.zeros((), dtype=v.dtype), v)


def roi_align_reference(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float,
                        pooled_height: int, pooled_width: int, sampling_ratio: int,
                        aligned: bool) -> torch.Tensor:
    """RoIAlign as torchvision documents it: each bin averages a grid of bilinear samples,
    `sampling_ratio` per side (or ceil(roi size / pooled size) when <= 0); `aligned` shifts the
    box by -0.5 pixel, and without it boxes are at least 1x1."""
    num_rois, channels = rois.shape[0], input.shape[1]
    out = input.new_zeros((num_rois, channels, pooled_height, pooled_width))
    offset = 0.5 if aligned else 0.0
    for k in range(num_rois):
        batch, x1, y1, x2, y2 = rois[k].tolist()
        start_w, start_h = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        roi_w, roi_h = x2 * spatial_scale - offset - start_w, y2 * spatial_scale - offset - start_h
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / pooled_height)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pooled_width)
        count = max(grid_h * grid_w, 1)
        if grid_h <= 0 or grid_w <= 0:
            continue  # empty (degenerate aligned) roi: zeros
        ph = torch.arange(pooled_height, dtype=torch.float64)
        pw = torch.arange(pooled_width, dtype=torch.float64)
        iy = torch.arange(grid_h, dtype=torch.float64)
        ix = torch.arange(grid_w, dtype=torch.float64)
        ys = start_h + ph[:, None] * bin_h + (iy[None, :] + 0.5) * bin_h / grid_h  # [PH, GH]
        xs = start_w + pw[:, None] * bin_w + (ix[None, :] + 0.5) * bin_w / grid_w  # [PW, GW]
        y = ys[:, None, :, None].expand(pooled_height, pooled_width, grid_h, grid_w)
        x = xs[None, :, None, :].expand(pooled_height, pooled_width, grid_h, grid_w)
        dtype = input.dtype
        vals = _bilinear_clamped(input[int(batch)], y.to(dtype), x.to(dtype))
        out[k] = vals.sum(dim=(-1, -2)) / count
    return out


def _round_half_away(v: float) -> int:
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def _pooling_bins(roi: list[float], spatial_scale: float, pooled_height: int,
                  pooled_width: int, height: int, width: int, ftype: Any) -> Any:
    """RoIPool's bins of one box: corners rounded (half away from zero) to pixels, at least
    1x1, floor/ceil bin edges clipped to the map; yields (ph, pw, hs, he, ws, we)."""
    sw, sh, ew, eh = (_round_half_away(float(v) * spatial_scale) for v in roi)
    roi_w, roi_h = max(ew - sw + 1, 1), max(eh - sh + 1, 1)
    bin_h = ftype(roi_h) / ftype(pooled_height)
    bin_w = ftype(roi_w) / ftype(pooled_width)
    for ph in range(pooled_height):
        hs = min(max(int(math.floor(ftype(ph) * bin_h)) + sh, 0), height)
        he = min(max(int(math.ceil(ftype(ph + 1) * bin_h)) + sh, 0), height)
        for pw in range(pooled_width):
            ws = min(max(int(math.floor(ftype(pw) * bin_w)) + sw, 0), width)
            we = min(max(int(math.ceil(ftype(pw + 1) * bin_w)) + sw, 0), width)
            yield ph, pw, hs, he, ws, we


def roi_pool_reference(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float,
                       pooled_height: int, pooled_width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoIPool: box corners rounded (half away from zero) to pixels, at least 1x1, split into
    floor/ceil bins; the max of each bin (0 and argmax -1 for an empty bin) and its flat
    index in the H*W plane."""
    num_rois, channels = rois.shape[0], input.shape[1]
    height, width = input.shape[-2:]
    out = input.new_zeros((num_rois, channels, pooled_height, pooled_width))
    argmax = torch.full(out.shape, -1, dtype=torch.int32)
    ftype = np.float32 if input.dtype != torch.float64 else np.float64
    for k in range(num_rois):
        batch = int(rois[k, 0].item())
        plane = input[batch].reshape(channels, -1)
        for ph, pw, hs, he, ws, we in _pooling_bins(rois[k, 1:].tolist(), spatial_scale,
                                                    pooled_height, pooled_width, height, width,
                                                    ftype):
            if he <= hs or we <= ws:
                continue
            idx = (torch.arange(hs, he)[:, None] * width + torch.arange(ws, we)[None, :]).reshape(-1)
            vals = plane[:, idx]
            best = vals.argmax(dim=1)  # first maximum, as the strict `>` scan
            out[k, :, ph, pw] = vals.gather(1, best[:, None])[:, 0]
            argmax[k, :, ph, pw] = idx[best].to(torch.int32)
    return out, argmax


def ps_roi_align_reference(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float,
                           pooled_height: int, pooled_width: int,
                           sampling_ratio: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Position-sensitive RoIAlign: output channel c of bin (ph, pw) averages input channel
    (c * PH + ph) * PW + pw; always aligned (-0.5 shift), boxes not forced to 1x1... as torchvision:
    its ps_roi_align shifts by 0.5 and clamps sizes to >= 0.1."""
    num_rois, channels = rois.shape[0], input.shape[1]
    out_c = channels // (pooled_height * pooled_width)
    out = input.new_zeros((num_rois, out_c, pooled_height, pooled_width))
    mapping = torch.zeros(out.shape, dtype=torch.int32)
    for k in range(num_rois):
        batch, x1, y1, x2, y2 = rois[k].tolist()
        start_w, start_h = x1 * spatial_scale - 0.5, y1 * spatial_scale - 0.5
        roi_w = max(x2 * spatial_scale - 0.5 - start_w, 0.1)
        roi_h = max(y2 * spatial_scale - 0.5 - start_h, 0.1)
        bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / pooled_height)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pooled_width)
        count = grid_h * grid_w
        for ph in range(pooled_height):
            for pw in range(pooled_width):
                ys = start_h + ph * bin_h + (torch.arange(grid_h, dtype=torch.float64) + 0.5) * bin_h / grid_h
                xs = start_w + pw * bin_w + (torch.arange(grid_w, dtype=torch.float64) + 0.5) * bin_w / grid_w
                y, x = torch.meshgrid(ys, xs, indexing="ij")
                chans = (torch.arange(out_c) * pooled_height + ph) * pooled_width + pw
                plane = input[int(batch)][chans]
                vals = _bilinear_clamped(plane, y.to(input.dtype), x.to(input.dtype))
                out[k, :, ph, pw] = vals.sum(dim=(-1, -2)) / count
                mapping[k, :, ph, pw] = chans.to(torch.int32)
    return out, mapping


def ps_roi_pool_reference(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float,
                          pooled_height: int, pooled_width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Position-sensitive RoIPool: the mean of channel (c * PH + ph) * PW + pw over each bin
    (corners rounded, at least 1x1, floor/ceil bins; empty bins 0)."""
    num_rois, channels = rois.shape[0], input.shape[1]
    height, width = input.shape[-2:]
    out_c = channels // (pooled_height * pooled_width)
    out = input.new_zeros((num_rois, out_c, pooled_height, pooled_width))
    mapping = torch.zeros(out.shape, dtype=torch.int32)
    ftype = np.float32 if input.dtype != torch.float64 else np.float64
    for k in range(num_rois):
        batch = int(rois[k, 0].item())
        for ph, pw, hs, he, ws, we in _pooling_bins(rois[k, 1:].tolist(), spatial_scale,
                                                    pooled_height, pooled_width, height, width,
                                                    ftype):
            chans = (torch.arange(out_c) * pooled_height + ph) * pooled_width + pw
            mapping[k, :, ph, pw] = chans.to(torch.int32)
            if he <= hs or we <= ws:
                continue
            region = input[batch][chans, hs:he, ws:we]
            out[k, :, ph, pw] = region.sum(dim=(-1, -2)) / ((he - hs) * (we - ws))
    return out, mapping


def _bilinear_zero(plane: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Deformable convolution's bilinear sample of `plane` [C, H, W] at points y, x (shape S,
    shared by the channels): corners outside the map count as zero. [C, *S]"""
    channels, height, width = plane.shape
    y_low, x_low = y.floor(), x.floor()
    ly, lx = y - y_low, x - x_low
    y_low, x_low = y_low.long(), x_low.long()
    flat = plane.reshape(channels, -1)

    def corner(yi: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        valid = (yi >= 0) & (yi < height) & (xi >= 0) & (xi < width)
        idx = yi.clamp(0, height - 1) * width + xi.clamp(0, width - 1)
        vals = flat[:, idx.reshape(-1)].reshape(channels, *idx.shape)
        return torch.where(valid, vals, torch.zeros((), dtype=vals.dtype))

    v = ((1 - ly) * (1 - lx) * corner(y_low, x_low) + (1 - ly) * lx * corner(y_low, x_low + 1)
         + ly * (1 - lx) * corner(y_low + 1, x_low) + ly * lx * corner(y_low + 1, x_low + 1))
    inside = (y > -1) & (y < height) & (x > -1) & (x < width)
    return torch.where(inside, v, torch.zeros((), dtype=v.dtype))


def deform_conv2d_reference(input: torch.Tensor, weight: torch.Tensor, offset: torch.Tensor,
                            mask: torch.Tensor, bias: torch.Tensor, stride_h: int, stride_w: int,
                            pad_h: int, pad_w: int, dilation_h: int, dilation_w: int, groups: int,
                            offset_groups: int, use_mask: bool) -> torch.Tensor:
    """Deformable convolution (v1, v2 with `use_mask`): kernel tap (i, j) of output (oh, ow)
    reads the input at (oh*stride - pad + i*dilation + dy, ow*stride - pad + j*dilation + dx),
    bilinear with zeros outside, times the mask; offsets [N, 2*G*kh*kw, oH, oW] hold (dy, dx)
    per offset group G and tap; the columns are then convolved with `weight` in `groups`."""
    n, channels, _, _ = input.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = offset.shape[-2:]
    per_group = channels // offset_groups
    cols = input.new_zeros((n, channels, kh * kw, out_h, out_w))
    base_y = (torch.arange(out_h) * stride_h - pad_h).to(input.dtype)[:, None]
    base_x = (torch.arange(out_w) * stride_w - pad_w).to(input.dtype)[None, :]
    for b in range(n):
        for og in range(offset_groups):
            chans = slice(og * per_group, (og + 1) * per_group)
            for i in range(kh):
                for j in range(kw):
                    tap = i * kw + j
                    dy = offset[b, 2 * (og * kh * kw + tap)]
                    dx = offset[b, 2 * (og * kh * kw + tap) + 1]
                    y = base_y + i * dilation_h + dy
                    x = base_x + j * dilation_w + dx
                    v = _bilinear_zero(input[b, chans], y, x)
                    if use_mask:
                        v = v * mask[b, og * kh * kw + tap]
                    cols[b, chans, tap] = v
    w = weight.reshape(groups, out_channels // groups, channels // groups, kh * kw)
    cols = cols.reshape(n, groups, channels // groups, kh * kw, out_h, out_w)
    out = torch.einsum("gocK,ngcKhw->ngohw", w, cols).reshape(n, out_channels, out_h, out_w)
    return out + bias.reshape(1, -1, 1, 1)


# -- fake kernels (shapes for torch.export) --------------------------------------------------

def _nms_fake(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    torch._check(dets.dim() == 2 and dets.size(1) == 4, lambda: "boxes must be [N, 4]")
    torch._check(scores.dim() == 1 and scores.size(0) == dets.size(0),
                 lambda: "scores must be [N]")
    kept = torch.library.get_ctx().new_dynamic_size()  # data-dependent: 0 <= kept
    return dets.new_empty((kept,), dtype=torch.long)


def _roi_align_fake(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                    aligned):
    torch._check(rois.size(1) == 5, lambda: "rois must be [K, 5]")
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))


def _roi_pool_fake(input, rois, spatial_scale, pooled_height, pooled_width):
    torch._check(rois.size(1) == 5, lambda: "rois must be [K, 5]")
    shape = (rois.size(0), input.size(1), pooled_height, pooled_width)
    return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)


def _ps_fake(input, rois, spatial_scale, pooled_height, pooled_width, *sampling_ratio):
    torch._check(rois.size(1) == 5, lambda: "rois must be [K, 5]")
    shape = (rois.size(0), input.size(1) // (pooled_height * pooled_width), pooled_height,
             pooled_width)
    return input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)


def _deform_conv2d_fake(input, weight, offset, mask, bias, *args):
    return input.new_empty((input.size(0), weight.size(0), offset.size(-2), offset.size(-1)))


_KERNELS = {
    "nms": (nms_reference, _nms_fake),
    "qnms": (nms_reference, _nms_fake),
    "roi_align": (roi_align_reference, _roi_align_fake),
    "roi_pool": (roi_pool_reference, _roi_pool_fake),
    "ps_roi_align": (ps_roi_align_reference, _ps_fake),
    "ps_roi_pool": (ps_roi_pool_reference, _ps_fake),
    "deform_conv2d": (deform_conv2d_reference, _deform_conv2d_fake),
}


def _has_real_ops() -> bool:
    """Whether torchvision's own (compiled) operators are loaded."""
    return hasattr(torch.ops.torchvision, "nms")


def define_ops() -> bool:
    """Define the `torchvision::` operators with the reference kernels, unless they exist.
    True when this process now runs the reference kernels."""
    if _OPS:
        return True
    if _has_real_ops():
        return False
    for name, schema in SCHEMAS.items():
        kernel, fake = _KERNELS[name]
        op = torch.library.custom_op(f"torchvision::{name}", kernel, mutates_args=(),
                                     schema=schema)
        op.register_fake(fake)
        _OPS[name] = op
    return True


def _has_ops() -> bool:
    # A module-level function, not a lambda: torch.jit.script compiles it where torchvision
    # scripts its ops while tracing (`_script_if_tracing`).
    return True


def load_torchvision() -> Any:
    """`torchvision`, importable and with runnable ops on this torch, or None if absent."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    shimmed = define_ops()
    try:
        import torchvision
    except ImportError:
        return None
    if shimmed:
        # torchvision registered its own fake nms/qnms kernels over ours (same shapes). Its
        # Python ops check for the compiled extension before calling the operators: they
        # exist now. roi_align imported the predicate by name, so patch it there too.
        import torchvision.extension as extension

        extension._has_ops = _has_ops
        roi_align_module = sys.modules.get("torchvision.ops.roi_align")
        if roi_align_module is not None and hasattr(roi_align_module, "_has_ops"):
            roi_align_module._has_ops = _has_ops
    return torchvision
