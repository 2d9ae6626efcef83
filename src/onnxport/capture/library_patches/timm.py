"""Capture-only patches of timm's models.

* `models.mobilenetv5.MobileNetV5MultiScaleFusionAdapter.forward`: the fused features brought
  to the output resolution (16x16) in one graph for every size, where timm branches in Python
  on the highest feature resolution (H, W): unchanged if it is 16x16, avg-pooled with kernel
  and stride (H / 16, W / 16) if both divide, bilinearly resized otherwise (the example's
  branch was captured alone: a 256x256 image gives 16x16, so other sizes skipped the resize).
  The replacement computes `adaptive_avg_pool2d(x, 16x16)` and the bilinear resize and picks
  one with a `where` on the divisibility, a tensor: when 16 divides H, adaptive pooling's
  windows [floor(i H / 16), ceil((i + 1) H / 16)) are the pooling windows [i k, (i + 1) k),
  k = H / 16 (and a single element each for H = 16, the identity). The lower resolution
  inputs are resized (nearest) to the highest one unconditionally, where timm resizes those
  smaller than it: a resize to an input's own size is the identity (and an input larger than
  the first fails timm's concatenation).
* `models.tiny_vit.TinyVitBlock.forward`: window attention by one path for every size, where
  timm attends over the whole map if it is exactly one window (`H == W == window`) and
  otherwise pads the map to whole windows only if it is not (`if padding:`), then slices back.
  One window of the whole map is the unwindowed path's attention input, so windowing always
  (with pads that may be 0, and a slice that may keep everything) gives timm's values. The
  windows are gathered (an index per token, a zero row for the padding) rather than cut out
  with views, and gathered back: a map of one window (224: the last two stages) made the
  window counts dims of size 1 in the views, which torch.export specialises (the graph held
  for images up to 224 only); a gather has no such dim. Bit for bit timm's in eager mode.
* `models.mobilevit.MobileVitBlock.forward`: the map always resized (bilinear,
  `align_corners=False`) to whole patches and back, where timm resizes only if a side is not
  a multiple of the patch (`if new_h != H or new_w != W`): a resize to the map's own size
  takes each output pixel from its own input pixel with weight 1 (source coordinate
  (i + 0.5) * 1 - 0.5 = i), the identity in eager mode and in ONNX Resize, so the values
  are timm's (bit for bit in eager mode). (MobileViTv2's block, `MobileVitV2Block`, has the
  same branch and is not patched; `mobilevit_xxs` does not use it.)
* `models.davit.Stem.forward`, `models.davit.Downsample.forward`: the pads to whole strides
  (kernels) written `ceil(size / s) * s - size`, where timm writes `(s - size % s) % s`: both
  are the least p >= 0 that makes size + p a multiple of s, so the values are timm's. The form
  is what differs: torch.export carries each stage's size into the next, and the remainder
  form nests a `Mod` per stage that sympy spends minutes simplifying in every later reshape
  (davit_tiny's dynamic export took 164 s with only its blocks patched, 15 s with these too).
* `models.davit.SpatialBlock.forward`: the windows gathered as TinyViT's are (above), where
  timm pads the map to whole windows (by a pad that may be 0), cuts and merges the windows
  with views, and slices the pad off. Unpatched, torch.export spent over 400 s simplifying
  the views' sizes (the nested floor divisions of the padded size); with the views written
  without them, the window counts are dims of size 1 in the last stage at 224 (a 7 x 7 map,
  window 7), and torch.export decided `batch * windows == batch` on them: the graph attended
  over the whole last-stage map at every size (0.33 off at 256 x 288). A gather has no such
  dim. Bit for bit timm's in eager mode.
* `models.hieradet_sam2.MultiScaleBlock.forward` (SAM2-Hiera): the same for its windowed
  blocks (the global ones run timm's code): the windows gathered with the block's window
  from its input map, and put back with the pooled window into the pooled map, as timm's
  unpartition does at its query-pooling blocks. Timm's own code holds the window counts
  before and after pooling equal (its reshape assumes it); they are, wherever the window
  and the block's input sides are even, which HieraDet ensures (windows 8, 4 and 14 at its
  pooling blocks; its position embedding makes the map a multiple of 8 tokens). Bit for bit
  timm's in eager mode; unpatched, the dynamic export did not finish in 300 s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from onnxport.capture.library_patches.sizes import ceil_to as _ceil_to

from onnxport.capture.library_patches import state


def _msfa_forward(self: Any, inputs: list[torch.Tensor]) -> torch.Tensor:
    """timm's MobileNetV5MultiScaleFusionAdapter.forward without branches on the size."""
    high = inputs[0].shape[-2:]
    resized = [inputs[0]] + [F.interpolate(img, size=high, mode=self.interpolation_mode)
                             for img in inputs[1:]]
    img = self.ffn(torch.cat(resized, dim=1))
    out_h, out_w = self.output_resolution
    divides = torch.scalar_tensor((high[0] % out_h == 0) & (high[1] % out_w == 0),
                                  dtype=torch.bool, device=img.device)
    img = torch.where(divides, F.adaptive_avg_pool2d(img, self.output_resolution),
                      F.interpolate(img, size=self.output_resolution, mode="bilinear"))
    return self.norm(img)


# -- windowed models: TinyViT, MobileViT ------------------------------------------------------

def _window_indices(batch: Any, height: Any, width: Any, window: int,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The gathers that cut a flattened [batch, height, width] map into TinyViT's windows and
    back: for each window token, in timm's order (batch, window row, window column, then
    row-major within the window, over the map padded bottom/right to whole windows), the
    position it reads (batch * height * width, a zero row, in the padding); for each
    position, its token."""
    n_h, n_w = (height + window - 1) // window, (width + window - 1) // window
    area = window * window
    token = torch.arange(batch * n_h * n_w * area, device=device)
    win, within = token // area, token % area
    b, win = win // (n_h * n_w), win % (n_h * n_w)
    row = (win // n_w) * window + within // window
    col = (win % n_w) * window + within % window
    inside = (row < height) & (col < width)
    to_windows = torch.where(inside, (b * height + row) * width + col, batch * height * width)
    position = torch.arange(batch * height * width, device=device)
    col, row, b = position % width, (position // width) % height, position // (height * width)
    from_windows = (((b * n_h + row // window) * n_w + col // window) * area
                    + (row % window) * window + col % window)
    return to_windows, from_windows


def _tiny_vit_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's TinyVitBlock.forward, always windowed, the windows gathered (see above)."""
    B, H, W, C = x.shape
    ws = self.window_size
    shortcut = x
    to_windows, from_windows = _window_indices(B, H, W, ws, x.device)
    rows = torch.cat([x.reshape(B * H * W, C), x.new_zeros(1, C)])
    x = self.attn(rows[to_windows].view(-1, ws * ws, C))
    x = x.reshape(-1, C)[from_windows].view(B, H, W, C)
    x = shortcut + self.drop_path1(x)
    x = self.local_conv(x.permute(0, 3, 1, 2))
    x = x.reshape(B, C, H * W).transpose(1, 2)
    x = x + self.drop_path2(self.mlp(x))
    return x.view(B, H, W, C)


def _mobilevit_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's MobileVitBlock.forward, always resized to whole patches and back (a bilinear
    resize to the map's own size is the identity)."""
    shortcut = x
    x = self.conv_1x1(self.conv_kxk(x))
    patch_h, patch_w = self.patch_size
    B, C, H, W = x.shape
    n_h, n_w = (H + patch_h - 1) // patch_h, (W + patch_w - 1) // patch_w
    num_patches = n_h * n_w
    x = F.interpolate(x, size=(n_h * patch_h, n_w * patch_w), mode="bilinear",
                      align_corners=False)
    # [B, C, H, W] -> [B * C * n_h, n_w, p_h, p_w] -> [B * P, N, C]
    x = x.reshape(B * C * n_h, patch_h, n_w, patch_w).transpose(1, 2)
    x = x.reshape(B, C, num_patches, self.patch_area).transpose(1, 3).reshape(
        B * self.patch_area, num_patches, -1)
    x = self.norm(self.transformer(x))
    # [B, P, N, C] -> [B * C * n_h, n_w, p_h, p_w] -> [B, C, H, W]
    x = x.contiguous().view(B, self.patch_area, num_patches, -1)
    x = x.transpose(1, 3).reshape(B * C * n_h, n_w, patch_h, patch_w)
    x = x.transpose(1, 2).reshape(B, C, n_h * patch_h, n_w * patch_w)
    x = F.interpolate(x, size=(H, W), mode="bilinear", align_corners=False)
    x = self.conv_proj(x)
    if self.conv_fusion is not None:
        x = self.conv_fusion(torch.cat((shortcut, x), dim=1))
    return x


# -- windowed models: DaViT, SAM2-Hiera -------------------------------------------------------


def _davit_stem_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's DaViT Stem.forward, the pads written as whole strides minus the size."""
    _, _, H, W = x.shape
    stride_h, stride_w = self.stride
    x = F.pad(x, (0, _ceil_to(W, stride_w) - W, 0, _ceil_to(H, stride_h) - H))
    return self.norm(self.conv(x))


def _davit_downsample_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's DaViT Downsample.forward, the pads written as whole kernels minus the size."""
    _, _, H, W = x.shape
    x = self.norm(x)
    if self.even_k:
        k_h, k_w = self.conv.kernel_size
        x = F.pad(x, (0, _ceil_to(W, k_w) - W, 0, _ceil_to(H, k_h) - H))
    return self.conv(x)


def _davit_spatial_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's DaViT SpatialBlock.forward, the windows gathered (`_window_indices`)."""
    window_h, window_w = self.window_size
    if window_h != window_w:
        return state.ORIGINALS[("timm.models.davit.SpatialBlock", "forward")](self, x)
    B, C, H, W = x.shape
    shortcut = self.cpe1(x).flatten(2).transpose(1, 2)
    x = self.norm1(shortcut)
    to_windows, from_windows = _window_indices(B, H, W, window_h, x.device)
    rows = torch.cat([x.reshape(B * H * W, C), x.new_zeros(1, C)])
    x = self.attn(rows[to_windows].view(-1, window_h * window_w, C))
    x = x.reshape(-1, C)[from_windows].view(B, H * W, C)
    x = shortcut + self.drop_path1(x)
    x = self.cpe2(x.transpose(1, 2).view(B, C, H, W))
    if self.mlp is not None:
        x = x.flatten(2).transpose(1, 2)
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        x = x.transpose(1, 2).view(B, C, H, W)
    return x


def _sam2_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """timm's hieradet_sam2 MultiScaleBlock.forward, the windows gathered (`_window_indices`):
    cut with the block's window from its input map, put back with the pooled window into the
    pooled map (the shortcut's)."""
    window = self.window_size
    pooled = (window[0] // self.q_stride[0], window[1] // self.q_stride[1]) \
        if self.q_stride is not None else window
    if not self.is_windowed or window[0] != window[1] or pooled[0] != pooled[1]:
        return state.ORIGINALS[("timm.models.hieradet_sam2.MultiScaleBlock", "forward")](
            self, x)
    shortcut = x
    x = self.norm1(x)
    if self.dim != self.dim_out:
        shortcut = self.proj(x)
        if self.pool is not None:
            shortcut = self.pool(shortcut.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    B, H, W, C = x.shape
    to_windows, from_windows = _window_indices(B, H, W, window[0], x.device)
    rows = torch.cat([x.reshape(B * H * W, C), x.new_zeros(1, C)])
    x = self.attn(rows[to_windows].view(-1, window[0], window[1], C))
    H, W, C = shortcut.shape[1], shortcut.shape[2], x.shape[-1]
    if pooled != window:
        _, from_windows = _window_indices(B, H, W, pooled[0], x.device)
    x = x.reshape(-1, C)[from_windows].view(B, H, W, C)
    x = shortcut + self.drop_path1(self.ls1(x))
    return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("timm.models.mobilenetv5.MobileNetV5MultiScaleFusionAdapter", "forward"): _msfa_forward,
    ("timm.models.tiny_vit.TinyVitBlock", "forward"): _tiny_vit_block_forward,
    ("timm.models.mobilevit.MobileVitBlock", "forward"): _mobilevit_block_forward,
    ("timm.models.davit.Stem", "forward"): _davit_stem_forward,
    ("timm.models.davit.Downsample", "forward"): _davit_downsample_forward,
    ("timm.models.davit.SpatialBlock", "forward"): _davit_spatial_block_forward,
    ("timm.models.hieradet_sam2.MultiScaleBlock", "forward"): _sam2_block_forward,
}
