"""The model zoo: Hugging Face transformers architectures as data, for tests and benchmarks.

Every entry builds its model from a tiny config (hidden size 32-64, 2 layers, vocabulary 99)
with random weights (nothing is downloaded) and gives:

* `example_inputs`: the keyword inputs the model is exported with;
* `dynamic_shapes`: torch.export's spec for those inputs, with named `Dim`s for the batch and
  the sequence (or image) dims, so the ONNX graph's symbolic dims carry those names;
* `second_inputs`: inputs of another batch size and sequence length (or image size), which
  the dynamic export must accept and get right.

Decoders are built with `use_cache=False`: no key/value cache inputs or outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.export import Dim

VOCAB = 99
# The default tolerance: these models chain tens of matmuls, layer norms and softmaxes, and
# ONNX Runtime's float32 kernels accumulate in another order than ATen's.
RTOL, ATOL = 1e-3, 1e-4

Inputs = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One architecture: how to build it, its inputs, and which dims are dynamic.

    Attributes:
        name: The test id.
        factory: Builds the model (eval mode, random weights).
        example_inputs: Builds the keyword inputs used for export and the static check.
        dynamic_shapes: torch.export's dynamic_shapes for those keyword inputs.
        second_inputs: Builds inputs of another batch and sequence/image size.
        tolerance: (rtol, atol) for comparing ONNX Runtime with eager PyTorch.
        xfail_static: Why the static export is expected to fail (None: it works).
        xfail_dynamic: Why the dynamic export is expected to fail (None: it works).
    """

    name: str
    factory: Callable[[], torch.nn.Module]
    example_inputs: Callable[[], Inputs]
    dynamic_shapes: dict[str, Any]
    second_inputs: Callable[[], Inputs]
    tolerance: tuple[float, float] = (RTOL, ATOL)
    xfail_static: str | None = None
    xfail_dynamic: str | None = None


class Positional(torch.nn.Module):
    """model(**dict(zip(names, args))) with its outputs flattened to a tuple: what
    torch.jit.trace (the TorchScript flavour) can take for a zoo entry's keyword inputs."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from onnxport.verify.compare import flatten_outputs

        return tuple(flatten_outputs(self.model(**dict(zip(self.names, args)))))


def _tf() -> Any:
    import transformers

    return transformers


def _eval(model: torch.nn.Module) -> torch.nn.Module:
    model.eval()
    return model


# -- inputs --------------------------------------------------------------------------------------

# Two shapes per model: the export shape, then another batch and length. Neither batch is 0 or
# 1, which torch.export specializes.
BATCH, SEQ = 2, 8
BATCH2, SEQ2 = 3, 13

batch = Dim("batch", min=1, max=64)
seq = Dim("sequence", min=2, max=32)
dec_seq = Dim("decoder_sequence", min=2, max=32)


def _ids(b: int, s: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, (b, s), dtype=torch.long)


def _mask(b: int, s: int) -> torch.Tensor:
    mask = torch.ones(b, s, dtype=torch.long)
    mask[-1, s - 2:] = 0  # the last sequence is right-padded
    return mask


def _text(mask: bool = True) -> tuple[Callable[[], Inputs], Callable[[], Inputs]]:
    def make(b: int, s: int) -> Callable[[], Inputs]:
        def inputs() -> Inputs:
            out: Inputs = {"input_ids": _ids(b, s)}
            if mask:
                out["attention_mask"] = _mask(b, s)
            return out
        return inputs
    return make(BATCH, SEQ), make(BATCH2, SEQ2)


def _text_shapes(mask: bool = True) -> dict[str, Any]:
    shapes: dict[str, Any] = {"input_ids": {0: batch, 1: seq}}
    if mask:
        shapes["attention_mask"] = {0: batch, 1: seq}
    return shapes


def _text_entry(name: str, factory: Callable[[], torch.nn.Module], *, mask: bool = True,
                **kwargs: Any) -> ZooModel:
    first, second = _text(mask)
    return ZooModel(name, factory, first, _text_shapes(mask), second, **kwargs)


def _seq2seq_entry(name: str, factory: Callable[[], torch.nn.Module], **kwargs: Any) -> ZooModel:
    def make(b: int, s: int, t: int) -> Callable[[], Inputs]:
        def inputs() -> Inputs:
            return {"input_ids": _ids(b, s), "attention_mask": _mask(b, s),
                    "decoder_input_ids": _ids(b, t)}
        return inputs
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
              "decoder_input_ids": {0: batch, 1: dec_seq}}
    return ZooModel(name, factory, make(BATCH, SEQ, 5), shapes, make(BATCH2, SEQ2, 7), **kwargs)


def _image(size: int, size2: int,
           channels: int = 3) -> tuple[Callable[[], Inputs], Callable[[], Inputs]]:
    def make(b: int, s: int) -> Callable[[], Inputs]:
        return lambda: {"pixel_values": torch.rand(b, channels, s, s)}
    return make(BATCH, size), make(BATCH2, size2)


def _image_entry(name: str, factory: Callable[[], torch.nn.Module], size: int, size2: int,
                 *, spatial: bool = True, multiple: int = 1, **kwargs: Any) -> ZooModel:
    """An image model; `spatial`: height and width are dynamic too (as multiples of `multiple`)."""
    first, second = _image(size, size2 if spatial else size)
    shapes: dict[int, Any] = {0: batch}
    if spatial:
        if multiple > 1:
            shapes[2] = multiple * Dim("height_blocks", min=1, max=64)
            shapes[3] = multiple * Dim("width_blocks", min=1, max=64)
        else:
            shapes[2] = Dim("height", min=64, max=512)
            shapes[3] = Dim("width", min=64, max=512)
    return ZooModel(name, factory, first, {"pixel_values": shapes}, second, **kwargs)


# -- encoders ------------------------------------------------------------------------------------

def bert() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.BertModel(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)))


def roberta() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.RobertaModel(tf.RobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=0)))


def distilbert() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.DistilBertModel(tf.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
        max_position_embeddings=64)))


def albert() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.AlbertModel(tf.AlbertConfig(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)))


def deberta_v2() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.DebertaV2Model(tf.DebertaV2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, relative_attention=True,
        position_buckets=16, pos_att_type=["p2c", "c2p"])))


def electra() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.ElectraModel(tf.ElectraConfig(
        vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)))


# -- decoders ------------------------------------------------------------------------------------

_DECODER = {"vocab_size": VOCAB, "use_cache": False, "bos_token_id": 1, "eos_token_id": 2,
                "pad_token_id": 0}


def gpt2() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.GPT2LMHeadModel(tf.GPT2Config(
        n_embd=32, n_layer=2, n_head=4, n_positions=64, **_DECODER)))


def gpt_neo() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.GPTNeoForCausalLM(tf.GPTNeoConfig(
        hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64,
        attention_types=[[["global", "local"], 1]], window_size=4, **_DECODER)))


def opt() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.OPTForCausalLM(tf.OPTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
        word_embed_proj_dim=32, max_position_embeddings=64, **_DECODER)))


def bloom() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.BloomForCausalLM(tf.BloomConfig(
        hidden_size=32, n_layer=2, n_head=4, **_DECODER)))


_LLAMA_LIKE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   **_DECODER)


def llama() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.LlamaForCausalLM(tf.LlamaConfig(**_LLAMA_LIKE)))


def mistral() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.MistralForCausalLM(tf.MistralConfig(sliding_window=None, **_LLAMA_LIKE)))


def qwen2() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.Qwen2ForCausalLM(tf.Qwen2Config(**_LLAMA_LIKE)))


def phi() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.PhiForCausalLM(tf.PhiConfig(partial_rotary_factor=0.5, **_LLAMA_LIKE)))


def gemma() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.GemmaForCausalLM(tf.GemmaConfig(head_dim=8, **_LLAMA_LIKE)))


def falcon() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.FalconForCausalLM(tf.FalconConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, new_decoder_architecture=False,
        multi_query=True, parallel_attn=True, bias=False, alibi=False, **_DECODER)))


# -- encoder-decoders ----------------------------------------------------------------------------

def t5() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.T5Model(tf.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        use_cache=False, pad_token_id=0, decoder_start_token_id=0)))


def bart() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.BartModel(tf.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, use_cache=False, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)))


WHISPER_MELS, WHISPER_FRAMES = 16, 32


def whisper() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.WhisperModel(tf.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=WHISPER_MELS, d_model=32, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=WHISPER_FRAMES // 2,
        max_target_positions=32, use_cache=False, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1)))


def _whisper_inputs(b: int, t: int) -> Callable[[], Inputs]:
    return lambda: {"input_features": torch.randn(b, WHISPER_MELS, WHISPER_FRAMES),
                    "decoder_input_ids": _ids(b, t)}


# -- vision --------------------------------------------------------------------------------------

def vit() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.ViTModel(tf.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64)))


def swin() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.SwinModel(tf.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4)))


def convnext() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.ConvNextModel(tf.ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)))


def resnet() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.ResNetModel(tf.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")))


def mobilenet_v2() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.MobileNetV2Model(tf.MobileNetV2Config(
        # TF "SAME" padding is computed with int(height): it would fix the image size.
        image_size=32, depth_multiplier=0.25, min_depth=4, tf_padding=False,
        # With the default (0.02) the activations vanish to 1e-25 through the blocks (batch
        # norm's running statistics are the identity in a fresh model) and any export matches.
        initializer_range=0.25)))


def segformer() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
        decoder_hidden_size=32, num_labels=3,
        initializer_range=0.2)))  # the default 0.02 gives logits of ~1e-3, below atol's reach


# -- multimodal and audio --------------------------------------------------------------------------

def clip() -> torch.nn.Module:
    tf = _tf()
    text = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "max_position_embeddings": 32, "pad_token_id": 0,
                "bos_token_id": 1, "eos_token_id": 2}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "image_size": 32, "patch_size": 8}
    return _eval(tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=vision,
                                            projection_dim=16)))


def _clip_inputs(b: int, s: int, images: int) -> Callable[[], Inputs]:
    return lambda: {"input_ids": _ids(b, s), "pixel_values": torch.rand(images, 3, 32, 32),
                    "attention_mask": _mask(b, s)}


def wav2vec2() -> torch.nn.Module:
    tf = _tf()
    return _eval(tf.Wav2Vec2Model(tf.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, feat_extract_norm="layer", do_stable_layer_norm=True,
        apply_spec_augment=False)))



# -- torch.nn builtins -----------------------------------------------------------------------

FEATURES = 16


class SequenceModel(torch.nn.Module):
    """A torch.nn sequence layer over `x` (batch, sequence, features), returning its outputs."""

    def __init__(self, layer: torch.nn.Module, kind: str) -> None:
        super().__init__()
        self.layer, self.kind = layer, kind

    def forward(self, x: torch.Tensor) -> Any:
        if self.kind == "attention":
            return self.layer(x, x, x, need_weights=True)
        return self.layer(x)


def lstm() -> torch.nn.Module:
    layer = torch.nn.LSTM(FEATURES, 24, num_layers=2, bidirectional=True, batch_first=True)
    return _eval(SequenceModel(layer, "rnn"))


def gru() -> torch.nn.Module:
    layer = torch.nn.GRU(FEATURES, 24, num_layers=2, bidirectional=True, batch_first=True)
    return _eval(SequenceModel(layer, "rnn"))


def transformer_encoder() -> torch.nn.Module:
    block = torch.nn.TransformerEncoderLayer(FEATURES, 4, 32, dropout=0.0, batch_first=True)
    return _eval(SequenceModel(torch.nn.TransformerEncoder(block, 2, enable_nested_tensor=False),
                               "encoder"))


def multihead_attention() -> torch.nn.Module:
    layer = torch.nn.MultiheadAttention(FEATURES, 4, batch_first=True)
    return _eval(SequenceModel(layer, "attention"))


def _sequence_entry(name: str, factory: Callable[[], torch.nn.Module]) -> ZooModel:
    return ZooModel(name, factory, lambda: {"x": torch.randn(BATCH, SEQ, FEATURES)},
                    {"x": {0: batch, 1: seq}}, lambda: {"x": torch.randn(BATCH2, SEQ2, FEATURES)})


ZOO: list[ZooModel] = [
    # encoders
    _text_entry("bert", bert),
    _text_entry("roberta", roberta),
    _text_entry("distilbert", distilbert),
    _text_entry("albert", albert),
    _text_entry("deberta_v2", deberta_v2),
    _text_entry("electra", electra),
    # decoders
    _text_entry("gpt2", gpt2),
    _text_entry("gpt_neo", gpt_neo),
    _text_entry("opt", opt),
    _text_entry("bloom", bloom),
    _text_entry("llama", llama),
    _text_entry("mistral", mistral),
    _text_entry("qwen2", qwen2),
    _text_entry("phi", phi),
    _text_entry("gemma", gemma),
    _text_entry("falcon", falcon),
    # encoder-decoders
    _seq2seq_entry("t5", t5),
    _seq2seq_entry("bart", bart),
    # Whisper's encoder insists on exactly 2 * max_source_positions frames: only the batch and
    # the decoder length are dynamic.
    ZooModel("whisper", whisper, _whisper_inputs(BATCH, 5),
             {"input_features": {0: batch}, "decoder_input_ids": {0: batch, 1: dec_seq}},
             _whisper_inputs(BATCH2, 7)),
    # vision; ViT's and CLIP's position embeddings fix the image size: only the batch is dynamic.
    _image_entry("vit", vit, 32, 32, spatial=False),
    # Swin shrinks its attention window to the feature map when the map is smaller, a Python
    # branch on the image size, so an export holds for one branch only; and with symbolic
    # height and width torch.export takes minutes on Swin's window partitioning. Batch only.
    _image_entry("swin", swin, 32, 32, spatial=False),
    # From 64x64 up the last feature maps are larger than 1x1; a 1x1 map (at 32x32) would make
    # torch.export specialize the image size.
    _image_entry("convnext", convnext, 64, 96),
    _image_entry("resnet", resnet, 64, 96),
    _image_entry("mobilenet_v2", mobilenet_v2, 64, 96),
    _image_entry("segformer", segformer, 32, 48, multiple=8),
    # multimodal: texts and images come in separate batches
    ZooModel("clip", clip, _clip_inputs(BATCH, SEQ, 2),
             {"input_ids": {0: batch, 1: seq}, "pixel_values": {0: Dim("images", min=1, max=64)},
              "attention_mask": {0: batch, 1: seq}},
             _clip_inputs(BATCH2, SEQ2, 4)),
    # audio; the feature extractor's strided convolutions make torch.export want the length
    # as a multiple of 10 (a guard it cannot prove from a plain range), so the length is
    # Dim.AUTO: torch.export infers its constraints and the ONNX dim gets a generated name.
    ZooModel("wav2vec2", wav2vec2, lambda: {"input_values": torch.randn(BATCH, 400)},
             {"input_values": {0: batch, 1: Dim.AUTO}},
             lambda: {"input_values": torch.randn(BATCH2, 560)}),
    # torch.nn builtins: LSTM/GRU export as ONNX LSTM/GRU nodes
    _sequence_entry("nn_lstm", lstm),
    _sequence_entry("nn_gru", gru),
    _sequence_entry("nn_transformer_encoder", transformer_encoder),
    _sequence_entry("nn_multihead_attention", multihead_attention),
]

BY_NAME = {m.name: m for m in ZOO}
