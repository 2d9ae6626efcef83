"""Text-to-audio through the CLI (issue 42): VITS's model.onnx in ONNX Runtime against eager.

VITS draws normal noise twice (the stochastic duration predictor's latents, the prior's).
The graph samples it in ONNX Runtime at the config's scales, which are also inputs with
those defaults (`noise_scale`, `noise_scale_duration`, `speaking_rate`): with both scales
at 0 the output is deterministic and compared with eager's at the same scales.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.cli_tasks.conftest import run_cli

# float32 through a dozen convolutions, the flows and the HiFi-GAN's tanh: ORT's and
# torch's kernels sum in other orders (observed 5e-6 on the waveform, |values| ~ 1e-1).
ATOL = 1e-4


def _vits() -> torch.nn.Module:
    import transformers as tf

    torch.manual_seed(0)
    # Two duration flows: the reverse pass runs one rational-quadratic spline flow (its
    # data-dependent masks), as real checkpoints do.
    return tf.VitsModel(tf.VitsConfig(
        vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32,
        flow_size=8, spectrogram_bins=9, upsample_initial_channel=16, upsample_rates=[4, 4],
        upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 2]],
        prior_encoder_num_flows=1, prior_encoder_num_wavenet_layers=1,
        duration_predictor_num_flows=2, duration_predictor_filter_channels=16,
        depth_separable_num_layers=1, posterior_encoder_num_wavenet_layers=1,
        wavenet_kernel_size=3, architectures=["VitsModel"])).eval()


@pytest.fixture(scope="module")
def vits(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Any, str]:
    """(eager model, ONNX Runtime session, CLI output) of one export."""
    root = tmp_path_factory.mktemp("vits")
    model = _vits()
    model.save_pretrained(str(root / "ck"))
    done = run_cli("export", "--model", str(root / "ck"), str(root / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in (root / "out").iterdir()) == ["config.json", "model.onnx"]
    return model, ort.InferenceSession(str(root / "out" / "model.onnx")), done.stdout + done.stderr


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 20, (3, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    return ids, mask


def _eager(model: Any, ids: torch.Tensor, mask: torch.Tensor, *, noise: float = 0.0,
           noise_duration: float = 0.0, speaking_rate: float = 1.0) -> Any:
    saved = model.noise_scale, model.noise_scale_duration
    model.noise_scale, model.noise_scale_duration = noise, noise_duration
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, speaking_rate=speaking_rate)
    finally:
        model.noise_scale, model.noise_scale_duration = saved


def _ort(session: Any, ids: torch.Tensor, mask: torch.Tensor, **scales: float) -> list[Any]:
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    feeds.update({k: np.array(v, dtype=np.float32) for k, v in scales.items()})
    return session.run(None, feeds)


def test_graph_takes_optimums_inputs_and_the_scales_as_defaults(vits: Any) -> None:
    model, session, log = vits
    assert "task: text-to-audio (architecture VitsModel)" in log
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in session.get_outputs()] == ["waveform", "spectrogram"]
    assert session.get_outputs()[0].shape == ["text_batch_size", "n_samples"]
    defaults = {i.name for i in session.get_overridable_initializers()}
    assert defaults == {"noise_scale", "noise_scale_duration", "speaking_rate"}


@pytest.mark.parametrize("speaking_rate", [1.0, 1.7])
def test_padded_batch_matches_eager_without_noise(vits: Any, speaking_rate: float) -> None:
    model, session, _ = vits
    ids, mask = _padded_batch()
    expected = _eager(model, ids, mask, speaking_rate=speaking_rate)
    waveform, spectrogram = _ort(session, ids, mask, noise_scale=0.0,
                                 noise_scale_duration=0.0, speaking_rate=speaking_rate)
    assert waveform.shape == tuple(expected.waveform.shape)  # the durations' frame count
    assert float(expected.waveform.abs().max()) > 1e-2  # values that ATOL tests
    np.testing.assert_allclose(waveform, expected.waveform.numpy(), rtol=0, atol=ATOL)
    np.testing.assert_allclose(spectrogram, expected.spectrogram.numpy(), rtol=0, atol=ATOL)


def test_noise_is_sampled_at_the_given_scales(vits: Any) -> None:
    model, session, _ = vits
    ids, mask = _padded_batch()
    quiet = _eager(model, ids, mask)
    # Durations without noise (the frame count is eager's), the prior's latents with it.
    first = _ort(session, ids, mask, noise_scale=0.7, noise_scale_duration=0.0)
    second = _ort(session, ids, mask, noise_scale=0.7, noise_scale_duration=0.0)
    assert first[0].shape == tuple(quiet.waveform.shape)
    assert np.isfinite(first[0]).all()
    assert not np.allclose(first[1], second[1])  # sampled anew on each run
    assert not np.allclose(first[1], quiet.spectrogram.numpy(), atol=1e-3)
    # The defaults (the config's scales, noise in both) run with optimum's two inputs.
    waveform, spectrogram = _ort(session, ids, mask)
    assert np.isfinite(waveform).all()
    frames = spectrogram.shape[2]
    assert waveform.shape == (3, frames * int(np.prod(model.config.upsample_rates)))


@pytest.mark.parametrize("reverse", [False, True])
def test_capture_patch_of_the_spline_is_exact(reverse: bool) -> None:
    """library_patches.transformers_vits: the spline for every element and `where`, in
    place of transformers' masked in-place writes; the same values, tails included."""
    import transformers.models.vits.modeling_vits as vits_module

    from onnxport.capture.library_patches.transformers_vits import PATCHES

    (patched,) = PATCHES.values()
    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(2, 1, 37, generator=g) * 4  # some beyond the tail bound of 5
    assert bool((inputs.abs() > 5).any()) and bool((inputs.abs() < 5).any())
    widths, heights = torch.randn(2, 2, 1, 37, 10, generator=g)
    derivatives = torch.randn(2, 1, 37, 9, generator=g)
    expected = vits_module._unconstrained_rational_quadratic_spline(
        inputs, widths, heights, derivatives, reverse=reverse)
    got = patched(inputs, widths, heights, derivatives, reverse=reverse)
    for e, a in zip(expected, got):
        # the same arithmetic on tensors of another length (all elements, not the masked
        # ones): torch's vectorized log/sqrt may round the last bit otherwise (seen: 1 ulp)
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)
