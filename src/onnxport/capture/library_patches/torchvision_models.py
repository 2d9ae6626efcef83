"""Capture-only patches of torchvision's Swin models (swin_*, swin_v2_*, swin3d_*).

torchvision's Swin attention decides with Python branches on the map's size whether a block
shifts its windows (and masks them) and, in Swin3D, how large its windows are: a graph
captured with a dynamic height and width held only for sizes where the branches go the way
they went for the example (swin_t at 224: up to 227). The patches make those decisions in the
graph, so one graph holds at every size:

* `models.swin_transformer.shifted_window_attention`: torchvision's attention with the shift
  along each side a symbolic size, 0 where one window covers the padded side
  (`torch.sym_ite`, torchvision's `if window >= padded`), the roll always done (by 0 it is the
  identity) and the shifted windows' mask always added in a block that shifts (torchvision
  skips both when no side shifts). The mask gives token (h, w) the region 3 r(h) + r(w), with
  r(p) = (p >= P - window) + (p >= P - shift) on a side padded to P, and -100 between tokens
  of different regions, else 0. On a side that shifts, r is torchvision's region (its slices
  [0, P - window), [P - window, P - shift), [P - shift, P)); on one that does not, r is
  constant within each window (P is a multiple of the window), as torchvision's regions are
  (its slice [-0:] covers the side), and the mask compares tokens of one window only: the
  masks are equal, and 0 when no side shifts (adding it changes no score). Bit for bit
  torchvision's in eager mode.
* `models.video.swin_transformer.ShiftedWindowAttention3d.forward`: torchvision shrinks the
  window to a side no longer than it (and does not shift along it); the shrunk window sets the
  relative position bias (the first volume rows and columns of the full window's index) and
  the attention's shape. Along a dynamic side the patch keeps the full window, pads the side
  to it and masks the keys past the side (-inf: softmax gives them weight 0), each token's
  bias indexed by its position flattened in the shrunk window (min(side, window), a symbolic
  size): torchvision's attention over the side's tokens, up to float rounding (the sums run
  over more, zero, terms). Static sides (the clip's frames) keep torchvision's shrunk window,
  bit for bit.
* `models.swin_transformer._patch_merging_pad`, `models.video.swin_transformer.
  _compute_pad_size_3d`, and the attention's own pads: each pad to a multiple m written
  `ceil(size / m) * m - size` (`_ceil_to`), where torchvision writes `(m - size % m) % m`
  (equal for every size). The remainder form nests a `Mod` per stage, which sympy spent
  minutes simplifying (Swin3D's dynamic export: 457 s, 16 s with this form).

The windows are cut with views into [windows * batch, volume, C], the windows first: at 224
the last stage is one window, and torch.export, deciding `batch * 1 == batch` in a view that
merges the batch with the window counts after it, or broadcasting a window count of 1, fixes
the count at 1 (ONNX Runtime then failed at sizes with more windows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from onnxport.capture.library_patches.sizes import ceil_to as _ceil_to



def _patch_merging_pad(x: torch.Tensor) -> torch.Tensor:
    """torchvision's `_patch_merging_pad`, the pads to even sides as `_ceil_to` writes them."""
    height, width = x.shape[-3:-1]
    x = F.pad(x, (0, 0, 0, _ceil_to(width, 2) - width, 0, _ceil_to(height, 2) - height))
    return torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                      x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)


def _compute_pad_size_3d(size_dhw: tuple[Any, Any, Any], patch_size: tuple[int, int, int]
                         ) -> tuple[Any, Any, Any]:
    """torchvision's `_compute_pad_size_3d`, the pads as `_ceil_to` writes them."""
    pads = [_ceil_to(s, p) - s for s, p in zip(size_dhw, patch_size)]
    return pads[0], pads[1], pads[2]


def _effective_shift(window: int, padded: Any, shift: int) -> Any:
    """torchvision's shift along a side padded to `padded`: none if one window covers it."""
    if shift == 0:
        return 0
    return torch.sym_ite(window >= padded, 0, shift)


def _partition(x: torch.Tensor, window: Sequence[int]) -> torch.Tensor:
    """[B, *padded, C] -> [windows * B, window volume, C], ordered by window, then image (no
    dim is a window count, and none merges the batch with the counts after it)."""
    b, *padded, c = x.shape
    k = len(window)
    counts = [p // w for p, w in zip(padded, window)]
    grid = [n for pair in zip(counts, window) for n in pair]
    order = [*range(1, 2 * k, 2), 0, *range(2, 2 * k + 1, 2), 2 * k + 1]
    x = x.view(b, *grid, c).permute(order).contiguous()
    return x.view(math.prod(counts) * b, math.prod(window), c)


def _merge(x: torch.Tensor, batch: Any, padded: Sequence[Any],
           window: Sequence[int]) -> torch.Tensor:
    """The inverse of `_partition`: [windows * B, volume, C] -> [B, *padded, C]."""
    k = len(window)
    counts = [p // w for p, w in zip(padded, window)]
    order = [k, *(a for i in range(k) for a in (i, k + 1 + i)), 2 * k + 1]
    x = x.view(*counts, batch, *window, x.shape[-1]).permute(order).contiguous()
    return x.view(batch, *padded, x.shape[-1])


def _shift_mask(padded: Sequence[Any], window: Sequence[int], shift: Sequence[Any],
                batch: Any, like: torch.Tensor) -> torch.Tensor:
    """The shifted windows' mask, [windows * B, 1, volume, volume]: -100 between tokens of
    different regions (r(p) = (p >= P - window) + (p >= P - shift) on each side of padded
    size P), else 0."""
    k = len(window)
    region = like.new_zeros((), dtype=torch.int64)
    for axis, (p, w, s) in enumerate(zip(padded, window, shift)):
        position = torch.arange(p, device=like.device)
        side = (position >= p - w).to(torch.int64) + (position >= p - s).to(torch.int64)
        region = region * 3 + side.view([-1 if i == axis else 1 for i in range(k)])
    ids = _partition(region.expand(batch, *padded).unsqueeze(-1), window)[..., 0]
    differ = ids[:, None, :] != ids[:, :, None]
    return torch.where(differ, -100.0, 0.0).to(like.dtype).unsqueeze(1)


def _window_attention(x: torch.Tensor, qkv_weight: torch.Tensor, proj_weight: torch.Tensor,
                      bias: torch.Tensor, window: Sequence[int], num_heads: int,
                      shift: Sequence[int], attention_dropout: float, dropout: float,
                      qkv_bias: torch.Tensor | None, proj_bias: torch.Tensor | None,
                      logit_scale: torch.Tensor | None, training: bool,
                      key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """torchvision's (shifted) window attention on [B, *sides, C] in windows of `window`, the
    shifts dropped along sides one window covers without a branch on the sides' sizes;
    `key_mask` ([volume], 0 or -inf) is added to every window's scores."""
    b, *sides, c = x.shape
    k = len(window)
    padded = [_ceil_to(side, w) for side, w in zip(sides, window)]
    x = F.pad(x, [0, 0, *(v for p, side in zip(reversed(padded), reversed(sides))
                          for v in (0, p - side))])
    shifted = any(s != 0 for s in shift)
    shifts = [_effective_shift(w, p, s) for w, p, s in zip(window, padded, shift)]
    dims = list(range(1, k + 1))
    if shifted:
        x = torch.roll(x, [-s for s in shifts], dims)
    x = _partition(x, window)
    windows, volume = math.prod(p // w for p, w in zip(padded, window)) * b, math.prod(window)

    if logit_scale is not None and qkv_bias is not None:
        third = qkv_bias.numel() // 3
        qkv_bias = torch.cat([qkv_bias[:third], torch.zeros_like(qkv_bias[third:2 * third]),
                              qkv_bias[2 * third:]])
    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(windows, volume, 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, keys, values = qkv[0], qkv[1], qkv[2]
    if logit_scale is not None:
        attn = F.normalize(q, dim=-1) @ F.normalize(keys, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(logit_scale, max=math.log(100.0)).exp()
    else:
        attn = (q * (c // num_heads) ** -0.5).matmul(keys.transpose(-2, -1))
    attn = attn + bias
    if shifted:
        mask = _shift_mask(padded, window, shifts, b, attn)
        attn = attn + (mask if key_mask is None else mask + key_mask)
    elif key_mask is not None:
        attn = attn + key_mask
    attn = F.dropout(F.softmax(attn, dim=-1), p=attention_dropout, training=training)

    x = attn.matmul(values).transpose(1, 2).reshape(windows, volume, c)
    x = F.dropout(F.linear(x, proj_weight, proj_bias), p=dropout, training=training)
    x = _merge(x, b, padded, window)
    if shifted:
        x = torch.roll(x, list(shifts), dims)
    return x[(slice(None), *(slice(0, side) for side in sides))].contiguous()


def _shifted_window_attention(input: torch.Tensor, qkv_weight: torch.Tensor,
                              proj_weight: torch.Tensor, relative_position_bias: torch.Tensor,
                              window_size: list[int], num_heads: int, shift_size: list[int],
                              attention_dropout: float = 0.0, dropout: float = 0.0,
                              qkv_bias: torch.Tensor | None = None,
                              proj_bias: torch.Tensor | None = None,
                              logit_scale: torch.Tensor | None = None,
                              training: bool = True) -> torch.Tensor:
    """torchvision's `shifted_window_attention` without branches on the map's size."""
    return _window_attention(input, qkv_weight, proj_weight, relative_position_bias,
                             window_size, num_heads, shift_size, attention_dropout, dropout,
                             qkv_bias, proj_bias, logit_scale, training)


def _swin3d_attention(module: Any, x: torch.Tensor, window: Sequence[int]) -> torch.Tensor:
    """`ShiftedWindowAttention3d` (`module`) on `x` [B, T, H, W, C] in windows of `window`:
    along each side, torchvision's window or, for a side shorter than it, the side (the
    window torchvision shrinks to)."""
    sides = x.shape[1:4]
    shrunk = [torch.sym_min(side, w) for side, w in zip(sides, module.window_size)]
    position = [torch.arange(w, device=x.device) for w in window]
    # each token's position flattened in the shrunk window, which indexes torchvision's bias
    flat = (position[0][:, None, None] * (shrunk[1] * shrunk[2])
            + position[1][None, :, None] * shrunk[2] + position[2][None, None, :]).reshape(-1)
    index = module.relative_position_index[flat[:, None], flat[None, :]]
    bias = module.relative_position_bias_table[index].permute(2, 0, 1).contiguous().unsqueeze(0)
    key_mask = None
    if not all(isinstance(s, int) and s == w for s, w in zip(shrunk, window)):
        inside = ((position[0] < shrunk[0])[:, None, None] & (position[1] < shrunk[1])[:, None]
                  & (position[2] < shrunk[2])).reshape(-1)
        key_mask = torch.where(inside, 0.0, float("-inf")).to(x.dtype)
    return _window_attention(x, module.qkv.weight, module.proj.weight, bias, window,
                             module.num_heads, module.shift_size, module.attention_dropout,
                             module.dropout, module.qkv.bias, module.proj.bias, None,
                             module.training, key_mask)


def _swin3d_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """torchvision's forward, its full window along the dynamic sides."""
    window = [w if isinstance(side, torch.SymInt) else min(side, w)
              for side, w in zip(x.shape[1:4], self.window_size)]
    return _swin3d_attention(self, x, window)


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("torchvision.models.swin_transformer", "shifted_window_attention"):
        _shifted_window_attention,
    ("torchvision.models.video.swin_transformer.ShiftedWindowAttention3d", "forward"):
        _swin3d_forward,
    ("torchvision.models.swin_transformer", "_patch_merging_pad"): _patch_merging_pad,
    ("torchvision.models.video.swin_transformer", "_compute_pad_size_3d"): _compute_pad_size_3d,
}
