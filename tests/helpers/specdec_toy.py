"""SpecDec test helpers: tiny random models, stub drafters, a trained toy model.

Built on :mod:`tests.helpers.fairseq_toy` (toy data, binarize, fairseq CLIs).

* :func:`random_specdec_model` builds a random-weight ``specdec_transformer`` in
  this process (no training, well under a second) for generator tests.
* :class:`OracleDrafter` / :class:`WrongDrafter` / :class:`PadDrafter` implement
  :class:`nmt_specdec.drafters.Drafter` from a known reference output.
* :func:`trained_specdec_model` trains the joint model once with the real
  ``fairseq-train`` CLI and caches it per process, for tests that need a model
  that has learned something (draft accuracy, CLI parity, determinism).

Typical use::

    toy = trained_specdec_model(tmp_path_factory.getbasetemp() / "specdec_toy")
    run_cli("generate", [toy.data_bin, "--path", toy.checkpoint, *toy.decode_args(), ...])
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from nmt_specdec.drafters import Drafter, DraftRequest
from tests.helpers.fairseq_toy import PLUGINS_DIR, binarize, make_toy_data, run_cli

# ----------------------------------------------------------------- random model

TOY_SYMBOLS = tuple("abcdefghijklmnopqrst")  # 20 words after fairseq's 4 specials

RANDOM_MODEL_ARGS: Tuple[str, ...] = (
    "--arch", "specdec_transformer_tiny",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-layers", "2", "--decoder-layers", "2", "--draft-layers", "1",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--draft-block-size", "4", "--dropout", "0",
)


def random_specdec_model(workdir: Path, *, seed: int = 2, eos_boost: float = 0.5,
                         extra_args: Sequence[str] = ()):
    """A random-weight ``specdec_transformer`` (d=32, 2+2 layers) and its task.

    A random decoder rarely predicts EOS, so its greedy outputs would all run to
    the max length; ``eos_boost`` scales up the EOS row of the output layer so
    that, for the default seed, some toy sentences end early and some do not.

    Args:
        workdir: where the (shared src/tgt) dictionary files are written.
        seed: torch seed for the weights.
        eos_boost: the EOS output row is multiplied by ``1 + eos_boost``.
        extra_args: further task/model flags (e.g. ``--spec-decoding``).

    Returns:
        ``(task, model)``; the model is in eval mode on the CPU.
    """
    import fairseq_plugins  # noqa: F401  (registers the task and model)
    from fairseq import options, tasks
    from fairseq.data import Dictionary

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dictionary = Dictionary()
    for symbol in TOY_SYMBOLS:
        dictionary.add_symbol(symbol)
    for side in ("src", "tgt"):
        dictionary.save(str(workdir / f"dict.{side}.txt"))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(workdir), "--task", "translation_specdec", "-s", "src", "-t", "tgt",
        "--criterion", "specdec_joint_loss", "--cpu", *RANDOM_MODEL_ARGS, *extra_args,
    ])
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args).eval()
    with torch.no_grad():
        model.decoder.output_projection.weight[dictionary.eos()] *= 1.0 + eos_boost
    return task, model


def source_batch(dictionary, lengths: Sequence[int], seed: int = 0) -> dict:
    """A fairseq sample of random sources, left-padded as fairseq's translation task.

    Args:
        dictionary: source dictionary.
        lengths: words per sentence (EOS is appended).
        seed: RNG seed for the words.

    Returns:
        ``{"id", "net_input": {"src_tokens", "src_lengths"}}`` with B = len(lengths).
    """
    g = torch.Generator().manual_seed(seed)
    width = max(lengths) + 1
    src = torch.full((len(lengths), width), dictionary.pad())
    for b, n in enumerate(lengths):
        src[b, width - n - 1 : width - 1] = torch.randint(
            dictionary.nspecial, len(dictionary), (n,), generator=g)
        src[b, -1] = dictionary.eos()
    return {
        "id": torch.arange(len(lengths)),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum(1)},
    }


def select_rows(sample: dict, rows: Sequence[int]) -> dict:
    """The sub-batch of ``rows``, with left padding trimmed to the new width."""
    src = sample["net_input"]["src_tokens"][list(rows)]
    lengths = sample["net_input"]["src_lengths"][list(rows)]
    src = src[:, src.size(1) - int(lengths.max()):]
    return {"id": sample["id"][list(rows)],
            "net_input": {"src_tokens": src, "src_lengths": lengths}}


# --------------------------------------------------------------- stub drafters


def committed_lengths(request: DraftRequest, pad: int) -> torch.Tensor:
    """(B,) output tokens committed so far: the prefix minus padding and BOS."""
    return request.prefix.ne(pad).sum(dim=1) - 1


class OracleDrafter(Drafter):
    """Proposes the next K tokens of a known reference output (e.g. greedy).

    Args:
        references: per input row, the expected output tokens (EOS included).
        pad: padding id, proposed past the end of a reference.
    """

    def __init__(self, references: Sequence[Sequence[int]], pad: int):
        self.references = [list(map(int, ref)) for ref in references]
        self.pad = pad
        self.calls = 0

    def next_tokens(self, row: int, committed: int, k: int) -> List[int]:
        ref = self.references[row]
        return (ref[committed : committed + k] + [self.pad] * k)[:k]

    def propose(self, request: DraftRequest) -> torch.Tensor:
        self.calls += 1
        committed = committed_lengths(request, self.pad).tolist()
        rows = [self.next_tokens(int(r), c, request.num_slots)
                for r, c in zip(request.rows.tolist(), committed)]
        return torch.tensor(rows, dtype=torch.long).view(len(rows), request.num_slots)


class WrongDrafter(OracleDrafter):
    """Slot 1 is a real word that is *not* the reference's next token; slots 2..K
    are the reference's true continuation, which must not be accepted after the
    slot-1 rejection."""

    def __init__(self, references, pad: int, first_word: int, vocab_size: int):
        super().__init__(references, pad)
        self.words = list(range(first_word, vocab_size))

    def next_tokens(self, row: int, committed: int, k: int) -> List[int]:
        if k == 0:
            return []
        right = super().next_tokens(row, committed, 1)[0]
        wrong = next(w for w in self.words if w != right)
        return [wrong] + super().next_tokens(row, committed + 1, k - 1)


class PadDrafter(Drafter):
    """Always proposes ``pad``, which the verifier never emits (its score is -inf)."""

    def __init__(self, pad: int):
        self.pad = pad

    def propose(self, request: DraftRequest) -> torch.Tensor:
        return request.prefix.new_full((request.prefix.size(0), request.num_slots), self.pad)
