"""The vision and diffusion model suite: cases built from code with random weights.

Shared by `benchmarks/bench_vision.py` (every case, onnxport beside torch.onnx) and
`tests/vision/test_models.py` (a sample, in CI). Nothing is downloaded: every model is built
from its constructor or a small config, `pretrained=False` / `weights=None`.

Sources:

* `timm`: one model per `timm.list_modules()` family, the one with the fewest parameters
  (`TIMM`, measured on the meta device), at its `pretrained_cfg` input size, scaled down by the least whole
  factor to `TIMM_MAX_SIZE` or below where the model is not fixed-size (sam2's 896 -> 224,
  DeepSeek's 546 -> 182, a multiple of its patch size 14);
* `torchvision`: classification, one model per family (the smallest), and segmentation;
* `video`: torchvision's video classifiers; `flow`: RAFT (raft_small);
* `diffusers`: UNet2DConditionModel, UNet2DModel, AutoencoderKL encode and decode, and the
  DiT-style transformers that build from a small config.

Every case names its graph inputs and outputs (`images`, `sample`, `latent`, `logits`) and its
dynamic dims for what they are (`batch`, `height`, `width`), through the public API:
`input_names`/`output_names` and `dynamic_shapes` with string dims.

Each case is exported twice: static at batch 2 and its size, run at the same inputs; dynamic
(`batch`, plus `height`/`width` where the model allows another size: eager PyTorch runs at
`size2`), run at batch 3 and `size2`. `call` is the export call, as docs/models.md shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

# The transformers zoo's tolerance (tests/models/zoo.py): ONNX Runtime's float32 kernels
# accumulate in another order than ATen's.
RTOL, ATOL = 1e-3, 1e-4
BATCH, BATCH2 = 2, 3
SPATIAL = ("height", "width", "frames", "image_tokens")

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Case:
    """One model: how to build it, its inputs at a batch and size, and its names.

    Attributes:
        name: `<source>/<model>`.
        source: timm, torchvision, segmentation, video, flow or diffusers.
        build: The model, eval mode, random weights.
        inputs: (batch, size) -> (args, kwargs).
        axes: {input name: {axis: dim name}} for every input with a dynamic axis; the names
            in SPATIAL are dropped when the model is fixed-size.
        size: The size exported at ((H, W) or what `inputs` reads).
        size2: Another size the dynamic export runs at; None: the model fixes its size.
        input_names: Graph input names for positional args (None: forward's names).
        output_names: Graph output names.
        tolerance: (rtol, atol) against eager PyTorch.
    """

    name: str
    source: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, tuple[int, ...]], Inputs]
    axes: dict[str, dict[int, str]]
    size: tuple[int, ...]
    size2: tuple[int, ...] | None
    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    tolerance: tuple[float, float] = (RTOL, ATOL)

    def dynamic_shapes(self, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                       spatial: bool) -> Any:
        """The `dynamic_shapes` for these inputs: string dims, spatial ones only if asked."""
        def spec(name: str, value: Any) -> Any:
            axes = {a: n for a, n in self.axes.get(name, {}).items() if spatial or n not in SPATIAL}
            if axes:
                return axes
            # torch.export wants a container input's spec to have its structure.
            return torch.utils._pytree.tree_map(lambda _: None, value)

        if args:
            return tuple(spec(n, v) for n, v in zip(self.input_names or (), args))
        return {k: spec(k, v) for k, v in kwargs.items()}

    def export_kwargs(self, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                      dynamic: bool, spatial: bool) -> dict[str, Any]:
        """The keyword arguments of `export` (onnxport's and torch.onnx's) for one variant."""
        out: dict[str, Any] = {}
        if self.input_names:
            out["input_names"] = list(self.input_names)
        if self.output_names:
            out["output_names"] = list(self.output_names)
        if dynamic:
            out["dynamic_shapes"] = self.dynamic_shapes(args, kwargs, spatial=spatial)
        return out

    @property
    def call(self) -> str:
        """The export call, for docs/models.md."""
        args, kwargs = self.inputs(BATCH, self.size)
        spec = self.dynamic_shapes(args, kwargs, spatial=self.size2 is not None)
        names = list(self.input_names or ())
        first = "()" if not args else f"({names[0]},)" if len(names) == 1 else \
            f"({', '.join(names)})"
        parts = [f"onnxport.export(model, {first}"]
        if kwargs:
            parts.append("kwargs=" + "{" + ", ".join(
                f'"{k}": {k}' if isinstance(v, torch.Tensor) else f'"{k}": {v!r}'
                for k, v in kwargs.items()) + "}")
        if self.input_names:
            parts.append(f"input_names={list(self.input_names)}")
        if self.output_names:
            parts.append(f"output_names={list(self.output_names)}")
        parts.append(f"dynamic_shapes={_spec_text(spec)}")
        return ", ".join(parts) + ")"


def _spec_text(spec: Any) -> str:
    if isinstance(spec, dict) and all(isinstance(k, str) for k in spec):
        return "{" + ", ".join(f'"{k}": {_spec_text(v)}' for k, v in spec.items()
                               if v is not None) + "}"
    if isinstance(spec, tuple):
        return "(" + ", ".join(_spec_text(v) for v in spec) + ("," if len(spec) == 1 else "") + ")"
    if isinstance(spec, dict):
        return "{" + ", ".join(f'{k}: "{v}"' for k, v in spec.items()) + "}"
    return repr(spec)


def _eval(model: torch.nn.Module) -> torch.nn.Module:
    return model.eval()


def _images(channels: int = 3) -> Callable[[int, tuple[int, ...]], Inputs]:
    def make(batch: int, size: tuple[int, ...]) -> Inputs:
        return (torch.randn(batch, channels, *size),), {}
    return make


IMAGE_AXES = {"images": {0: "batch", 2: "height", 3: "width"}}
VIDEO_AXES = {"videos": {0: "batch", 3: "height", 4: "width"}}


# -- timm ----------------------------------------------------------------------------------------
# Family -> (model with the fewest parameters, pretrained_cfg input size (H, W), fixed size).
TIMM: dict[str, tuple[str, tuple[int, int], bool]] = {
    "beit": ("beit_base_patch16_224", (224, 224), True),
    "byoanet": ("halonet_h1", (256, 256), False),
    "byobnet": ("test_byobnet", (160, 160), False),
    "cait": ("cait_xxs24_224", (224, 224), True),
    "coat": ("coat_tiny", (224, 224), True),
    "convit": ("convit_tiny", (224, 224), True),
    "convmixer": ("convmixer_768_32", (224, 224), False),
    "convnext": ("test_convnext", (160, 160), False),
    "cpubone": ("cpubone_nano", (224, 224), False),
    "crossvit": ("crossvit_tiny_240", (240, 240), True),
    "csatv2": ("csatv2", (512, 512), False),
    "cspnet": ("cs3darknet_focus_s", (256, 256), False),
    "cspnext": ("cspnext_tiny", (224, 224), False),
    "davit": ("davit_tiny", (224, 224), False),
    "deepseek_vit": ("deepseek_vit_412m", (546, 546), False),
    "deit": ("deit_tiny_patch16_224", (224, 224), True),
    "densenet": ("densenet121", (224, 224), False),
    "dla": ("dla46x_c", (224, 224), False),
    "dpn": ("dpn48b", (224, 224), False),
    "edgenext": ("edgenext_xx_small", (256, 256), False),
    "efficientformer": ("efficientformer_l1", (224, 224), True),
    "efficientformer_v2": ("efficientformerv2_s0", (224, 224), True),
    "efficientnet": ("test_efficientnet", (160, 160), False),
    "efficientvim": ("efficientvim_m1", (224, 224), False),
    "efficientvit_mit": ("efficientvit_b0", (224, 224), False),
    "efficientvit_msra": ("efficientvit_m0", (224, 224), True),
    "eva": ("vit_tiny_patch16_dinov3_qkvb", (256, 256), True),
    "fasternet": ("fasternet_t0", (224, 224), False),
    "fastvit": ("fastvit_t8", (256, 256), False),
    "focalnet": ("focalnet_tiny_srf", (224, 224), False),
    "gcvit": ("gcvit_xxtiny", (224, 224), True),
    "gemma4_vit": ("gemma4_vit_167m", (768, 768), False),
    "ghostnet": ("ghostnet_050", (224, 224), False),
    "hardcorenas": ("hardcorenas_b", (224, 224), False),
    "hgnet": ("hgnetv2_b0", (224, 224), False),
    "hiera": ("hiera_tiny_224", (224, 224), True),
    "hieradet_sam2": ("sam2_hiera_tiny", (896, 896), False),
    "hrnet": ("hrnet_w18_small", (224, 224), False),
    "iformer": ("iformer_t", (224, 224), False),
    "inception_next": ("inception_next_atto", (224, 224), False),
    "inception_resnet_v2": ("inception_resnet_v2", (299, 299), False),
    "inception_v3": ("inception_v3", (299, 299), False),
    "inception_v4": ("inception_v4", (299, 299), False),
    "lcnetv2": ("lcnetv2_small", (224, 224), False),
    "levit": ("levit_128s", (224, 224), True),
    "lowformer": ("lowformer_b0", (224, 224), False),
    "mambaout": ("test_mambaout", (160, 160), False),
    "maxxvit": ("test_coatnet", (160, 160), True),
    "metaformer": ("poolformerv2_s12", (224, 224), False),
    "mlp_mixer": ("gmlp_ti16_224", (224, 224), True),
    "mobilenetv3": ("mobilenetv3_small_050", (224, 224), False),
    "mobilenetv5": ("mobilenetv5_base", (256, 256), False),
    "mobilevit": ("mobilevit_xxs", (256, 256), False),
    "mvitv2": ("mvitv2_tiny", (224, 224), True),
    "naflexvit": ("naflexvit_base_patch16_parfac_gap", (384, 384), False),
    "nasnet": ("nasnetalarge", (331, 331), False),
    "nest": ("nest_tiny", (224, 224), True),
    "nextvit": ("nextvit_small", (224, 224), False),
    "nfnet": ("test_nfnet", (160, 160), False),
    "pit": ("pit_ti_224", (224, 224), True),
    "pnasnet": ("pnasnet5large", (331, 331), False),
    "pvt_v2": ("pvt_v2_b0", (224, 224), False),
    "qwen3_vit": ("qwen3_vit_88m", (768, 768), False),
    "rdnet": ("rdnet_tiny", (224, 224), False),
    "regnet": ("regnetx_002", (224, 224), False),
    "repghost": ("repghostnet_050", (224, 224), False),
    "repvit": ("repvit_m1", (224, 224), False),
    "res2net": ("res2next50", (224, 224), False),
    "resnest": ("resnest14d", (224, 224), False),
    "resnet": ("test_resnet", (160, 160), False),
    "resnetv2": ("resnetv2_18", (224, 224), False),
    "rexnet": ("rexnet_100", (224, 224), False),
    "selecsls": ("selecsls42", (224, 224), False),
    "senet": ("legacy_seresnet18", (224, 224), False),
    "sequencer": ("sequencer2d_s", (224, 224), True),
    "shvit": ("shvit_s1", (224, 224), False),
    "sknet": ("skresnet18", (224, 224), False),
    "starnet": ("starnet_s050", (224, 224), False),
    "swiftformer": ("swiftformer_xs", (224, 224), True),
    "swin_transformer": ("swin_tiny_patch4_window7_224", (224, 224), True),
    "swin_transformer_v2": ("swinv2_tiny_window8_256", (256, 256), True),
    "swin_transformer_v2_cr": ("swinv2_cr_tiny_224", (224, 224), True),
    "tiny_vit": ("tiny_vit_5m_224", (224, 224), False),
    "tnt": ("tnt_s_legacy_patch16_224", (224, 224), True),
    "tresnet": ("tresnet_m", (224, 224), False),
    "twins": ("twins_svt_small", (224, 224), True),
    "vgg": ("vgg11", (224, 224), False),
    "visformer": ("visformer_tiny", (224, 224), True),
    "vision_transformer": ("test_vit", (160, 160), True),
    "vision_transformer_hybrid": ("vit_tiny_r_s16_p8_224", (224, 224), True),
    "vision_transformer_relpos": ("test_vit_relpos", (160, 160), True),
    "vision_transformer_sam": ("samvit_base_patch16_224", (224, 224), True),
    "vitamin": ("vitamin_small_224", (224, 224), True),
    "volo": ("volo_d1_224", (224, 224), True),
    "vovnet": ("ese_vovnet19b_slim_dw", (224, 224), False),
    "xception": ("legacy_xception", (299, 299), False),
    "xception_aligned": ("xception41p", (299, 299), False),
    "xcit": ("xcit_nano_12_p8_224", (224, 224), True),
}
TIMM_MAX_SIZE = 256


def _default_layer_init(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            module.reset_parameters()


def _unit_attention_logits(model: torch.nn.Module) -> None:
    # RMS-normalised q and k with weight 1 and scale 1.0: logits of std sqrt(head_dim)
    for module in model.modules():
        if hasattr(module, "q_norm") and hasattr(module, "k_norm"):
            for norm in (module.q_norm, module.k_norm):
                torch.nn.init.constant_(norm.weight, norm.weight.shape[0] ** -0.25)


# Models whose random init makes eager float32 itself miss the tolerance against float64
# (measured at batch 3 and size2), re-initialised so that it does not:
# * Inception v3's truncated normal (std 0.1 at every fan-in) gives logits ~3e12 with 2e6 of
#   float32 noise; Visformer's logits ~380 are 3e-3 from float64: PyTorch's default layer
#   init, as torchvision's inception_v3 gets (init_weights=False); logits 0.02 and 0.17,
#   1e-9 and 3e-8 from float64;
# * Gemma 4 ViT normalises q and k with weight 1 and attends with scale 1.0, so its attention
#   logits have std 8 (head_dim 64), the softmax is nearly one-hot and float32's error grows
#   1.5x per block to 1.8e-4 at the output: q/k norm weights head_dim ** -0.25, the logits'
#   std 1 as in attention scaled by 1/sqrt(head_dim); 7e-7 from float64.
TIMM_CONDITIONED: dict[str, Callable[[torch.nn.Module], None]] = {
    "inception_v3": _default_layer_init, "visformer_tiny": _default_layer_init,
    "gemma4_vit_167m": _unit_attention_logits}


def _scaled_down(size: tuple[int, int]) -> tuple[int, int]:
    """`size` divided by the least whole factor that brings it to TIMM_MAX_SIZE or below and
    divides both sides, so that a side that is a multiple of the patch size stays one where
    the factor divides the patch count (DeepSeek's 546 = 39 x 14 becomes 182 = 13 x 14; 256
    is no multiple of 14); TIMM_MAX_SIZE when no factor divides both into half of it or more
    (Inception's 299 = 13 x 23)."""
    for factor in range(2, max(size) + 1):
        if TIMM_MAX_SIZE // 2 <= max(size) // factor <= TIMM_MAX_SIZE and all(
                side % factor == 0 for side in size):
            return (size[0] // factor, size[1] // factor)
    return (TIMM_MAX_SIZE, TIMM_MAX_SIZE)


def _timm_case(family: str, model_name: str, size: tuple[int, int], fixed: bool) -> Case:
    if not fixed and max(size) > TIMM_MAX_SIZE:
        size = _scaled_down(size)

    def build() -> torch.nn.Module:
        import timm

        model = timm.create_model(model_name, pretrained=False)
        if model_name in TIMM_CONDITIONED:
            TIMM_CONDITIONED[model_name](model)
        return _eval(model)

    return Case(f"timm/{family}:{model_name}", "timm", build, _images(), IMAGE_AXES, size,
                None if fixed else (size[0] + 32, size[1] + 64), ("images",), ("logits",))


# -- torchvision -----------------------------------------------------------------------------------
# One model per classification family: the smallest.
TORCHVISION_CLASSIFICATION = {
    "alexnet": "alexnet", "convnext": "convnext_tiny", "densenet": "densenet121",
    "efficientnet": "efficientnet_b0", "efficientnet_v2": "efficientnet_v2_s",
    "googlenet": "googlenet", "inception": "inception_v3", "maxvit": "maxvit_t",
    "mnasnet": "mnasnet0_5", "mobilenet_v2": "mobilenet_v2", "mobilenet_v3": "mobilenet_v3_small",
    "regnet_x": "regnet_x_400mf", "regnet_y": "regnet_y_400mf", "resnet": "resnet18",
    "resnext": "resnext50_32x4d", "shufflenet": "shufflenet_v2_x0_5", "squeezenet": "squeezenet1_1",
    "swin": "swin_t", "swin_v2": "swin_v2_t", "vgg": "vgg11", "vit": "vit_b_16",
    "wide_resnet": "wide_resnet50_2",
}
# Models whose pretrained weights are made for another size than 224 (or that fix it).
TORCHVISION_SIZES = {"inception_v3": (299, 299)}
TORCHVISION_FIXED = {"vit_b_16", "maxvit_t"}
# Inception v3's own init (truncated normal, std 0.1 at every fan-in) grows the logits to
# ~1e8, where float32 rounding alone exceeds rtol 1e-3; PyTorch's default layer init keeps
# them O(1).
TORCHVISION_KWARGS = {"inception_v3": {"init_weights": False}}
SEGMENTATION = ["deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large"]
# name -> (frames, H, W), fixed size
VIDEO = {"r3d_18": ((8, 112, 112), False), "mc3_18": ((8, 112, 112), False),
         "r2plus1d_18": ((8, 112, 112), False), "s3d": ((16, 224, 224), False),
         "mvit_v1_b": ((8, 112, 112), True), "mvit_v2_s": ((8, 112, 112), True),
         "swin3d_t": ((8, 112, 112), False)}


def _torchvision_build(name: str, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        return _eval(torchvision.models.get_model(name, weights=None, **kwargs))
    return build


def _mvit_build(name: str, size: tuple[int, ...]) -> Callable[[], torch.nn.Module]:
    """MViT's blocks as torchvision's builder sets them, for a clip of `size` (its positional
    tables follow the size it is built for; the builder pins Kinetics' 16 x 224 x 224)."""
    def build() -> torch.nn.Module:
        from unittest import mock

        from torchvision.models.video import mvit

        original = mvit._mvit

        def sized(**kwargs: Any) -> torch.nn.Module:
            return original(**{**kwargs, "spatial_size": size[1:], "temporal_size": size[0]})

        with mock.patch.object(mvit, "_mvit", sized):
            return _torchvision_build(name)()
    return build


class SegmentationOut(torch.nn.Module):
    """torchvision's segmentation models return {"out": ...}: the tensor, named `out`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)["out"]


class FinalFlow(torch.nn.Module):
    """RAFT returns the flow after every refinement; the last one is the prediction."""

    def __init__(self, model: torch.nn.Module, updates: int) -> None:
        super().__init__()
        self.model = model
        self.updates = updates

    def forward(self, image1: torch.Tensor, image2: torch.Tensor) -> torch.Tensor:
        return self.model(image1, image2, num_flow_updates=self.updates)[-1]


def _torchvision_cases() -> list[Case]:
    cases = []
    for name in TORCHVISION_CLASSIFICATION.values():
        size = TORCHVISION_SIZES.get(name, (224, 224))
        second = None if name in TORCHVISION_FIXED else (size[0] + 32, size[1] + 64)
        cases.append(Case(f"torchvision/{name}", "torchvision",
                          _torchvision_build(name, **TORCHVISION_KWARGS.get(name, {})),
                          _images(), IMAGE_AXES, size, second, ("images",), ("logits",)))
    for name in SEGMENTATION:
        build = _torchvision_build(name, weights_backbone=None)
        cases.append(Case(f"segmentation/{name}", "segmentation",
                          lambda build=build: _eval(SegmentationOut(build())), _images(),
                          IMAGE_AXES, (224, 224), (256, 288), ("images",), ("out",)))
    for name, (size, fixed) in VIDEO.items():
        def videos(batch: int, size: tuple[int, ...]) -> Inputs:
            return (torch.randn(batch, 3, *size),), {}
        second = None if fixed else (size[0], size[1] + 32, size[2] + 32)
        build = _mvit_build(name, size) if "mvit" in name else _torchvision_build(name)
        cases.append(Case(f"video/{name}", "video", build, videos,
                          VIDEO_AXES, size, second, ("videos",), ("logits",)))

    def raft() -> torch.nn.Module:
        return _eval(FinalFlow(_torchvision_build("raft_small")(), updates=4))

    def frames(batch: int, size: tuple[int, ...]) -> Inputs:
        return (torch.randn(batch, 3, *size), torch.randn(batch, 3, *size)), {}

    flow_axes = {n: {0: "batch", 2: "height", 3: "width"} for n in ("image1", "image2")}
    cases.append(Case("flow/raft_small", "flow", raft, frames, flow_axes, (128, 128),
                      (160, 192), ("image1", "image2"), ("flow",)))
    return cases


# -- diffusers --------------------------------------------------------------------------------------
def _diffusers() -> Any:
    import diffusers

    return diffusers


class VaeEncode(torch.nn.Module):
    """AutoencoderKL.encode: the latent distribution's parameters (mean and log-variance)."""

    def __init__(self, vae: torch.nn.Module) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, sample: torch.Tensor) -> torch.Tensor:
        return self.vae.encode(sample).latent_dist.parameters


class VaeDecode(torch.nn.Module):
    """AutoencoderKL.decode: the image of a latent."""

    def __init__(self, vae: torch.nn.Module) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latent).sample


def _vae() -> torch.nn.Module:
    return _diffusers().AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1, norm_num_groups=32, sample_size=32)


def _kw(**names: Callable[[int, tuple[int, ...]], Any]) -> Callable[[int, tuple[int, ...]], Inputs]:
    """Keyword inputs, each a function of (batch, size); non-callables are passed as they are."""
    def make(batch: int, size: tuple[int, ...]) -> Inputs:
        return (), {k: f(batch, size) if callable(f) else f for k, f in names.items()}
    return make


def _latents(channels: int) -> Callable[[int, tuple[int, ...]], torch.Tensor]:
    return lambda b, s: torch.randn(b, channels, *s)


def _timesteps(b: int, s: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor([999.0, 500.0, 10.0, 250.0][:b])


def _text(length: int, width: int) -> Callable[[int, tuple[int, ...]], torch.Tensor]:
    return lambda b, s: torch.randn(b, length, width)


LATENT_AXES = {0: "batch", 2: "height", 3: "width"}
TEXT_AXES = {0: "batch"}


def _diffusers_cases() -> list[Case]:
    d = _diffusers
    out = [
        Case("diffusers/UNet2DConditionModel", "diffusers",
             lambda: _eval(d().UNet2DConditionModel(
                 sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
                 block_out_channels=(32, 64), norm_num_groups=32, cross_attention_dim=32,
                 attention_head_dim=8,
                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))),
             _kw(sample=_latents(4), timestep=_timesteps,
                 encoder_hidden_states=_text(8, 32), return_dict=False),
             {"sample": LATENT_AXES, "timestep": TEXT_AXES, "encoder_hidden_states": TEXT_AXES},
             (32, 32), (40, 48), output_names=("out_sample",)),
        Case("diffusers/UNet2DModel", "diffusers",
             lambda: _eval(d().UNet2DModel(
                 sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                 block_out_channels=(32, 64), norm_num_groups=32, attention_head_dim=8,
                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))),
             _kw(sample=_latents(3), timestep=_timesteps, return_dict=False),
             {"sample": LATENT_AXES, "timestep": TEXT_AXES}, (32, 32), (40, 48),
             output_names=("out_sample",)),
        Case("diffusers/AutoencoderKL.encode", "diffusers", lambda: _eval(VaeEncode(_vae())),
             _kw(sample=_latents(3)), {"sample": LATENT_AXES}, (64, 64), (80, 96),
             output_names=("latent_parameters",)),
        Case("diffusers/AutoencoderKL.decode", "diffusers", lambda: _eval(VaeDecode(_vae())),
             _kw(latent=_latents(4)), {"latent": LATENT_AXES}, (16, 16), (20, 24),
             output_names=("sample",)),
        Case("diffusers/SD3Transformer2DModel", "diffusers",
             lambda: _eval(d().SD3Transformer2DModel(
                 sample_size=32, patch_size=2, in_channels=4, num_layers=2,
                 attention_head_dim=8, num_attention_heads=4, joint_attention_dim=32,
                 caption_projection_dim=32, pooled_projection_dim=64, out_channels=4,
                 pos_embed_max_size=32)),
             _kw(hidden_states=_latents(4), encoder_hidden_states=_text(8, 32),
                 pooled_projections=lambda b, s: torch.randn(b, 64), timestep=_timesteps,
                 return_dict=False),
             {"hidden_states": LATENT_AXES, "encoder_hidden_states": TEXT_AXES,
              "pooled_projections": TEXT_AXES, "timestep": TEXT_AXES},
             (32, 32), (40, 48), output_names=("out_sample",)),
        Case("diffusers/FluxTransformer2DModel", "diffusers",
             lambda: _eval(d().FluxTransformer2DModel(
                 patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                 attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                 pooled_projection_dim=32, axes_dims_rope=(4, 4, 8))),
             _kw(hidden_states=lambda b, s: torch.randn(b, s[0] * s[1], 16),
                 encoder_hidden_states=_text(8, 32),
                 pooled_projections=lambda b, s: torch.randn(b, 32), timestep=_timesteps,
                 img_ids=lambda b, s: _flux_ids(s), txt_ids=lambda b, s: torch.zeros(8, 3),
                 return_dict=False),
             {"hidden_states": {0: "batch", 1: "image_tokens"},
              "encoder_hidden_states": TEXT_AXES, "pooled_projections": TEXT_AXES,
              "timestep": TEXT_AXES, "img_ids": {0: "image_tokens"}},
             (8, 8), (10, 12), output_names=("out_sample",)),
        # Exported at another size than sample_size (16): at it, PatchEmbed takes its stored
        # position embedding, a branch that pins height and width (docs/models.md).
        Case("diffusers/PixArtTransformer2DModel", "diffusers",
             lambda: _eval(d().PixArtTransformer2DModel(
                 sample_size=16, num_layers=2, patch_size=2, attention_head_dim=8,
                 num_attention_heads=3, caption_channels=32, in_channels=4,
                 cross_attention_dim=24, out_channels=8, attention_bias=True,
                 activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                 norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6)),
             _kw(hidden_states=_latents(4), encoder_hidden_states=_text(8, 32),
                 timestep=_timesteps,
                 added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                 return_dict=False),
             {"hidden_states": LATENT_AXES, "encoder_hidden_states": TEXT_AXES,
              "timestep": TEXT_AXES}, (20, 24), (16, 16), output_names=("out_sample",)),
        Case("diffusers/DiTTransformer2DModel", "diffusers",
             lambda: _eval(d().DiTTransformer2DModel(
                 num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                 num_layers=2, sample_size=16, patch_size=2, num_embeds_ada_norm=1000,
                 norm_type="ada_norm_zero")),
             _kw(hidden_states=_latents(4),
                 timestep=lambda b, s: torch.tensor([999, 500, 10, 250][:b]),
                 class_labels=lambda b, s: torch.tensor([1, 7, 3, 9][:b]), return_dict=False),
             {"hidden_states": LATENT_AXES, "timestep": TEXT_AXES, "class_labels": TEXT_AXES},
             (16, 16), (20, 24), output_names=("out_sample",)),
        Case("diffusers/SanaTransformer2DModel", "diffusers",
             lambda: _eval(d().SanaTransformer2DModel(
                 patch_size=1, in_channels=4, out_channels=4, num_layers=1,
                 num_attention_heads=2, attention_head_dim=4, num_cross_attention_heads=2,
                 cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=8,
                 sample_size=32)),
             _kw(hidden_states=_latents(4), encoder_hidden_states=_text(8, 8),
                 timestep=_timesteps, return_dict=False),
             {"hidden_states": LATENT_AXES, "encoder_hidden_states": TEXT_AXES,
              "timestep": TEXT_AXES}, (16, 16), (20, 24), output_names=("out_sample",)),
        Case("diffusers/AuraFlowTransformer2DModel", "diffusers",
             lambda: _eval(d().AuraFlowTransformer2DModel(
                 sample_size=32, patch_size=2, in_channels=4, num_mmdit_layers=1,
                 num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=4,
                 caption_projection_dim=32, joint_attention_dim=32, out_channels=4,
                 pos_embed_max_size=1024)),
             _kw(hidden_states=_latents(4), encoder_hidden_states=_text(8, 32),
                 timestep=_timesteps, return_dict=False),
             {"hidden_states": LATENT_AXES, "encoder_hidden_states": TEXT_AXES,
              "timestep": TEXT_AXES}, (32, 32), (40, 48), output_names=("out_sample",)),
        Case("diffusers/HunyuanDiT2DModel", "diffusers",
             lambda: _eval(d().HunyuanDiT2DModel(
                 sample_size=16, num_layers=2, patch_size=2, attention_head_dim=8,
                 num_attention_heads=3, in_channels=4, cross_attention_dim=32,
                 cross_attention_dim_t5=32, pooled_projection_dim=16, hidden_size=24,
                 activation_fn="gelu-approximate", text_len=8, text_len_t5=8)),
             _kw(hidden_states=_latents(4), timestep=_timesteps,
                 encoder_hidden_states=_text(8, 32),
                 text_embedding_mask=lambda b, s: torch.ones(b, 8, dtype=torch.long),
                 encoder_hidden_states_t5=_text(8, 32),
                 text_embedding_mask_t5=lambda b, s: torch.ones(b, 8, dtype=torch.long),
                 image_meta_size=lambda b, s: torch.tensor([[16.0, 16, 16, 16, 0, 0]] * b),
                 style=lambda b, s: torch.zeros(b, dtype=torch.long),
                 image_rotary_emb=None, return_dict=False),
             {"hidden_states": LATENT_AXES, "timestep": TEXT_AXES,
              "encoder_hidden_states": TEXT_AXES, "text_embedding_mask": TEXT_AXES,
              "encoder_hidden_states_t5": TEXT_AXES, "text_embedding_mask_t5": TEXT_AXES,
              "image_meta_size": TEXT_AXES, "style": TEXT_AXES},
             (16, 16), None, output_names=("out_sample",)),
        Case("diffusers/Lumina2Transformer2DModel", "diffusers",
             lambda: _eval(d().Lumina2Transformer2DModel(
                 sample_size=16, patch_size=2, in_channels=4, hidden_size=24, num_layers=2,
                 num_refiner_layers=1, num_attention_heads=3, num_kv_heads=1,
                 multiple_of=16, ffn_dim_multiplier=None, norm_eps=1e-5, scaling_factor=1.0,
                 axes_dim_rope=(4, 2, 2), axes_lens=(128, 128, 128), cap_feat_dim=32)),
             _kw(hidden_states=_latents(4), timestep=_timesteps,
                 encoder_hidden_states=_text(8, 32),
                 encoder_attention_mask=lambda b, s: torch.ones(b, 8, dtype=torch.bool),
                 return_dict=False),
             {"hidden_states": LATENT_AXES, "timestep": TEXT_AXES,
              "encoder_hidden_states": TEXT_AXES, "encoder_attention_mask": TEXT_AXES},
             (16, 16), (20, 24), output_names=("out_sample",)),
    ]
    return out


def _flux_ids(size: tuple[int, ...]) -> torch.Tensor:
    """Flux's image position ids: (row, column) of each packed latent token."""
    h, w = size
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(h * w, 3)


def cases() -> list[Case]:
    """Every case, in a fixed order. Import torchvision first (tests.vision.packages)."""
    out = [_timm_case(f, *TIMM[f]) for f in TIMM]
    out += _torchvision_cases()
    out += _diffusers_cases()
    return out


def by_name() -> dict[str, Case]:
    return {c.name: c for c in cases()}
