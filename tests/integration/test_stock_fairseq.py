"""Stock fairseq end to end on torch >= 2.6, through our ``--user-dir``.

Without the plugin, fairseq 0.12 cannot read its own checkpoints under torch's
``weights_only=True`` default (``argparse.Namespace`` is refused). These tests
train a tiny stock ``transformer`` and decode it with the real CLIs, with no
environment override that would switch weights-only loading off.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch

from nmt_specdec.checkpoint_safety import load_checkpoint
from tests.helpers.fairseq_toy import EXACT_BATCHING, PLUGINS_DIR, hypotheses, run_cli, train_tiny

DECODE_ARGS = ("--cpu", "--beam", "2", *EXACT_BATCHING, "--user-dir", str(PLUGINS_DIR))


def _assert_weights_only_untouched() -> None:
    """The suite must pass with torch's safe default in force."""
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    assert int(torch.__version__.split(".")[0]) >= 2


def test_generate_decodes_every_test_sentence(toy_data_bin: Path, tiny_transformer_ckpt: Path) -> None:
    _assert_weights_only_untouched()
    n_test = len((toy_data_bin.parent / "raw" / "test.src").read_text().splitlines())

    proc = run_cli(
        "generate", [toy_data_bin, "--path", tiny_transformer_ckpt, "--batch-size", "32", *DECODE_ARGS]
    )

    hyps = hypotheses(proc.stdout)
    assert sorted(hyps) == list(range(n_test))
    assert "BLEU4" in proc.stdout  # fairseq got to scoring, i.e. finished normally


def test_interactive_answers_each_input_line(toy_data_bin: Path, tiny_transformer_ckpt: Path) -> None:
    _assert_weights_only_untouched()
    lines = ["a b c d", "p o n", "e e f g h i", "k"]

    proc = run_cli(
        "interactive",
        [toy_data_bin, "--path", tiny_transformer_ckpt, "--source-lang", "src",
         "--target-lang", "tgt", *DECODE_ARGS, "--batch-size", "2", "--buffer-size", "2"],
        stdin="".join(line + "\n" for line in lines),
    )

    hyps = hypotheses(proc.stdout)
    assert sorted(hyps) == list(range(len(lines)))
    assert all(set(h.split()) <= set("abcdefghijklmnop") | {"<unk>"} for h in hyps.values())


def test_training_resumes_from_checkpoint(
    tmp_path: Path, toy_data_bin: Path, tiny_transformer_ckpt: Path
) -> None:
    """fairseq-train's resume path (Trainer.load_checkpoint) reads safely too."""
    _assert_weights_only_untouched()
    save_dir = tmp_path / "resumed"
    shutil.copytree(tiny_transformer_ckpt.parent, save_dir)

    ckpt = train_tiny(toy_data_bin, save_dir, max_update=22)

    log = (save_dir / "train.log").read_text()
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ 20 updates\)", log)
    assert load_checkpoint(ckpt)["optimizer_history"][-1]["num_updates"] == 22
