"""Runs inside the client venv (transformers 4.57, optimum-onnx, onnxruntime-genai).

    python client.py JOB.json

JOB: {"kind": "optimum" | "genai", "folder": OUT_DIR, "task": TASK, "inputs": IN.npz,
      "output": OUT.npz, "max_new_tokens": N}. Loads OUT_DIR as a user of that library would
(no export, no onnxport), runs it on the inputs and writes its results to OUT.npz: the output
fields for single-graph tasks, the generated tokens ("tokens") for generation tasks.
"""

from __future__ import annotations

import json
import sys

import numpy as np

OPTIMUM_CLASSES = {
    "image-to-text": "ORTModelForVision2Seq",
    "image-to-text-with-past": "ORTModelForVision2Seq",
    "feature-extraction": "ORTModelForFeatureExtraction",
    "feature-extraction-with-past": "ORTModelForFeatureExtraction",  # the cache unused
    "fill-mask": "ORTModelForMaskedLM",
    "text-classification": "ORTModelForSequenceClassification",
    "token-classification": "ORTModelForTokenClassification",
    "question-answering": "ORTModelForQuestionAnswering",
    "multiple-choice": "ORTModelForMultipleChoice",
    "text-generation": "ORTModelForCausalLM",
    "text-generation-with-past": "ORTModelForCausalLM",
    "text2text-generation": "ORTModelForSeq2SeqLM",
    "text2text-generation-with-past": "ORTModelForSeq2SeqLM",
    "automatic-speech-recognition": "ORTModelForSpeechSeq2Seq",
    "automatic-speech-recognition-with-past": "ORTModelForSpeechSeq2Seq",
    "image-classification": "ORTModelForImageClassification",
    "semantic-segmentation": "ORTModelForSemanticSegmentation",
    # optimum-onnx 0.1 has no ORTModel class for object-detection: test_clients.py runs
    # that folder in onnxruntime directly.
    "audio-classification": "ORTModelForAudioClassification",
    "audio-frame-classification": "ORTModelForAudioFrameClassification",
    "audio-xvector": "ORTModelForAudioXVector",
    "zero-shot-image-classification": "ORTModelForZeroShotImageClassification",
}
GENERATION = {"text-generation", "text-generation-with-past", "text2text-generation",
              "text2text-generation-with-past", "automatic-speech-recognition",
              "automatic-speech-recognition-with-past",
              "image-to-text", "image-to-text-with-past"}


def _is_ctc(job: dict) -> bool:
    """Speech recognition by an encoder alone (Wav2Vec2ForCTC...): ORTModelForCTC, as
    optimum's pipeline picks it."""
    if job["task"] != "automatic-speech-recognition":
        return False
    with open(f"{job['folder']}/config.json") as f:
        return not json.load(f).get("is_encoder_decoder", False)


def run_optimum(job: dict, inputs: dict) -> dict:
    import torch
    import optimum.onnxruntime as ort

    ctc = _is_ctc(job)
    cls = getattr(ort, "ORTModelForCTC" if ctc else OPTIMUM_CLASSES[job["task"]])
    generate = job["task"] in GENERATION and not ctc
    kwargs = {}
    if generate:
        kwargs["use_cache"] = job["task"] not in ("text-generation", "text2text-generation",
                                                  "image-to-text",
                                                  "automatic-speech-recognition")
    model = cls.from_pretrained(job["folder"], **kwargs)
    feeds = {k: torch.from_numpy(v) for k, v in inputs.items()}
    if generate:
        n = int(job["max_new_tokens"])
        tokens = model.generate(**feeds, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                num_beams=1)
        return {"tokens": tokens.numpy(), "class": np.array(type(model).__name__)}
    out = model(**feeds)
    result = {k: v.detach().numpy() for k, v in out.items() if hasattr(v, "detach")}
    result["class"] = np.array(type(model).__name__)
    return result


def run_genai(job: dict, inputs: dict) -> dict:
    import onnxruntime_genai as og

    model = og.Model(job["folder"])
    ids = inputs["input_ids"]
    n = int(job["max_new_tokens"])
    rows = []
    for row in ids:  # one sequence per generator: prompts need no padding
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(row) + n,
                                  min_length=len(row) + n)
        generator = og.Generator(model, params)
        generator.append_tokens(row[None, :].astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        rows.append(np.asarray(generator.get_sequence(0), dtype=np.int64))
    return {"tokens": np.stack(rows)}


def main() -> None:
    job = json.load(open(sys.argv[1]))
    inputs = dict(np.load(job["inputs"]))
    result = run_genai(job, inputs) if job["kind"] == "genai" else run_optimum(job, inputs)
    np.savez(job["output"], **result)


if __name__ == "__main__":
    main()
