"""Task names (optimum's), the architectures each supports, and task detection.

A task is exported by one `family` of graph builders (`graphs.py`): text encoders, decoder-only
LMs, vision encoders, sequence-to-sequence models, ... `SUPPORTED` lists, per transformers
`model_type`, the family and the tasks onnxport exports for it with explicit code. Every other
model type, and the tasks a listed type's family lacks, are derived from transformers' Auto
mappings (`derive.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from onnxport.tasks.errors import UnknownTaskError, UnsupportedTaskError

__all__ = ["TASKS", "SUPPORTED", "TaskInfo", "detect_task", "normalize_task", "plan",
           "resolve_task", "tasks_for"]


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """One task: the transformers Auto class its model is loaded with."""

    name: str
    auto_class: str
    description: str


def _task(name: str, head: str, description: str) -> TaskInfo:
    """A task whose model loads with `AutoModelFor<head>` (`AutoModel` when `head` is empty)."""
    return TaskInfo(name, f"AutoModelFor{head}" if head else "AutoModel", description)


# name, head, what the graph outputs
TASKS: dict[str, TaskInfo] = {t.name: t for t in [
    _task("feature-extraction", "", "hidden states (last_hidden_state)"),
    _task("feature-extraction-with-past", "", "a decoder's hidden states with a key/value cache (prefill and decode in one graph)"),
    _task("fill-mask", "MaskedLM", "masked-token logits"),
    _task("text-classification", "SequenceClassification", "sequence logits"),
    _task("token-classification", "TokenClassification", "per-token logits"),
    _task("question-answering", "QuestionAnswering", "start/end logits"),
    _task("multiple-choice", "MultipleChoice", "per-choice logits"),
    _task("text-generation", "CausalLM", "next-token logits, no cache"),
    _task("text-generation-with-past", "CausalLM", "next-token logits with a key/value cache (prefill and decode in one graph)"),
    _task("text2text-generation", "Seq2SeqLM", "encoder + decoder, no cache"),
    _task("text2text-generation-with-past", "Seq2SeqLM", "encoder + decoder + decoder with past"),
    _task("image-classification", "ImageClassification", "image logits"),
    _task("image-to-text", "ImageTextToText", "image encoder + text decoder, no cache"),
    _task("image-to-text-with-past", "ImageTextToText", "image encoder + text decoder + decoder with past"),
    _task("object-detection", "ObjectDetection", "per-query class logits and boxes (logits, pred_boxes)"),
    _task("semantic-segmentation", "SemanticSegmentation", "per-pixel class logits"),
    _task("automatic-speech-recognition", "SpeechSeq2Seq", "audio encoder + decoder, no cache (or an encoder alone with CTC)"),
    _task("automatic-speech-recognition-with-past", "SpeechSeq2Seq", "audio encoder + decoder + decoder with past"),
    _task("audio-classification", "AudioClassification", "audio logits"),
    _task("audio-frame-classification", "AudioFrameClassification", "per-frame audio logits"),
    _task("audio-xvector", "AudioXVector", "speaker logits and embeddings"),
    _task("image-segmentation", "ImageSegmentation", "segmentation logits and masks (the type's segmentation class: semantic, instance or universal)"),
    _task("image-to-image", "ImageToImage", "an image (super-resolution)"),
    _task("zero-shot-object-detection", "ZeroShotObjectDetection", "boxes and scores per text query (logits, pred_boxes, text_embeds, image_embeds)"),
    _task("keypoint-detection", "PoseEstimation", "keypoint heatmaps"),
    _task("depth-estimation", "DepthEstimation", "per-pixel depth"),
    _task("masked-im", "MaskedImageModeling", "reconstructed pixels"),
    _task("time-series-forecasting", "TimeSeriesPrediction", "forecasts from past values (prediction_outputs)"),
    _task("zero-shot-image-classification", "", "image-text similarity (logits_per_image, logits_per_text, embeddings)"),
    _task("text-to-audio", "TextToWaveform", "speech from text (waveform, spectrogram)"),
]}

# Names optimum accepts as synonyms.
ALIASES = {
    "image-feature-extraction": "feature-extraction",
    "sequence-classification": "text-classification",
    "causal-lm": "text-generation",
    "causal-lm-with-past": "text-generation-with-past",
    "seq2seq-lm": "text2text-generation",
    "seq2seq-lm-with-past": "text2text-generation-with-past",
    "masked-lm": "fill-mask",
    "default": "feature-extraction",
    "audio-ctc": "automatic-speech-recognition",
    "speech2seq-lm": "automatic-speech-recognition",
    "speech2seq-lm-with-past": "automatic-speech-recognition-with-past",
}

_TEXT_ENCODER_TASKS = ("feature-extraction", "fill-mask", "text-classification",
                       "token-classification", "question-answering", "multiple-choice")
_DECODER_TASKS = ("text-generation-with-past", "text-generation")
_VISION_TASKS = ("feature-extraction", "image-classification")
_SEQ2SEQ_TASKS = ("text2text-generation-with-past", "text2text-generation")

# model_type -> (family, tasks). The first task is the default when no architecture says more.
SUPPORTED: dict[str, tuple[str, tuple[str, ...]]] = {
    **{m: ("text-encoder", _TEXT_ENCODER_TASKS) for m in (
        "bert", "roberta", "distilbert", "deberta-v2", "albert", "electra", "xlm-roberta")},
    # transformers has no DebertaForMultipleChoice
    "deberta": ("text-encoder", tuple(t for t in _TEXT_ENCODER_TASKS if t != "multiple-choice")),
    **{m: ("decoder", _DECODER_TASKS) for m in (
        "llama", "qwen2", "qwen3", "mistral", "phi3", "phi", "gemma", "gemma2", "gpt2",
        "falcon", "granite", "olmo",
        # mixtures of experts (ops/grouped_mm.py)
        # (deepseek_v3 not yet: its latent-attention cache has other key/value head dims)
        "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phimoe", "gpt_oss")},
    **{m: ("vision", _VISION_TASKS) for m in (
        "vit", "deit", "convnext", "convnextv2", "resnet", "beit")},
    "detr": ("vision", ("object-detection", "feature-extraction")),
    "segformer": ("vision", ("semantic-segmentation", "image-classification",
                             "feature-extraction")),
    **{m: ("seq2seq", _SEQ2SEQ_TASKS) for m in ("t5", "mt5", "bart", "mbart")},
    "whisper": ("speech-seq2seq", ("automatic-speech-recognition-with-past",
                                   "automatic-speech-recognition")),
    **{m: ("audio", ("audio-classification", "feature-extraction")) for m in (
        "wav2vec2", "hubert", "wavlm")},
    "clip": ("clip", ("zero-shot-image-classification", "feature-extraction")),
    "vits": ("text-to-audio", ("text-to-audio",)),
    # with a vocoder given as --model-kwargs '{"vocoder": DIR}' (tasks/speecht5.py)
    "speecht5": ("text-to-audio", ("text-to-audio",)),
}

# Suffixes of architecture class names, most specific first, and the task each means.
_ARCHITECTURE_SUFFIXES = [
    ("ForCausalLM", "text-generation-with-past"),
    ("LMHeadModel", "text-generation-with-past"),
    ("ForMaskedLM", "fill-mask"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForTokenClassification", "token-classification"),
    ("ForMultipleChoice", "multiple-choice"),
    ("ForImageClassification", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "semantic-segmentation"),
    ("ForAudioClassification", "audio-classification"),
    ("ForSequenceClassification", "text-classification"),
    ("ForConditionalGeneration", "text2text-generation-with-past"),
    ("ForPreTraining", "fill-mask"),
    ("Model", "feature-extraction"),
]


def normalize_task(task: str) -> str:
    """The canonical name of `task`; raises UnknownTaskError for a name onnxport lacks."""
    name = ALIASES.get(task, task)
    if name not in TASKS:
        raise UnknownTaskError(
            f"unknown task {task!r}; onnxport knows: {', '.join(TASKS)}")
    return name


def tasks_for(model_type: str) -> tuple[str, ...]:
    """The tasks onnxport exports for a transformers model_type (empty if none): its
    family's, then those derived from transformers' Auto mappings."""
    listed = SUPPORTED.get(model_type, ("", ()))[1]
    if not model_type:
        return listed
    from onnxport.tasks.derive import derived_tasks

    return listed + tuple(t for t in derived_tasks(model_type) if t not in listed)


def plan(model_type: str, task: str) -> tuple[str, str]:
    """(graph family, transformers Auto class) that export `task` for `model_type`."""
    family, listed = SUPPORTED.get(model_type, ("", ()))
    if model_type == "speecht5" and task == "text-to-audio":  # a spectrogram model
        return family, "AutoModelForTextToSpectrogram"
    if task in listed:
        return family, TASKS[task].auto_class
    from onnxport.tasks.derive import auto_class, derived_family

    return derived_family(model_type, task), auto_class(model_type, task)


def detect_task(config: Any) -> tuple[str, str]:
    """(task, why) from `config.architectures` and `config.model_type`.

    Raises:
        UnsupportedTaskError: onnxport exports no task for this model type.
    """
    model_type = getattr(config, "model_type", None) or ""
    tasks = tasks_for(model_type)
    if not tasks:
        raise UnsupportedTaskError(
            f"onnxport exports no task for model_type {model_type!r}: transformers' "
            f"AutoModel* mappings list no task onnxport exports for it; explicitly "
            f"supported model types: {', '.join(sorted(SUPPORTED))}")
    listed = SUPPORTED.get(model_type, ("", ()))[1]
    architectures = list(getattr(config, "architectures", None) or [])
    for arch in architectures:
        if model_type == "whisper" and arch.endswith("ForConditionalGeneration"):
            return "automatic-speech-recognition-with-past", f"architecture {arch}"
        if model_type == "clip" and arch == "CLIPModel":
            return "zero-shot-image-classification", f"architecture {arch}"
        if model_type == "vits":  # VitsModel: its only task
            return "text-to-audio", f"architecture {arch}"
        if model_type == "speecht5" and arch == "SpeechT5ForTextToSpeech":
            return "text-to-audio", f"architecture {arch}"
        if model_type in ("wav2vec2", "hubert", "wavlm") and arch.endswith(
                "ForSequenceClassification"):
            return "audio-classification", f"architecture {arch}"
        for suffix, task in _ARCHITECTURE_SUFFIXES:
            if arch.endswith(suffix):
                if task in listed:
                    return task, f"architecture {arch}"
                break
    from onnxport.tasks.derive import architecture_task

    for arch in architectures:
        task = architecture_task(model_type, arch)
        if task in tasks:
            return task, f"architecture {arch}"
    default = listed[0] if listed else (
        "feature-extraction" if "feature-extraction" in tasks else tasks[0])
    return default, (f"default task of model_type {model_type!r}" if not architectures else
                     f"default task of model_type {model_type!r} "
                     f"(architectures {architectures} name no task of it)")


def resolve_task(config: Any, task: str | None) -> tuple[str, str]:
    """The task to export, and why: `task` checked against the architecture, or detected."""
    if task is None:
        return detect_task(config)
    name = normalize_task(task)
    model_type = getattr(config, "model_type", None) or ""
    tasks = tasks_for(model_type)
    if name not in tasks:
        have = f"its tasks: {', '.join(tasks)}" if tasks else (
            "transformers' AutoModel* mappings list no task onnxport exports for it")
        raise UnsupportedTaskError(
            f"task {name!r} is not available for model_type {model_type!r}; {have}")
    return name, "given with --task"
