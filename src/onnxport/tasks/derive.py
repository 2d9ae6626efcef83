"""Tasks and graphs derived from transformers itself, for model types without explicit code.

A model type supports a task when the task's `AutoModelFor*` mapping in
`transformers.models.auto.modeling_auto` lists it (the same rule optimum's TasksManager
applies). The graph of a single-file task is built from the model's forward signature, its
`main_input_name` and its config: ids and masks for text, pixel values at `image_size` for
vision, raw audio or mel features for speech. Input, output and dim names are optimum's.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from onnxport.tasks.specs import (TEXT_FIELDS, GraphSpec, decoder_uses_position_ids, example_ids,
                                  example_mask, float_dtype, named_inputs, raw_audio_shapes)

__all__ = ["DERIVED_TASKS", "architecture_task", "auto_class", "derived_family",
           "derived_graphs", "derived_tasks"]

# task -> (modeling_auto mapping, Auto class) pairs, tried in order. Tasks are listed most
# specific first: an architecture class found in several mappings gets the first task.
_MAPPINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "text2text-generation": (("SEQ_TO_SEQ_CAUSAL_LM", "AutoModelForSeq2SeqLM"),),
    # image encoder + text decoder (VisionEncoderDecoderModel); VLMs in the same mapping are
    # left out (see _is_vision_encoder_decoder)
    "image-to-text": (("IMAGE_TEXT_TO_TEXT", "AutoModelForImageTextToText"),),
    "automatic-speech-recognition": (("SPEECH_SEQ_2_SEQ", "AutoModelForSpeechSeq2Seq"),
                                     ("CTC", "AutoModelForCTC")),
    "text-generation": (("CAUSAL_LM", "AutoModelForCausalLM"),),
    "fill-mask": (("MASKED_LM", "AutoModelForMaskedLM"),),
    "text-classification": (("SEQUENCE_CLASSIFICATION", "AutoModelForSequenceClassification"),),
    "token-classification": (("TOKEN_CLASSIFICATION", "AutoModelForTokenClassification"),),
    "question-answering": (("QUESTION_ANSWERING", "AutoModelForQuestionAnswering"),),
    "multiple-choice": (("MULTIPLE_CHOICE", "AutoModelForMultipleChoice"),),
    "image-classification": (("IMAGE_CLASSIFICATION", "AutoModelForImageClassification"),),
    "object-detection": (("OBJECT_DETECTION", "AutoModelForObjectDetection"),),
    "semantic-segmentation": (("SEMANTIC_SEGMENTATION", "AutoModelForSemanticSegmentation"),),
    # optimum's image-segmentation: whichever segmentation class the type has.
    "image-segmentation": (("IMAGE_SEGMENTATION", "AutoModelForImageSegmentation"),
                           ("SEMANTIC_SEGMENTATION", "AutoModelForSemanticSegmentation"),
                           ("INSTANCE_SEGMENTATION", "AutoModelForInstanceSegmentation"),
                           ("UNIVERSAL_SEGMENTATION", "AutoModelForUniversalSegmentation")),
    "image-to-image": (("IMAGE_TO_IMAGE", "AutoModelForImageToImage"),),
    "zero-shot-object-detection": (("ZERO_SHOT_OBJECT_DETECTION",
                                    "AutoModelForZeroShotObjectDetection"),),
    "keypoint-detection": (("POSE_ESTIMATION", "AutoModelForPoseEstimation"),),
    "depth-estimation": (("DEPTH_ESTIMATION", "AutoModelForDepthEstimation"),),
    "masked-im": (("MASKED_IMAGE_MODELING", "AutoModelForMaskedImageModeling"),),
    "audio-classification": (("AUDIO_CLASSIFICATION", "AutoModelForAudioClassification"),),
    "audio-frame-classification": (("AUDIO_FRAME_CLASSIFICATION",
                                    "AutoModelForAudioFrameClassification"),),
    "audio-xvector": (("AUDIO_XVECTOR", "AutoModelForAudioXVector"),),
    "zero-shot-image-classification": (("ZERO_SHOT_IMAGE_CLASSIFICATION",
                                        "AutoModelForZeroShotImageClassification"),),
    # transformers' mapping lists TimesFM; PatchTST's and PatchTSMixer's forecasting heads
    # are in no mapping (optimum names them itself): `_EXTRA_MAPPINGS`.
    "time-series-forecasting": (("TIME_SERIES_PREDICTION", "AutoModelForTimeSeriesPrediction"),
                                ("+TIME_SERIES_FORECASTING", "")),
    "feature-extraction": (("", "AutoModel"),),
}
# Model classes for a task that no transformers mapping lists: mapping -> {type: class}.
_EXTRA_MAPPINGS = {
    "+TIME_SERIES_FORECASTING": {"patchtst": "PatchTSTForPrediction",
                                 "patchtsmixer": "PatchTSMixerForPrediction"},
}
DERIVED_TASKS = tuple(_MAPPINGS)

# The output fields of each single-graph task (optimum's output names).
_FIELDS = {
    **TEXT_FIELDS,
    "text-generation": ["logits"],
    "image-classification": ["logits"],
    "object-detection": ["logits", "pred_boxes"],
    "semantic-segmentation": ["logits"],
    "depth-estimation": ["predicted_depth"],
    "masked-im": ["reconstruction"],
    "audio-classification": ["logits"],
    "audio-frame-classification": ["logits"],
    "audio-xvector": ["logits", "embeddings"],
    "automatic-speech-recognition": ["logits"],
    "image-to-image": ["reconstruction"],
    "keypoint-detection": ["heatmaps"],
    "zero-shot-object-detection": ["logits", "pred_boxes", "text_embeds", "image_embeds"],
    "time-series-forecasting": ["prediction_outputs"],
}
# Output names optimum gives a model type's fields where no rule derives them: name -> field
# (`field[i]`: an element of a tuple field).
_TYPE_OUTPUTS = {
    ("mgp-str", "feature-extraction"): {"char_logits": "logits[0]", "bpe_logits": "logits[1]",
                                        "wp_logits": "logits[2]"},
}
# Where a task's fields depend on the mapping that lists the type (optimum's per model type).
_MAPPING_FIELDS = {
    "IMAGE_SEGMENTATION": ["logits", "pred_masks"],
    "SEMANTIC_SEGMENTATION": ["logits"],
    "INSTANCE_SEGMENTATION": ["class_queries_logits", "masks_queries_logits"],
    "UNIVERSAL_SEGMENTATION": ["class_queries_logits", "masks_queries_logits"],
}


@functools.cache
def _mapping(name: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    if name in _EXTRA_MAPPINGS:
        return _EXTRA_MAPPINGS[name]
    return dict(getattr(modeling_auto, f"MODEL_FOR_{name}_MAPPING_NAMES" if name
                        else "MODEL_MAPPING_NAMES"))


def _found(task: str, model_type: str) -> tuple[str, str] | None:
    """(mapping, Auto class) of the first of `task`'s mappings that lists `model_type`."""
    return next(((m, cls) for m, cls in _MAPPINGS[task] if model_type in _mapping(m)), None)


def _is_decoder_only(model_type: str) -> bool:
    # Encoders (BERT's ForCausalLM head) and encoder-decoders also list a causal LM class.
    return (model_type in _mapping("CAUSAL_LM") and model_type not in _mapping("MASKED_LM")
            and model_type not in _mapping("SEQ_TO_SEQ_CAUSAL_LM")
            and model_type not in _mapping("SPEECH_SEQ_2_SEQ"))


def _is_seq2seq(model_type: str) -> bool:
    """Whether the base model of `model_type` is an encoder and a decoder with a cache (T5,
    BART, Whisper): optimum's feature-extraction-with-past exports its three files."""
    return model_type in _mapping("SEQ_TO_SEQ_CAUSAL_LM") or \
        model_type in _mapping("SPEECH_SEQ_2_SEQ")


def _is_seq2seq_decoder_lm(model_type: str) -> bool:
    """Whether an encoder-decoder type has its decoder alone as a causal LM
    (BartForCausalLM): optimum's text-generation for BART's family."""
    name = _mapping("CAUSAL_LM").get(model_type)
    return (model_type in _mapping("SEQ_TO_SEQ_CAUSAL_LM") and isinstance(name, str)
            and name.endswith("ForCausalLM"))


@functools.cache
def derived_tasks(model_type: str) -> tuple[str, ...]:
    """optimum's task names `model_type` supports by transformers' Auto mappings."""
    tasks: list[str] = []
    for task in _MAPPINGS:
        if _found(task, model_type) is None:
            continue
        if task == "text-generation":
            if _is_decoder_only(model_type) or _is_seq2seq_decoder_lm(model_type):
                tasks += ["text-generation-with-past", task]
        elif task == "text2text-generation":
            tasks += ["text2text-generation-with-past", task]
        elif task == "automatic-speech-recognition" and _found(task, model_type)[0] == \
                "SPEECH_SEQ_2_SEQ":
            tasks += ["automatic-speech-recognition-with-past", task]
        elif task == "image-to-text":
            if _is_vision_encoder_decoder(model_type):
                tasks += ["image-to-text-with-past", task]
        elif task == "feature-extraction" and (_is_decoder_only(model_type)
                                               or _is_seq2seq(model_type)):
            tasks += [task, "feature-extraction-with-past"]
        else:
            tasks.append(task)
    return tuple(tasks)


def architecture_task(model_type: str, architecture: str) -> str | None:
    """The task whose Auto mapping names `architecture` for `model_type` (-with-past where
    there is one, as optimum's default), or None."""
    tasks = derived_tasks(model_type)
    for task in _MAPPINGS:
        found = _found(task, model_type)
        if found is None:
            continue
        classes = _mapping(found[0])[model_type]
        if architecture in ((classes,) if isinstance(classes, str) else tuple(classes)):
            with_past = f"{task}-with-past"
            found_task = with_past if with_past in tasks else (task if task in tasks else None)
            if found_task is not None:  # else a later mapping may list it (a VLM's LM)
                return found_task
    return None


def auto_class(model_type: str, task: str) -> str:
    """The transformers Auto class that loads `model_type` for `task`."""
    found = _found(task.removesuffix("-with-past"), model_type)
    if found and not found[1]:  # a class no Auto mapping lists (`_EXTRA_MAPPINGS`)
        return str(_mapping(found[0])[model_type])
    return found[1] if found else "AutoModel"


def derived_family(model_type: str, task: str) -> str:
    """The graph family that exports a derived task: an explicit family where its inputs
    cannot be derived from one forward call (a cache, two files, two towers), else
    "derived"."""
    if task == "feature-extraction-with-past" and _is_seq2seq(model_type):
        return ("speech-seq2seq" if model_type in _mapping("SPEECH_SEQ_2_SEQ") else
                "vision-seq2seq" if _is_vision_encoder_decoder(model_type) else "seq2seq")
    if task in ("text-generation-with-past", "feature-extraction-with-past"):
        return "decoder"
    if task.startswith("text2text-generation"):
        return "seq2seq"
    if task.startswith("image-to-text"):
        return "vision-seq2seq"
    if task.startswith("automatic-speech-recognition") and \
            model_type in _mapping("SPEECH_SEQ_2_SEQ"):
        return "speech-seq2seq"
    if task == "zero-shot-image-classification" or (
            task == "feature-extraction" and _text_and_image(model_type)):
        return "clip"  # the text and image embeddings, as optimum's CLIP-like configs
    return "derived"


def _is_vision_encoder_decoder(model_type: str) -> bool:
    """Whether `model_type`'s config is an encoder and a decoder sub-config (an image encoder
    with a text decoder), not a language model that reads images."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        sub = getattr(CONFIG_MAPPING[model_type], "sub_configs", None) or {}
    except KeyError:
        return False
    return {"encoder", "decoder"} <= set(sub)


def _text_and_image(model_type: str) -> bool:
    """Whether the base model of `model_type` is two towers, text and image, projected into
    one embedding space (not a language model reading images)."""
    import transformers

    if model_type in _mapping("ZERO_SHOT_IMAGE_CLASSIFICATION"):
        return True
    name = _mapping("").get(model_type)
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None or not hasattr(cls, "forward"):
        return False
    params = inspect.signature(cls.forward).parameters
    if "input_ids" not in params or "pixel_values" not in params:
        return False
    try:
        return hasattr(cls.config_class(), "projection_dim")
    except Exception:  # a config that cannot be built from defaults
        return False


# -- graphs ----------------------------------------------------------------------------------

class _Forward(torch.nn.Module):
    """Calls the model with its inputs by keyword and returns the named output fields
    (wrapped by `specs.named_inputs`, so that torch.export names and binds the inputs)."""

    def __init__(self, model: torch.nn.Module, names: list[str], fields: list[str],
                 fixed: dict[str, Any]) -> None:
        super().__init__()
        self.model, self.names, self.fields, self.fixed = model, names, fields, fixed

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.names, args)), **self.fixed)
        return tuple(_field(out, f) for f in self.fields)


def _field(out: Any, name: str) -> Any:
    """`out.name`, or `out.name[i]` for "name[i]"; a model output with stages (MaskFormer:
    encoder, pixel decoder, transformer decoder) gives its last stage's `*_last_hidden_state`
    as last_hidden_state, as optimum does."""
    if name.endswith("]"):
        attr, index = name[:-1].split("[")
        return getattr(out, attr)[int(index)]
    if name == "last_hidden_state" and getattr(out, name, None) is None:
        stages = [k for k, v in out.items()
                  if k.endswith("_last_hidden_state") and isinstance(v, torch.Tensor)]
        if stages:
            return out[stages[-1]]
    return getattr(out, name)


def _wrapper(model: torch.nn.Module, names: list[str], fields: list[str],
             fixed: dict[str, Any], called: list[str] | None = None) -> torch.nn.Module:
    """The graph's module: inputs `names`, passed to the model as `called` (default: names)."""
    return named_inputs(_Forward(model, called or names, fields, fixed), names).eval()


def _params(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def derived_graphs(model: Any, task: str, batch: int, seq: int) -> list[Any]:
    """The single graph (model.onnx) of `task` for `model`, from its forward signature."""
    params = _params(model)
    fixed = {"use_cache": False} if "use_cache" in params else {}
    if "return_dict" in params:
        fixed["return_dict"] = True
    main = getattr(model, "main_input_name", "input_ids")
    if task == "zero-shot-object-detection":
        names, dims, make, shapes = _text_image_inputs(model, batch, seq)
    elif task == "feature-extraction" and "decoder_input_ids" in params:
        names, dims, make, shapes = _seq2seq_inputs(model, main, batch, seq)
    elif main == "input_ids" or _perceiver_text(model, main):
        names, dims, make, shapes = _text_inputs(model, params, task, batch, seq)
    elif main == "pixel_values":
        names, dims, make, shapes = _vision_inputs(model, batch)
        if "noise" in params:
            names, dims, make = _with_noise(model, names, dims, make)
    elif main in ("input_values", "input_features"):
        names, dims, make, shapes = _audio_inputs(model, main, batch)
    elif main == "past_values":
        names, dims, make, shapes = _series_inputs(model, batch)
    else:
        from onnxport.tasks.errors import UnsupportedTaskError

        raise UnsupportedTaskError(
            f"onnxport cannot derive the inputs of {type(model).__name__} (main input "
            f"{main!r}) for {task}")
    model_type = getattr(model.config, "model_type", "")
    found = _found(task, model_type)
    named = _TYPE_OUTPUTS.get((model_type, task))
    fields = (list(named.values()) if named else
              _FIELDS.get(task) or _MAPPING_FIELDS[found[0] if found else ""])
    outputs = list(named) if named else fields
    # Perceiver reads its token ids as `inputs`; the graph names them input_ids (optimum's)
    called = ["inputs" if n == "input_ids" else n for n in names] if main == "inputs" else names
    return [GraphSpec("model.onnx", _wrapper(model, names, fields, fixed, called), names,
                      outputs, dims, make, shapes)]


def _perceiver_text(model: Any, main: str) -> bool:
    """Whether `model` reads token ids as its main input `inputs` (Perceiver's text models)."""
    preprocessor = getattr(getattr(model, "perceiver", None), "input_preprocessor", None)
    return main == "inputs" and type(preprocessor).__name__ == "PerceiverTextPreprocessor"


def _text_inputs(model: Any, params: set[str], task: str, batch: int, seq: int) -> Any:
    config = model.config
    decoder = _is_decoder_only(config.model_type)
    types = int(getattr(config, "type_vocab_size", 0) or 0)
    names = ["input_ids"] + (["attention_mask"] if "attention_mask" in params else [])
    # One token type (RoBERTa's family) makes the input a constant: optimum leaves it out.
    if "token_type_ids" in params and types > 1 and not decoder:
        names.append("token_type_ids")
    if decoder and "position_ids" in params and decoder_uses_position_ids(config):
        names.append("position_ids")
    # Longformer's: optimum's input after the others (its example: the first token global)
    if "global_attention_mask" in params:
        names.append("global_attention_mask")
    max_pos = int(getattr(config, "max_position_embeddings", 0) or 0)
    seq = min(seq, max_pos - 6) if max_pos > 12 else seq
    choice = task == "multiple-choice"
    axes = ({0: "batch_size", 1: "num_choices", 2: "sequence_length"} if choice
            else {0: "batch_size", 1: "sequence_length"})
    choices = 2
    # An encoder-decoder's classifier reads the hidden state at each row's <eos> (BART's
    # family requires one per row); the rows end with it, as a tokenizer's do.
    eos = getattr(config, "eos_token_id", None) if getattr(
        config, "is_encoder_decoder", False) else None
    eos = eos if isinstance(eos, int) else None

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        b, s = shape["batch_size"], shape["sequence_length"]
        rows = b * choices if choice else b
        feeds = {"input_ids": example_ids(config, rows, s)}
        if eos is not None:
            feeds["input_ids"][:, -1] = eos
        if "attention_mask" in names:
            feeds["attention_mask"] = example_mask(rows, s, pad=not decoder)
        if "token_type_ids" in names:
            feeds["token_type_ids"] = (torch.randint(0, types, (rows, s)) if types > 1
                                       else torch.zeros(rows, s, dtype=torch.long))
        if "position_ids" in names:
            feeds["position_ids"] = torch.arange(s).repeat(rows, 1)
        if "global_attention_mask" in names:
            # rows without a global token too (the last)
            feeds["global_attention_mask"] = torch.zeros(rows, s, dtype=torch.long)
            feeds["global_attention_mask"][:-1, 0] = 1
        if choice:
            feeds = {k: v.reshape(b, choices, s) for k, v in feeds.items()}
        return feeds

    return (names, {n: dict(axes) for n in names}, make,
            [{"batch_size": batch, "sequence_length": seq},
             {"batch_size": batch + 1, "sequence_length": seq + 5}])


def _text_image_inputs(model: Any, batch: int, seq: int) -> Any:
    """Text queries and images (OWL-ViT): input_ids, attention_mask
    [text_batch_size, sequence_length] (`queries` per image), pixel_values
    [image_batch_size, channels, height, width]."""
    config = model.config
    text = getattr(config, "text_config", None) or config
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or 224
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = int(getattr(vision, "num_channels", 3) or 3)
    max_pos = int(getattr(text, "max_position_embeddings", 0) or 0)
    seq = min(seq, max_pos) if max_pos else seq
    dtype = float_dtype(model)
    queries = 2
    names = ["input_ids", "pixel_values", "attention_mask"]
    text_axes = {0: "text_batch_size", 1: "sequence_length"}
    dims = {"input_ids": text_axes, "attention_mask": dict(text_axes),
            "pixel_values": {0: "image_batch_size"}}

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        images, s = shape["image_batch_size"], shape["sequence_length"]
        return {"input_ids": example_ids(text, images * queries, s),
                "pixel_values": torch.rand(images, channels, height, width).to(dtype),
                "attention_mask": example_mask(images * queries, s)}

    return names, dims, make, [
        {"image_batch_size": batch, "sequence_length": seq},
        {"image_batch_size": batch + 1, "sequence_length": max(2, seq - 3)}]


def _seq2seq_inputs(model: Any, main: str, batch: int, seq: int) -> Any:
    """optimum's single-file seq2seq graph for feature-extraction: encoder inputs and
    decoder_input_ids -> the decoder's last_hidden_state."""
    config = model.config
    speech = main == "input_features"
    # Whisper's mel spectrogram has a fixed number of frames; Speech2Text's filter banks
    # (frames, features) any number, with a mask.
    banks = speech and not getattr(config, "num_mel_bins", None) and \
        getattr(config, "input_feat_per_channel", None)
    raw = main == "input_values"  # Moonshine: raw audio, any length, with a mask
    if banks or raw:
        names = [main, "attention_mask", "decoder_input_ids"]
        enc = {0: "batch_size", 1: "encoder_sequence_length"}
        dims = {main: enc, "attention_mask": dict(enc),
                "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}}
    elif speech:
        bins = int(getattr(config, "num_mel_bins", 80))
        frames = 2 * int(getattr(config, "max_source_positions", 32))
        names = ["input_features", "decoder_input_ids"]
        dims = {"input_features": {0: "batch_size"},
                "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}}
    else:
        names = ["input_ids", "attention_mask", "decoder_input_ids"]
        enc = {0: "batch_size", 1: "encoder_sequence_length"}
        dims = {"input_ids": enc, "attention_mask": dict(enc),
                "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}}
    dtype = float_dtype(model)
    decoder_config = getattr(config, "decoder", config)

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        b, e, d = (shape["batch_size"], shape["encoder_sequence_length"],
                   shape["decoder_sequence_length"])
        if raw:  # samples: Moonshine's convolutions take 384 per frame
            feeds = {main: torch.randn(b, 400 * e).to(dtype), "attention_mask": example_mask(b, 400 * e)}
        elif banks:  # filter-bank frames: subsampled by 4 before the encoder
            feeds = {"input_features": torch.randn(b, 4 * e, int(banks)).to(dtype),
                     "attention_mask": example_mask(b, 4 * e)}
        elif speech:
            feeds = {"input_features": torch.randn(b, bins, frames).to(dtype)}
        else:
            feeds = {"input_ids": example_ids(config, b, e), "attention_mask": example_mask(b, e)}
        feeds["decoder_input_ids"] = example_ids(decoder_config, b, d)
        return feeds

    return names, dims, make, [
        {"batch_size": batch, "encoder_sequence_length": seq, "decoder_sequence_length": 5},
        {"batch_size": batch + 1, "encoder_sequence_length": seq + 4,
         "decoder_sequence_length": 3}]


def _vision_inputs(model: Any, batch: int) -> Any:
    config = model.config
    vision = getattr(config, "vision_config", None) or config
    # A model whose size is its backbone's (VitPose: 256 x 192) says so in backbone_config.
    size = (getattr(vision, "image_size", None)
            or getattr(getattr(config, "backbone_config", None), "image_size", None) or 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = int(getattr(vision, "num_channels", 3) or 3)
    dtype = float_dtype(model)

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.rand(shape["batch_size"], channels, height,
                                           width).to(dtype)}

    return (["pixel_values"], {"pixel_values": {0: "batch_size"}}, make,
            [{"batch_size": batch}, {"batch_size": batch + 1}])


def _with_noise(model: Any, names: list[str], dims: Any, make: Any) -> Any:
    """ViTMAE's random masking reads `noise` [batch_size, num_patches] (it draws torch.rand
    when none is given, and eager and the graph then mask other patches): an input here."""
    config = model.config
    size, patch = config.image_size, config.patch_size
    size, patch = ((size, size) if isinstance(size, int) else size,
                   (patch, patch) if isinstance(patch, int) else patch)
    patches = (size[0] // patch[0]) * (size[1] // patch[1])

    def make_with_noise(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        feeds = make(shape)
        feeds["noise"] = torch.rand(shape["batch_size"], patches)
        return feeds

    return [*names, "noise"], {**dims, "noise": {0: "batch_size"}}, make_with_noise


def _series_inputs(model: Any, batch: int) -> Any:
    """A time series (PatchTST, PatchTSMixer): past_values
    [batch_size, context_length, num_input_channels]."""
    config = model.config
    length, channels = int(config.context_length), int(config.num_input_channels)
    dtype = float_dtype(model)

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        return {"past_values": torch.randn(shape["batch_size"], length, channels).to(dtype)}

    return (["past_values"], {"past_values": {0: "batch_size"}}, make,
            [{"batch_size": batch}, {"batch_size": batch + 1}])


def _audio_inputs(model: Any, main: str, batch: int) -> Any:
    config = model.config
    dtype = float_dtype(model)
    bins = getattr(config, "num_mel_bins", None)
    if main == "input_values" and bins and getattr(config, "max_length", None):
        # A spectrogram transformer: (batch, max_length frames, mel bins), fixed frames.
        length = int(config.max_length)

        def make_spec(shape: dict[str, int]) -> dict[str, torch.Tensor]:
            return {main: torch.randn(shape["batch_size"], length, int(bins)).to(dtype)}

        return ([main], {main: {0: "batch_size"}}, make_spec,
                [{"batch_size": batch}, {"batch_size": batch + 1}])
    if main == "input_features" and bins and getattr(config, "max_source_positions", None):
        # Whisper's encoder: (batch, mel bins, 2 * max_source_positions frames), fixed frames.
        frames = 2 * int(config.max_source_positions)

        def make_mels(shape: dict[str, int]) -> dict[str, torch.Tensor]:
            return {main: torch.randn(shape["batch_size"], int(bins), frames).to(dtype)}

        return ([main], {main: {0: "batch_size"}}, make_mels,
                [{"batch_size": batch}, {"batch_size": batch + 1}])
    if main == "input_features":
        size = int(bins or getattr(config, "feature_size", None) or
                   getattr(config, "input_feat_per_channel", 80))

        def make_features(shape: dict[str, int]) -> dict[str, torch.Tensor]:
            return {main: torch.randn(shape["batch_size"], shape["sequence_length"],
                                      size).to(dtype)}

        return ([main], {main: {0: "batch_size", 1: "sequence_length"}}, make_features,
                [{"batch_size": batch, "sequence_length": 64},
                 {"batch_size": batch + 1, "sequence_length": 80}])

    def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
        return {main: torch.randn(shape["batch_size"], shape["sequence_length"]).to(dtype)}

    return ([main], {main: {0: "batch_size", 1: "sequence_length"}}, make,
            raw_audio_shapes(config, batch))
