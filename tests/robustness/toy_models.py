"""A SentencePiece model, dictionaries and random-weight checkpoints, built in-process.

The raw-text paths (``nmt-specdec-translate``, ``fairseq-interactive --bpe
sentencepiece``) need a SentencePiece model whose pieces are the checkpoint's
dictionary. Nothing here trains a network: the checkpoints hold random weights
in fairseq's format, which is all that line counting, ordering, chunking and
error handling need. Building everything takes about a second.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

WORDS = (
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "dog",
    "ran",
    "home",
    "big",
    "red",
    "a",
    "is",
)
# Small positions so that an over-long line is easy to write.
MAX_SOURCE_POSITIONS = 16
MAX_TARGET_POSITIONS = 32
TINY_DIMS = (
    "--encoder-embed-dim",
    "16",
    "--decoder-embed-dim",
    "16",
    "--encoder-ffn-embed-dim",
    "32",
    "--decoder-ffn-embed-dim",
    "32",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
    "--max-source-positions",
    str(MAX_SOURCE_POSITIONS),
    "--max-target-positions",
    str(MAX_TARGET_POSITIONS),
)
SPECDEC_ARGS = (
    "--task",
    "translation_specdec",
    "--arch",
    "specdec_transformer_tiny",
    "--draft-layers",
    "1",
    "--draft-block-size",
    "3",
)
STOCK_ARGS = ("--task", "translation", "--arch", "transformer")


@dataclass(frozen=True)
class RawTextToy:
    """Everything a raw-text translation needs.

    Attributes:
        spm_model: SentencePiece model (unigram, 30 pieces, no byte fallback).
        data: directory with dict.src.txt and dict.tgt.txt (the SPM's pieces).
        specdec: random ``specdec_transformer_tiny`` checkpoint (draft head, K=3).
        stock: random stock ``transformer`` checkpoint, same dictionary.
        other_spm: a SentencePiece model with different pieces (mismatch).
    """

    spm_model: Path
    data: Path
    specdec: Path
    stock: Path
    other_spm: Path


def toy_sentences(n: int, seed: int) -> list[str]:
    """Random sentences over :data:`WORDS`, ending in ``.``, ``!`` or ``?``."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
        + rng.choice([".", "!", "?"])
        for _ in range(n)
    ]


def train_spm(text: Sequence[str], prefix: Path, vocab_size: int) -> Path:
    """Trains a small unigram SentencePiece model on ``text``."""
    import sentencepiece as spm

    spm.set_random_generator_seed(1)
    corpus = prefix.with_suffix(".txt")
    corpus.write_text("".join(line + "\n" for line in text), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return Path(str(prefix) + ".model")


def write_dictionaries(spm_model: Path, data: Path) -> None:
    """fairseq dictionaries holding every piece of ``spm_model`` (shared src/tgt)."""
    import sentencepiece as spm
    from fairseq.data import Dictionary

    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    dictionary = Dictionary()
    for i in range(processor.get_piece_size()):
        if not (processor.is_control(i) or processor.is_unknown(i)):
            dictionary.add_symbol(processor.id_to_piece(i))
    data.mkdir(parents=True, exist_ok=True)
    for side in ("src", "tgt"):
        dictionary.save(str(data / f"dict.{side}.txt"))


def save_random_checkpoint(
    data: Path, path: Path, args: Sequence[str], seed: int = 0
) -> Path:
    """A random-init model saved in fairseq's checkpoint format (cfg + model).

    The fairseq plugin must be imported (registers ``translation_specdec``).
    """
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    parser = options.get_training_parser()
    parsed = options.parse_args_and_arch(
        parser,
        [str(data), "-s", "src", "-t", "tgt", "--dropout", "0", *args, *TINY_DIMS],
    )
    torch.manual_seed(seed)
    model = tasks.setup_task(parsed).build_model(parsed)
    with torch.no_grad():
        # Larger embeddings and attention weights make a random model's output
        # depend visibly on its input (for order checks); a stronger EOS row
        # lets it stop now and then.
        for name, param in model.named_parameters():
            if "embed" in name or "attn" in name:
                param.mul_(4.0)
        model.decoder.output_projection.weight[2] *= 2.0
    cfg = OmegaConf.to_container(
        convert_namespace_to_omegaconf(parsed), resolve=True, enum_to_str=True
    )
    history = [
        {
            "criterion_name": "x",
            "optimizer_name": "x",
            "num_updates": 0,
            "lr_scheduler_state": {"best": None},
        }
    ]
    torch.save(
        {
            "args": None,
            "cfg": cfg,
            "model": model.state_dict(),
            "optimizer_history": history,
            "extra_state": {},
        },
        path,
    )
    return path


def build_raw_text_toy(root: Path) -> RawTextToy:
    """Builds :class:`RawTextToy` under ``root``."""
    import fairseq_plugins  # noqa: F401  (registers the task and model)

    root.mkdir(parents=True, exist_ok=True)
    spm_model = train_spm(toy_sentences(300, seed=0), root / "spm", vocab_size=30)
    other = train_spm(
        [" ".join(f"x{i}y{j}z" for j in range(i % 7 + 2)) for i in range(300)],
        root / "other_spm",
        vocab_size=20,
    )
    data = root / "data"
    write_dictionaries(spm_model, data)
    specdec = save_random_checkpoint(data, root / "specdec.pt", SPECDEC_ARGS)
    stock = save_random_checkpoint(data, root / "stock.pt", STOCK_ARGS)
    return RawTextToy(spm_model, data, specdec, stock, other)


# 1-based numbers of the line with invalid UTF-8 and of the over-long line.
HOSTILE_INVALID_LINE = 6
HOSTILE_LONG_LINE = 9


def hostile_lines(long_repeats: int = 6) -> list[bytes]:
    """Raw input lines (no newlines) that stock tools mishandle.

    Holds empty and blank lines, control characters, a lone ``\\r``, emoji,
    CJK, right-to-left text, combining marks, invalid UTF-8 and one line far
    longer than :data:`MAX_SOURCE_POSITIONS` pieces (:data:`HOSTILE_LONG_LINE`).
    """
    long_line = " ".join(["the big red dog ran home."] * long_repeats)
    return [
        b"the cat sat on the mat.",
        b"",
        b"   \t  ",
        "dog\x00 ran\x1b[31m home\x07\x0c now\x0b!".encode(),
        (
            "\U0001f600 \u4e2d\u6587 \u05e9\u05dc\u05d5\u05dd "  # emoji, CJK, Hebrew
            "e\u0301 \u200fred\ufeff"  # a combining accent, an RLM mark, a BOM
        ).encode(),
        b"the \xff\xfe dog \xc3( ran.",
        "a cat\rsat on\x1c the\u0085 mat".encode(),
        "a\u2028b\u2029c big".encode(),
        long_line.encode(),
        b"the end?",
    ]
