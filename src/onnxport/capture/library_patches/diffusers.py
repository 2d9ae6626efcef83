"""Capture-only patches of diffusers' models.

* `models.transformers.transformer_lumina2.Lumina2Transformer2DModel.forward`: each sample's
  caption length read as a tensor, where diffusers reads the lengths into a Python list
  (`.tolist()`) and loops over the batch to place captions and image tokens, rotary positions
  and the output (a data-dependent loop a dynamic batch cannot unroll, and `set()` of the
  lengths, which symbolic sizes cannot hash). The joint sequence is padded to the caption's
  slots plus the image tokens, where diffusers pads it to the longest caption, and always
  masked: the tokens past each caption attend to and are attended by nothing, so every
  output is diffusers' (equal in eager mode, bit for bit, for captions of any lengths).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch


def _lumina2_positions(rope: Any, hidden_states: torch.Tensor, caption: torch.Tensor,
                       caption_slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lumina2's (caption, image, joint) rotary embeddings for captions of `caption` tokens
    ([batch]) in `caption_slots` slots: caption token j at (j, 0, 0), image token k after the
    caption at (caption, row, column), zero positions after the image (the joint sequence is
    padded to `caption_slots` + image tokens)."""
    batch, _, height, width = hidden_states.shape
    columns = width // rope.patch_size
    image = (height // rope.patch_size) * columns
    device = hidden_states.device
    cap = caption[:, None]
    slot = torch.arange(caption_slots + image, device=device)[None].expand(batch, -1)
    in_caption = slot < cap
    k = slot - cap
    in_image = (k >= 0) & (k < image)
    k = k.clamp(0, image - 1)
    zero = torch.zeros_like(slot)
    positions = torch.stack([torch.where(in_caption, slot, torch.where(in_image, cap.expand_as(slot), zero)),
                             torch.where(in_image, k // columns, zero),
                             torch.where(in_image, k % columns, zero)], dim=-1)
    joint = rope._get_freqs_cis(positions.to(torch.int32))
    caption_freqs = joint[:, :caption_slots]
    caption_freqs = torch.where(in_caption[:, :caption_slots, None], caption_freqs,
                                torch.zeros_like(caption_freqs))
    k = torch.arange(image, device=device)[None].expand(batch, -1)
    image_positions = torch.stack([cap.expand_as(k), k // columns, k % columns], dim=-1)
    return caption_freqs, rope._get_freqs_cis(image_positions.to(torch.int32)), joint


def _lumina2_forward(self: Any, hidden_states: torch.Tensor, timestep: torch.Tensor,
                     encoder_hidden_states: torch.Tensor, encoder_attention_mask: torch.Tensor,
                     attention_kwargs: dict[str, Any] | None = None,
                     return_dict: bool = True) -> Any:
    """Lumina2's forward with every sample's caption length a tensor: the joint sequence is
    padded to the caption slots + image tokens (diffusers pads it to the longest caption),
    with the mask always applied (diffusers drops it when every caption has the same length,
    where it is all true), gathered instead of copied sample by sample."""
    batch, _, height, width = hidden_states.shape
    p = self.config.patch_size
    temb, encoder_hidden_states = self.time_caption_embed(hidden_states, timestep,
                                                          encoder_hidden_states)
    caption = encoder_attention_mask.sum(dim=1)
    slots = encoder_attention_mask.shape[1]
    caption_rope, image_rope, joint_rope = _lumina2_positions(self.rope_embedder, hidden_states,
                                                              caption, slots)
    patches = (hidden_states.view(batch, hidden_states.shape[1], height // p, p, width // p, p)
               .permute(0, 2, 4, 3, 5, 1).flatten(3).flatten(1, 2))
    image_tokens = self.x_embedder(patches)
    for layer in self.context_refiner:
        encoder_hidden_states = layer(encoder_hidden_states, encoder_attention_mask, caption_rope)
    for layer in self.noise_refiner:
        image_tokens = layer(image_tokens, None, image_rope, temb)
    image = image_tokens.shape[1]
    cap = caption[:, None]
    slot = torch.arange(slots + image, device=hidden_states.device)[None].expand(batch, -1)
    source = torch.where(slot < cap, slot, slots + (slot - cap).clamp(0, image - 1))
    joint = torch.cat([encoder_hidden_states, image_tokens], dim=1)
    joint = joint.gather(1, source[..., None].expand(-1, -1, joint.shape[-1]))
    valid = slot < cap + image
    joint = torch.where(valid[..., None], joint, torch.zeros_like(joint))
    for layer in self.layers:
        joint = layer(joint, valid, joint_rope, temb)
    joint = self.norm_out(joint, temb)
    picked = (cap + torch.arange(image, device=joint.device)[None])[..., None]
    out = joint.gather(1, picked.expand(-1, -1, joint.shape[-1]))
    out = (out.view(batch, height // p, width // p, p, p, self.out_channels)
           .permute(0, 5, 1, 3, 2, 4).flatten(4, 5).flatten(2, 3))
    if not return_dict:
        return (out,)
    module = sys.modules[type(self).__module__]
    return module.Transformer2DModelOutput(sample=out)


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("diffusers.models.transformers.transformer_lumina2.Lumina2Transformer2DModel", "forward"):
        _lumina2_forward,
}
