"""Tiny checkpoints with real tokenizer files, as transformers.js reads them.

The models are tests/cli_tasks/checkpoints.py's sizes (hidden 32, 2 layers, vocabulary 99)
plus Qwen3; each is saved with save_pretrained next to a tokenizer built offline with the
`tokenizers` library (a word-level vocabulary of 99 entries, whitespace pre-tokenizer),
saved by transformers (tokenizer.json, tokenizer_config.json), and ViT with its image
processor's preprocessor_config.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.cli_tasks import checkpoints as ck

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "runs", "fast", "slow", "is", "was",
         "and", "or", "not", "hello", "world", "good", "bad", "day", "night", "red", "blue",
         "green", "big", "small", "tree", "house", "car", "road"]
SPECIALS = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            "qwen3": ["<pad>", "<unk>", "<s>", "</s>"],
            "t5": ["<pad>", "</s>", "<unk>"]}


def _vocab(specials: list[str]) -> dict[str, int]:
    tokens = list(specials) + WORDS
    tokens += [f"w{i}" for i in range(ck.VOCAB - len(tokens))]
    return {t: i for i, t in enumerate(tokens)}


def _word_level(specials: list[str], unk: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(_vocab(specials), unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return tok


def _save_tokenizer(name: str, folder: Path) -> None:
    import transformers as tf
    from tokenizers import processors

    if name == "bert":
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

        tok = Tokenizer(models.WordPiece(_vocab(SPECIALS["bert"]), unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
        tok.decoder = decoders.WordPiece(prefix="##")
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]",
                                          unk_token="[UNK]", cls_token="[CLS]",
                                          sep_token="[SEP]", mask_token="[MASK]")
        fast.save_pretrained(folder)
        return
    if name == "qwen3":
        tok = _word_level(SPECIALS["qwen3"], "<unk>")
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                          unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    else:  # t5: the input ends with </s>, as T5's tokenizer does
        tok = _word_level(SPECIALS["t5"], "<unk>")
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", 1)])
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                          unk_token="<unk>", eos_token="</s>")
    fast.save_pretrained(folder)


def qwen3() -> Any:
    tf = ck._tf()
    # end of sequence: a token greedy decoding of the random model does not reach within the
    # tests' steps, so that every step runs (</s>, 3, was the first one it picked)
    return tf.Qwen3ForCausalLM(tf.Qwen3Config(head_dim=8, **{**ck._LLAMA_LIKE,
                                                             "bos_token_id": 2,
                                                             "eos_token_id": 98}))


BUILDERS = {"bert": ck.bert, "qwen3": qwen3, "t5": ck.t5, "vit": ck.vit}


def save_web_checkpoint(name: str, folder: Path) -> Path:
    """Save the tiny `name` checkpoint (bert, qwen3, t5, vit) with its tokenizer or image
    processor into `folder`."""
    torch.manual_seed(0)
    model = BUILDERS[name]()
    model.eval()
    model.save_pretrained(str(folder))
    if name == "vit":
        import json

        # ViTImageProcessor's fields (its class wants torchvision to save itself)
        (folder / "preprocessor_config.json").write_text(json.dumps({
            "image_processor_type": "ViTImageProcessor", "do_resize": True,
            "size": {"height": 32, "width": 32}, "resample": 2, "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5]}, indent=2))
    else:
        _save_tokenizer(name, folder)
    return folder
