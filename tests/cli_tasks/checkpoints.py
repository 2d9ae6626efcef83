"""Tiny transformers checkpoints saved with save_pretrained (random weights, no downloads).

`CHECKPOINTS[name]` = (builder, task the architecture implies, the optimum class that loads
the exported folder). Hidden size 32, 2 layers, vocabulary 99. Every decoder keeps
head_dim = hidden_size / num_attention_heads (optimum sizes the empty cache from that), and
Phi3 keeps as many key/value heads as heads (optimum's ORTModelForCausalLM reads
num_key_value_heads only for the model types it lists, and phi3 is not one of them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

VOCAB = 99


def _tf() -> Any:
    import transformers

    return transformers


_DECODER = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
_LLAMA_LIKE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                   **_DECODER)
# BART's, Whisper's, Marian's, Speech2Text's sizes
_SEQ2SEQ_LIKE = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                     decoder_ffn_dim=64)
_BERT_LIKE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64)


def llama() -> Any:
    tf = _tf()
    return tf.LlamaForCausalLM(tf.LlamaConfig(**_LLAMA_LIKE))


def qwen2() -> Any:
    tf = _tf()
    return tf.Qwen2ForCausalLM(tf.Qwen2Config(**_LLAMA_LIKE))


def mistral() -> Any:
    tf = _tf()
    return tf.MistralForCausalLM(tf.MistralConfig(sliding_window=None, **_LLAMA_LIKE))


def phi3() -> Any:
    tf = _tf()
    return tf.Phi3ForCausalLM(tf.Phi3Config(**{**_LLAMA_LIKE, "num_key_value_heads": 4}))


def gemma() -> Any:
    tf = _tf()
    return tf.GemmaForCausalLM(tf.GemmaConfig(head_dim=8, **_LLAMA_LIKE))


def gpt2() -> Any:
    tf = _tf()
    return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                            **_DECODER))


def falcon() -> Any:
    tf = _tf()
    return tf.FalconForCausalLM(tf.FalconConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
        alibi=False, max_position_embeddings=128, **_DECODER))


def bert() -> Any:
    tf = _tf()
    return tf.BertForSequenceClassification(tf.BertConfig(**_BERT_LIKE, num_labels=3))


def roberta() -> Any:
    tf = _tf()
    return tf.RobertaForMaskedLM(tf.RobertaConfig(**{**_BERT_LIKE, "max_position_embeddings": 66},
                                                  pad_token_id=1))


def distilbert() -> Any:
    tf = _tf()
    return tf.DistilBertForQuestionAnswering(tf.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
        max_position_embeddings=64))


def deberta_v2() -> Any:
    tf = _tf()
    return tf.DebertaV2ForTokenClassification(tf.DebertaV2Config(
        **_BERT_LIKE, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"],
        num_labels=5))


def vit() -> Any:
    tf = _tf()
    return tf.ViTForImageClassification(tf.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=4))


def convnext() -> Any:
    tf = _tf()
    return tf.ConvNextForImageClassification(tf.ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=4))


# DETR and SegFormer get a wider weight init than their defaults (0.02): with it their logits
# and boxes are O(1) instead of O(1e-3), so a 1e-4 tolerance means something.


def _detr_config(backbone: Any, layers: int, heads: int) -> Any:
    """DETR with transformers' own ResNet backbone (no timm, no pretrained download)."""
    return _tf().DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
        backbone_config=backbone, d_model=32, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_queries=6, num_labels=3, init_std=0.2)


def detr() -> Any:
    tf = _tf()
    backbone = tf.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                               out_features=["stage2"])
    return tf.DetrForObjectDetection(_detr_config(backbone, layers=2, heads=4))


def segformer() -> Any:
    tf = _tf()
    return tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
        decoder_hidden_size=16, num_labels=3, initializer_range=0.2))


def t5() -> Any:
    tf = _tf()
    return tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))


def bart() -> Any:
    tf = _tf()
    return tf.BartForConditionalGeneration(tf.BartConfig(
        **_SEQ2SEQ_LIKE, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None))


def whisper() -> Any:
    tf = _tf()
    return tf.WhisperForConditionalGeneration(tf.WhisperConfig(
        **_SEQ2SEQ_LIKE, num_mel_bins=16, max_source_positions=16, max_target_positions=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=None,
        suppress_tokens=None))


def wav2vec2() -> Any:
    tf = _tf()
    return tf.Wav2Vec2ForSequenceClassification(tf.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, feat_extract_norm="layer", do_stable_layer_norm=True,
        apply_spec_augment=False, num_labels=3, classifier_proj_size=16))


def clip() -> Any:
    tf = _tf()
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=32, pad_token_id=0,
                bos_token_id=1, eos_token_id=2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, image_size=32, patch_size=8)
    return tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=vision,
                                      projection_dim=16))


def _moe(family: str, **overrides: Any) -> Callable[[], Any]:
    def build() -> Any:
        from tests.models import moe

        return moe.build(family, use_cache=True, **overrides)

    return build


DECODERS = ["llama", "qwen2", "mistral", "phi3", "gemma", "gpt2", "falcon"]
# Mixtures of experts: tests/models/moe.py's tiny configs.
MOE_DECODERS = ["mixtral", "qwen3_moe", "gpt_oss"]
ENCODERS = ["bert", "roberta", "distilbert", "deberta_v2"]
VISION = ["vit", "convnext"]
DENSE_VISION = ["detr", "segformer"]  # object-detection, semantic-segmentation
SEQ2SEQ = ["t5", "bart", "whisper"]
OTHER = ["wav2vec2", "clip"]

CHECKPOINTS: dict[str, tuple[Callable[[], Any], str]] = {
    "llama": (llama, "text-generation-with-past"),
    "qwen2": (qwen2, "text-generation-with-past"),
    "mistral": (mistral, "text-generation-with-past"),
    "phi3": (phi3, "text-generation-with-past"),
    "gemma": (gemma, "text-generation-with-past"),
    "gpt2": (gpt2, "text-generation-with-past"),
    "falcon": (falcon, "text-generation-with-past"),
    **{name: (_moe(name), "text-generation-with-past") for name in MOE_DECODERS},
    # optimum 0.1 sizes Mixtral's empty cache with num_attention_heads, not
    # num_key_value_heads: its client runs Mixtral without grouped-query attention only.
    "mixtral": (_moe("mixtral", num_key_value_heads=4), "text-generation-with-past"),
    "bert": (bert, "text-classification"),
    "roberta": (roberta, "fill-mask"),
    "distilbert": (distilbert, "question-answering"),
    "deberta_v2": (deberta_v2, "token-classification"),
    "vit": (vit, "image-classification"),
    "convnext": (convnext, "image-classification"),
    "detr": (detr, "object-detection"),
    "segformer": (segformer, "semantic-segmentation"),
    "t5": (t5, "text2text-generation-with-past"),
    "bart": (bart, "text2text-generation-with-past"),
    "whisper": (whisper, "automatic-speech-recognition-with-past"),
    "wav2vec2": (wav2vec2, "audio-classification"),
    "clip": (clip, "zero-shot-image-classification"),
}


def save_checkpoint(name: str, folder: Path) -> Path:
    """Save the tiny `name` checkpoint into `folder` (config, safetensors, generation config)."""
    torch.manual_seed(0)
    model = (CHECKPOINTS.get(name) or DERIVED[name])[0]()
    model.eval()
    model.save_pretrained(str(folder))
    return folder


# -- model types without explicit code: tasks and graphs derived from transformers' mappings


def llama_base() -> Any:
    tf = _tf()
    return tf.LlamaModel(tf.LlamaConfig(**_LLAMA_LIKE))


def gpt2_base() -> Any:
    tf = _tf()
    return tf.GPT2Model(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                      **_DECODER))


def bart_base() -> Any:
    tf = _tf()
    return tf.BartModel(bart().config)


def camembert() -> Any:
    tf = _tf()
    return tf.CamembertForMaskedLM(tf.CamembertConfig(
        **{**_BERT_LIKE, "max_position_embeddings": 66}, pad_token_id=1))


def dinov2() -> Any:
    tf = _tf()
    return tf.Dinov2ForImageClassification(tf.Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32,
        patch_size=8, num_labels=4))


def vit_masked_im() -> Any:
    tf = _tf()
    return tf.ViTForMaskedImageModeling(tf.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, encoder_stride=8))


def wav2vec2_ctc() -> Any:
    tf = _tf()
    return tf.Wav2Vec2ForCTC(tf.Wav2Vec2Config(**{**wav2vec2().config.to_diff_dict(),
                                                   "vocab_size": 20, "num_labels": 2}))


def data2vec_audio() -> Any:
    tf = _tf()
    return tf.Data2VecAudioForSequenceClassification(tf.Data2VecAudioConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, num_conv_pos_embedding_layers=1,
        apply_spec_augment=False, num_labels=3, classifier_proj_size=16))


def marian() -> Any:
    tf = _tf()
    return tf.MarianMTModel(tf.MarianConfig(
        **_SEQ2SEQ_LIKE, max_position_embeddings=64, pad_token_id=0,
        decoder_start_token_id=0))


# -- more derived types, each loaded by its optimum class (test_derived_folder_in_optimum)

_AUDIO_LIKE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                   conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                   num_conv_pos_embedding_groups=4, apply_spec_augment=False)
_VIT_LIKE = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=64)


def albert() -> Any:
    tf = _tf()
    return tf.AlbertForMaskedLM(tf.AlbertConfig(**_BERT_LIKE, embedding_size=16))


def electra() -> Any:
    tf = _tf()
    return tf.ElectraForTokenClassification(tf.ElectraConfig(**_BERT_LIKE, embedding_size=16,
                                                             num_labels=5))


def xlm_roberta() -> Any:
    tf = _tf()
    return tf.XLMRobertaForSequenceClassification(tf.XLMRobertaConfig(
        **{**_BERT_LIKE, "max_position_embeddings": 66}, pad_token_id=1, num_labels=3))


def mpnet() -> Any:
    tf = _tf()
    return tf.MPNetForQuestionAnswering(tf.MPNetConfig(
        **{**_BERT_LIKE, "max_position_embeddings": 66}))


def mobilebert() -> Any:
    tf = _tf()
    return tf.MobileBertModel(tf.MobileBertConfig(
        **_BERT_LIKE, embedding_size=16, true_hidden_size=16, intra_bottleneck_size=16,
        num_feedforward_networks=2))


def ernie() -> Any:
    tf = _tf()
    return tf.ErnieForMultipleChoice(tf.ErnieConfig(**_BERT_LIKE))


def deit() -> Any:
    tf = _tf()
    return tf.DeiTForImageClassification(tf.DeiTConfig(**_VIT_LIKE, num_labels=4))


def beit() -> Any:
    tf = _tf()
    return tf.BeitForImageClassification(tf.BeitConfig(
        **_VIT_LIKE, use_relative_position_bias=True, use_mean_pooling=True, num_labels=4))


def swin() -> Any:
    tf = _tf()
    return tf.SwinForImageClassification(tf.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
        window_size=4, num_labels=4))


def mobilevit() -> Any:
    """With the default init (0.02) its activations vanish (all-zero logits); 0.5 keeps
    them O(1)."""
    tf = _tf()
    return tf.MobileViTForImageClassification(tf.MobileViTConfig(
        image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], num_attention_heads=2, num_labels=4,
        initializer_range=0.5))


def resnet() -> Any:
    tf = _tf()
    return tf.ResNetForImageClassification(tf.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4))


def hubert_ctc() -> Any:
    tf = _tf()
    return tf.HubertForCTC(tf.HubertConfig(**_AUDIO_LIKE, vocab_size=20))


def wavlm() -> Any:
    tf = _tf()
    return tf.WavLMForAudioFrameClassification(tf.WavLMConfig(**_AUDIO_LIKE, num_buckets=16,
                                                              num_labels=3))


def unispeech_sat() -> Any:
    """x-vector head: with the default init (0.02) its logits are ~1e-6; 0.2 makes them O(0.1)."""
    tf = _tf()
    return tf.UniSpeechSatForXVector(tf.UniSpeechSatConfig(
        **_AUDIO_LIKE, tdnn_dim=(16, 16), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1),
        xvector_output_dim=8, num_labels=3, initializer_range=0.2))


def _two_towers() -> tuple[dict[str, Any], dict[str, Any]]:
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=32)
    return text, dict(_VIT_LIKE)


def siglip() -> Any:
    tf = _tf()
    text, vision = _two_towers()
    text.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return tf.SiglipModel(tf.SiglipConfig(text_config=text, vision_config=vision))


def chinese_clip() -> Any:
    tf = _tf()
    text, vision = _two_towers()
    return tf.ChineseCLIPModel(tf.ChineseCLIPConfig(text_config=text, vision_config=vision,
                                                    projection_dim=16))


def mobilevit_segmentation() -> Any:
    tf = _tf()
    return tf.MobileViTForSemanticSegmentation(tf.MobileViTConfig(
        image_size=64, patch_size=2, hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32], num_attention_heads=2, num_labels=4,
        aspp_out_channels=16, initializer_range=0.3))  # logits up to ~0.04 (0.02: ~1e-9)


def detr_segmentation() -> Any:
    """DETR's segmentation head (its mask head needs d_model + heads divisible by 8)."""
    tf = _tf()
    backbone = tf.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                               depths=[1, 1, 1, 1],
                               out_features=["stage1", "stage2", "stage3", "stage4"])
    return tf.DetrForSegmentation(_detr_config(backbone, layers=1, heads=8))


def swin2sr() -> Any:
    tf = _tf()
    return tf.Swin2SRForImageSuperResolution(tf.Swin2SRConfig(
        image_size=16, patch_size=1, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4, upscale=2))


def maskformer() -> Any:
    """Swin backbone, DETR decoder: optimum's image-segmentation is its class and mask
    logits per query."""
    tf = _tf()
    backbone = tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1],
                             num_heads=[1, 1, 2, 2], window_size=2,
                             out_features=["stage1", "stage2", "stage3", "stage4"])
    decoder = tf.DetrConfig(d_model=32, encoder_layers=1, decoder_layers=1,
                            encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2,
                            decoder_attention_heads=2, num_queries=6, use_timm_backbone=False,
                            backbone_config=backbone)
    return tf.MaskFormerForInstanceSegmentation(tf.MaskFormerConfig(
        backbone_config=backbone, decoder_config=decoder, fpn_feature_size=32,
        mask_feature_size=32, num_labels=3, num_queries=6))


def vitpose() -> Any:
    tf = _tf()
    backbone = tf.VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16],
                                        hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, out_indices=[2])
    return tf.VitPoseForPoseEstimation(tf.VitPoseConfig(backbone_config=backbone,
                                                        use_simple_decoder=True,
                                                        num_labels=5))


def mgp_str() -> Any:
    tf = _tf()
    return tf.MgpstrForSceneTextRecognition(tf.MgpstrConfig(
        image_size=[32, 64], patch_size=8, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, max_token_length=6, num_character_labels=12,
        num_bpe_labels=14, num_wordpiece_labels=16))


def vision_encoder_decoder() -> Any:
    """ViT encoder, GPT-2 decoder with cross-attention (TrOCR-like)."""
    tf = _tf()
    encoder = tf.ViTConfig(**_VIT_LIKE)
    # initializer 0.2: with 0.02 greedy search repeats one token whatever the image
    decoder = tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64,
                            add_cross_attention=True, is_decoder=True, initializer_range=0.2,
                            **_DECODER)
    return tf.VisionEncoderDecoderModel(tf.VisionEncoderDecoderConfig(
        encoder=encoder.to_dict(), decoder=decoder.to_dict(), decoder_start_token_id=1,
        pad_token_id=0, eos_token_id=2))


def bert2bert() -> Any:
    """EncoderDecoderModel of two BERTs (the decoder with cross-attention)."""
    tf = _tf()
    text = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64)
    return tf.EncoderDecoderModel(tf.EncoderDecoderConfig(
        encoder=tf.BertConfig(**text).to_dict(),
        decoder=tf.BertConfig(**text, is_decoder=True, add_cross_attention=True).to_dict(),
        decoder_start_token_id=1, pad_token_id=0, eos_token_id=2))


def owlvit() -> Any:
    tf = _tf()
    text, vision = _two_towers()
    text["max_position_embeddings"] = 16
    return tf.OwlViTForObjectDetection(tf.OwlViTConfig(text_config=text, vision_config=vision,
                                                       projection_dim=32))


def patchtst() -> Any:
    tf = _tf()
    return tf.PatchTSTModel(tf.PatchTSTConfig(
        num_input_channels=3, context_length=32, patch_length=8, patch_stride=8, d_model=32,
        num_attention_heads=4, num_hidden_layers=2, ffn_dim=64))


def convbert() -> Any:
    tf = _tf()
    return tf.ConvBertForMaskedLM(tf.ConvBertConfig(**_BERT_LIKE, embedding_size=32,
                                                    head_ratio=2, conv_kernel_size=3))


def mistral_window() -> Any:
    """Mistral as released (7B-v0.1): every layer attends within `sliding_window`, and the
    config has no layer_types."""
    tf = _tf()
    return tf.MistralForCausalLM(tf.MistralConfig(sliding_window=64, **_LLAMA_LIKE))


def longt5() -> Any:
    """Local attention in blocks of 32 tokens: one block up to 32."""
    tf = _tf()
    return tf.LongT5Model(tf.LongT5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
                                          num_layers=2, num_heads=4, local_radius=31,
                                          decoder_start_token_id=0))


def speech_to_text() -> Any:
    """Speech2Text: filter-bank frames (any number, masked), not Whisper's fixed mels."""
    tf = _tf()
    return tf.Speech2TextModel(tf.Speech2TextConfig(
        **_SEQ2SEQ_LIKE, conv_channels=32, input_feat_per_channel=16,
        max_source_positions=64, max_target_positions=64))


def moonshine() -> Any:
    """Moonshine: raw audio of any length, with a mask."""
    tf = _tf()
    return tf.MoonshineModel(tf.MoonshineConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4,
        decoder_num_attention_heads=4, encoder_num_key_value_heads=4,
        decoder_num_key_value_heads=4, max_position_embeddings=128))


def gemma3() -> Any:
    """A vision-language model whose language model is a text sub-config."""
    tf = _tf()
    return tf.Gemma3ForConditionalGeneration(tf.Gemma3Config(
        text_config=dict(**_LLAMA_LIKE, head_dim=8, sliding_window=64),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, image_size=32, patch_size=8),
        mm_tokens_per_image=4))


# name -> (builder, the task detected from its architecture)
DERIVED: dict[str, tuple[Callable[[], Any], str]] = {
    "llama_base": (llama_base, "feature-extraction-with-past"),
    "gpt2_base": (gpt2_base, "feature-extraction-with-past"),
    # an encoder-decoder's base model defaults to the three files, as in optimum-cli
    "bart_base": (bart_base, "feature-extraction-with-past"),
    "camembert": (camembert, "fill-mask"),
    "dinov2": (dinov2, "image-classification"),
    "vit_masked_im": (vit_masked_im, "masked-im"),
    "wav2vec2_ctc": (wav2vec2_ctc, "automatic-speech-recognition"),
    "data2vec_audio": (data2vec_audio, "audio-classification"),
    # an unlisted type whose derived task an explicit family exports (seq2seq.py)
    "marian": (marian, "text2text-generation-with-past"),
    "albert": (albert, "fill-mask"),
    "electra": (electra, "token-classification"),
    "xlm_roberta": (xlm_roberta, "text-classification"),
    "mpnet": (mpnet, "question-answering"),
    "mobilebert": (mobilebert, "feature-extraction"),
    "ernie": (ernie, "multiple-choice"),
    "deit": (deit, "image-classification"),
    "beit": (beit, "image-classification"),
    "swin": (swin, "image-classification"),
    "mobilevit": (mobilevit, "image-classification"),
    "resnet": (resnet, "image-classification"),
    "hubert_ctc": (hubert_ctc, "automatic-speech-recognition"),
    "wavlm": (wavlm, "audio-frame-classification"),
    "unispeech_sat": (unispeech_sat, "audio-xvector"),
    "siglip": (siglip, "zero-shot-image-classification"),
    "chinese_clip": (chinese_clip, "zero-shot-image-classification"),
    "mobilevit_segmentation": (mobilevit_segmentation, "semantic-segmentation"),
    "maskformer": (maskformer, "image-segmentation"),
    "vitpose": (vitpose, "keypoint-detection"),
    "detr_segmentation": (detr_segmentation, "image-segmentation"),
    "swin2sr": (swin2sr, "image-to-image"),
    "mgp_str": (mgp_str, "feature-extraction"),
    "vision_encoder_decoder": (vision_encoder_decoder, "image-to-text-with-past"),
    "bert2bert": (bert2bert, "text2text-generation-with-past"),
    "owlvit": (owlvit, "zero-shot-object-detection"),
    "patchtst": (patchtst, "feature-extraction"),
    "convbert": (convbert, "fill-mask"),
    "gemma3": (gemma3, "text-generation-with-past"),
    "mistral_window": (mistral_window, "text-generation-with-past"),
    "longt5": (longt5, "feature-extraction-with-past"),
    "speech_to_text": (speech_to_text, "feature-extraction-with-past"),
    "moonshine": (moonshine, "feature-extraction-with-past"),
}
