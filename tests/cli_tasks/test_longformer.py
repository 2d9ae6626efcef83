"""Longformer through the checkpoint CLI (issue 42): its attention branched on whether any token
is global (`.any().item()`) and gathered the global tokens with `nonzero()`, which torch.export
cannot capture; the capture-only patch (library_patches/transformers_longformer.py) computes the
same attention with static shapes.

One tiny checkpoint holds the masked-LM, question-answering and token-classification heads
(each class loads its own), so each task exports the same weights. ONNX Runtime is
compared with eager on a batch that is not the example's shape, with padding, with no global
token and with global tokens in some rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.cli_tasks.conftest import run_cli

pytestmark = pytest.mark.filterwarnings("ignore")

# task -> (the class eager runs, the graph's outputs); fill-mask is the checkpoint's default
TASKS = {"fill-mask": ("LongformerForMaskedLM", ["logits"]),
         "question-answering": ("LongformerForQuestionAnswering", ["start_logits", "end_logits"]),
         "token-classification": ("LongformerForTokenClassification", ["logits"])}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import safetensors.torch
    import transformers as tf

    config = tf.LongformerConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, attention_window=[4, 4], max_position_embeddings=64,
        type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2,
        num_labels=2, initializer_range=0.1)
    torch.manual_seed(0)
    models = [getattr(tf, cls)(config) for cls, _ in TASKS.values()]
    folder = tmp_path_factory.mktemp("longformer") / "ck"
    models[0].save_pretrained(str(folder))
    weights = folder / "model.safetensors"
    state = safetensors.torch.load_file(str(weights))
    for model in models[1:]:  # the other heads beside the masked-LM's
        state.update({k: v.contiguous() for k, v in model.state_dict().items()
                      if not k.startswith("longformer.")})
    safetensors.torch.save_file(state, str(weights), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def exported(checkpoint: Path) -> dict[str, Path]:
    """task -> its model.onnx: the default task through the CLI (validated there), the others
    through the CLI's function in this process (no second import of torch and transformers)."""
    from onnxport.tasks import export_checkpoint

    out = {}
    for task in TASKS:
        folder = checkpoint.parent / f"{task}-onnx"
        if task == "fill-mask":
            done = run_cli("export", "--model", str(checkpoint), str(folder))
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            assert "task: fill-mask" in done.stdout + done.stderr
        else:
            export_checkpoint(checkpoint, folder, task, validate=False)
        out[task] = folder / "model.onnx"
    return out


def _feeds() -> dict[str, dict[str, torch.Tensor]]:
    """Inputs of 3 x 11 (not a multiple of the window, not an example shape), rows padded by
    0, 4 and 7: without global tokens, and with global tokens in two of three rows."""
    ids = torch.randint(3, 99, (3, 11), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    some = torch.zeros_like(ids)
    some[0, [0, 5, 6]] = 1
    some[1, 2] = 1
    return {"no global": {"input_ids": ids, "attention_mask": mask,
                          "global_attention_mask": torch.zeros_like(ids)},
            "global": {"input_ids": ids, "attention_mask": mask, "global_attention_mask": some}}


@pytest.mark.parametrize("task", list(TASKS))
def test_longformer_task_matches_eager(task: str, checkpoint: Path,
                                       exported: dict[str, Path]) -> None:
    import transformers as tf

    cls, outputs = TASKS[task]
    model = getattr(tf, cls).from_pretrained(str(checkpoint)).eval()
    session = ort.InferenceSession(str(exported[task]))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask",
                                                      "global_attention_mask"]
    got_by_case: dict[str, Any] = {}
    for case, feeds in _feeds().items():
        with torch.no_grad():
            expected = model(**feeds)
        got = session.run(outputs, {k: v.numpy() for k, v in feeds.items()})
        for name, value in zip(outputs, got):
            want = getattr(expected, name).numpy()
            assert float(np.abs(want).max()) > 1e-2, name  # values a 1e-4 tolerance tests
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4, err_msg=f"{case} {name}")
        got_by_case[case] = got[0]
    # the graph reads global_attention_mask
    assert not np.allclose(got_by_case["no global"], got_by_case["global"], atol=1e-3)
