"""SpeechT5 text-to-speech through the CLI with a vocoder given as optimum-cli takes it
(`--model-kwargs '{"vocoder": DIR}'`, issue 42): optimum's three graphs, run as a greedy
TTS loop in ONNX Runtime against eager `generate_speech(..., vocoder=...)`.

The prenet drops activations even in eval. The graph's dropout probability is the input
`prenet_dropout` (default: the config's); the loop feeds 0 and eager's dropout is patched
to the identity, so both sides run the same deterministic network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.cli_tasks.conftest import run_cli

# float32 through the encoder, up to 8 decoder steps whose outputs feed the next step, the
# postnet's convolutions and the HiFi-GAN: ORT's and torch's kernels sum in other orders
# (each graph alone differs by <= 7.2e-7 in the CLI's validation; |waveform| ~ 1; the loop
# differs by 1.5e-6 here).
ATOL = 1e-4
GRAPHS = ["decoder_model_merged.onnx", "decoder_postnet_and_vocoder.onnx", "encoder_model.onnx"]


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    import transformers as tf

    torch.manual_seed(0)
    tts = tf.SpeechT5ForTextToSpeech(tf.SpeechT5Config(
        vocab_size=40, hidden_size=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_mel_bins=8, speech_decoder_prenet_units=16,
        speech_decoder_postnet_units=16, speech_decoder_postnet_layers=2, reduction_factor=2,
        max_text_positions=100, max_speech_positions=100,
        architectures=["SpeechT5ForTextToSpeech"])).eval()
    vocoder = tf.SpeechT5HifiGan(tf.SpeechT5HifiGanConfig(
        model_in_dim=8, upsample_initial_channel=16, upsample_rates=[2, 2],
        upsample_kernel_sizes=[4, 4], resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]])).eval()
    # HiFi-GAN's init (std 0.01) makes a waveform of ~1e-7 here: at std 0.3 it spans ~1
    with torch.no_grad():
        for p in vocoder.parameters():
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.3)
    return tts, vocoder


@pytest.fixture(scope="module")
def speecht5(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, dict[str, Any], str]:
    """(eager TTS model, eager vocoder, sessions by file, CLI output) of one export."""
    root = tmp_path_factory.mktemp("speecht5")
    tts, vocoder = _models()
    tts.save_pretrained(str(root / "tts"))
    vocoder.save_pretrained(str(root / "voc"))
    done = run_cli("export", "--model", str(root / "tts"), "--model-kwargs",
                   '{"vocoder": "%s"}' % (root / "voc"), str(root / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(p.name for p in (root / "out").iterdir() if p.suffix == ".onnx")
    assert files == GRAPHS
    sessions = {f: ort.InferenceSession(str(root / "out" / f)) for f in GRAPHS}
    return tts, vocoder, sessions, done.stdout + done.stderr


def _ort_tts(sessions: dict[str, Any], ids: np.ndarray, speaker: np.ndarray, config: Any,
             threshold: float, maxlenratio: float) -> tuple[np.ndarray, int]:
    """generate_speech's greedy loop (minlenratio 0) over the three graphs -> (waveform,
    steps)."""
    enc, dec, voc = (sessions[f] for f in ("encoder_model.onnx", "decoder_model_merged.onnx",
                                           "decoder_postnet_and_vocoder.onnx"))
    encoder_outputs, encoder_mask = enc.run(None, {"input_ids": ids})
    maxlen = int(encoder_outputs.shape[1] * maxlenratio / config.reduction_factor)
    names = [i.name for i in dec.get_inputs()]
    heads = config.decoder_attention_heads
    head_dim = config.hidden_size // heads
    past = {n: np.zeros((1, heads, 0, head_dim), np.float32) for n in names
            if n.startswith("past_key_values.")}
    sequence = np.zeros((1, 1, config.num_mel_bins), np.float32)
    spectra, step = [], 0
    while True:
        step += 1
        out = dec.run(None, {"output_sequence": sequence, "speaker_embeddings": speaker,
                             "encoder_hidden_states": encoder_outputs,
                             "encoder_attention_mask": encoder_mask,
                             "use_cache_branch": np.array([step > 1]),
                             "prenet_dropout": np.array(0.0, np.float32), **past})
        outs = dict(zip([o.name for o in dec.get_outputs()], out))
        sequence = outs["output_sequence_out"]
        spectra.append(outs["spectrum"])
        past = {n.replace("present.", "past_key_values.", 1): v for n, v in outs.items()
                if n.startswith("present.")}
        if step >= maxlen or outs["prob"].sum() >= threshold:
            break
    (waveform,) = voc.run(None, {"spectrogram": np.concatenate(spectra)})
    return waveform, step


# On this checkpoint and input the summed stop probabilities of steps 1-4 are 1.0202, 1.0322,
# 1.0422, 1.0465 (eager): a threshold of 1.044 stops at step 4 with a margin of 2.5e-3, far
# above the graphs' differences; 9 (above any sum of 2 probabilities) runs to the maximum
# length, 8 steps at maxlenratio 2.
@pytest.mark.parametrize("threshold,maxlenratio,steps", [(1.044, 20.0, 4), (9.0, 2.0, 8)],
                         ids=["stop-threshold", "max-length"])
def test_tts_loop_matches_generate_speech(speecht5: Any, monkeypatch: pytest.MonkeyPatch,
                                          threshold: float, maxlenratio: float,
                                          steps: int) -> None:
    """The loop in ONNX Runtime gives eager's waveform, stopped by the probability
    threshold (after 4 steps) and by the maximum length (8 steps)."""
    from transformers.models.speecht5 import modeling_speecht5

    tts, vocoder, sessions, _ = speecht5
    monkeypatch.setattr(modeling_speecht5.SpeechT5SpeechDecoderPrenet, "_consistent_dropout",
                        lambda self, inputs_embeds, p: inputs_embeds)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 40, (1, 8), generator=gen)
    speaker = torch.randn(1, 512, generator=gen)
    with torch.no_grad():
        eager = tts.generate_speech(ids, speaker, threshold=threshold,
                                    maxlenratio=maxlenratio, vocoder=vocoder)
        spectrogram = tts.generate_speech(ids, speaker, threshold=threshold,
                                          maxlenratio=maxlenratio)
    waveform, ran = _ort_tts(sessions, ids.numpy(), speaker.numpy(), tts.config, threshold,
                             maxlenratio)
    assert ran == steps
    assert ran * tts.config.reduction_factor == spectrogram.shape[0]
    assert waveform.shape == tuple(eager.shape)
    np.testing.assert_allclose(waveform, eager.numpy(), atol=ATOL, rtol=0)
    assert np.abs(eager.numpy()).max() > 0.1  # not a silent waveform


def test_graph_signatures(speecht5: Any) -> None:
    """optimum's input and output names; prenet_dropout defaults to the config's value."""
    tts, _, sessions, out = speecht5
    dec = sessions["decoder_model_merged.onnx"]
    inputs = [i.name for i in dec.get_inputs()]
    assert inputs[:4] == ["output_sequence", "speaker_embeddings", "encoder_hidden_states",
                          "encoder_attention_mask"]
    assert {"past_key_values.1.encoder.value", "use_cache_branch"} <= set(inputs)
    assert [o.name for o in dec.get_outputs()][:3] == ["output_sequence_out", "spectrum",
                                                       "prob"]
    assert [o.name for o in sessions["encoder_model.onnx"].get_outputs()] == [
        "encoder_outputs", "encoder_attention_mask"]
    assert [o.name for o in sessions["decoder_postnet_and_vocoder.onnx"].get_outputs()] == [
        "waveform"]
    assert "validated: ONNX Runtime matches eager PyTorch" in out


def test_model_kwargs_errors(tmp_path: Path) -> None:
    """Unknown keys, a hub id and a non-vocoder folder are typed errors naming them."""
    from onnxport.tasks.errors import CheckpointError, TaskError
    from onnxport.tasks.speecht5 import check_model_kwargs, parse_model_kwargs

    with pytest.raises(TaskError, match="unknown key 'speaker'.*takes: vocoder"):
        check_model_kwargs("speecht5", parse_model_kwargs('{"speaker": 1}'))
    with pytest.raises(TaskError, match="unknown key 'vocoder' for model_type 'bert'"):
        check_model_kwargs("bert", {"vocoder": "x"})
    with pytest.raises(CheckpointError, match="hub id"):
        check_model_kwargs("speecht5", {"vocoder": "microsoft/speecht5_hifigan"})
    with pytest.raises(TaskError, match="JSON object"):
        parse_model_kwargs("[1]")
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(CheckpointError, match="not a SpeechT5HifiGan"):
        check_model_kwargs("speecht5", {"vocoder": str(tmp_path)})


def test_no_vocoder_is_a_typed_error(speecht5: Any) -> None:
    """Without --model-kwargs' vocoder the graphs are refused (optimum-cli needs it too)."""
    from onnxport.tasks.errors import TaskError
    from onnxport.tasks.speecht5 import speecht5_graphs

    with pytest.raises(TaskError, match="needs a vocoder.*--model-kwargs"):
        speecht5_graphs(speecht5[0], "text-to-audio", 1, 8)
