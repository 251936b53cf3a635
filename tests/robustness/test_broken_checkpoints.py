"""Broken, foreign and mismatched checkpoints: refused in one line, nothing executed.

Complements ``test_malicious_checkpoint.py`` (fairseq's loader and CLIs) with
the raw-text path (``nmt-specdec-translate``), checkpoints that unpickle fine
but do not fit the model (wrong architecture, another dictionary), and
fairseq-train resuming from such a checkpoint.
"""

from __future__ import annotations

import ast
import os
import random
import re
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_plugins  # noqa: F401  (safe loader and load guards in this process)
from nmt_specdec import translate as tr
from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.errors import CheckpointError
from tests.helpers.fairseq_toy import PLUGINS_DIR, TINY_TRAIN_ARGS, run_cli
from tests.robustness.test_invalid_options import one_error_line
from tests.robustness.toy_models import TINY_DIMS


class _Payload:
    """Unpickles as ``os.system("touch <marker>")``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch '{self.marker}'",))


def _translate(toy, checkpoint: Path, capsys, *extra: str) -> str:
    """Runs ``nmt-specdec-translate`` in-process; returns its one error line."""
    args = [
        "--checkpoint",
        str(checkpoint),
        "--spm-model",
        str(toy.spm_model),
        "--data",
        str(toy.data),
        "--cpu",
        "--input",
        os.devnull,
        *extra,
    ]
    assert tr.main(args) == 2
    return one_error_line(capsys.readouterr().err)


def _variant(source: Path, dest: Path, **model_changes) -> Path:
    """A copy of ``source`` whose saved model config differs by ``model_changes``."""
    state = load_checkpoint(source)
    for name, value in model_changes.items():
        setattr(state["cfg"]["model"], name, value)
    torch.save(state, dest)
    return dest


def _other_dictionary(toy, dest: Path) -> Path:
    """A data dir whose dictionaries have three more symbols than the checkpoint's."""
    dest.mkdir()
    for side in ("src", "tgt"):
        text = (toy.data / f"dict.{side}.txt").read_text(encoding="utf-8")
        (dest / f"dict.{side}.txt").write_text(
            text + "zzz 1\nyyy 1\nxxx 1\n", encoding="utf-8"
        )
    return dest


@pytest.mark.parametrize("kind", ["truncated", "random-bytes", "text-file", "empty"])
def test_translate_refuses_unreadable_checkpoint(
    raw_text_toy, tmp_path, capsys, kind
) -> None:
    data = raw_text_toy.specdec.read_bytes()
    content = {
        "truncated": data[: len(data) * 2 // 3],
        "random-bytes": random.Random(0).randbytes(4096),
        "text-file": b"checkpoint_best.pt: see the README\n" * 20,
        "empty": b"",
    }[kind]
    bad = tmp_path / "bad.pt"
    bad.write_bytes(content)

    line = _translate(raw_text_toy, bad, capsys)

    # The loader's wording varies with what the bytes look like (a text file
    # starting with "c" reads as a pickle GLOBAL); it must name the file and
    # refuse it in one line.
    assert re.match(
        rf"error: (cannot load|cannot read|refusing to load) checkpoint "
        rf"{re.escape(str(bad))}: ",
        line,
    ), line


def test_translate_refuses_malicious_pickle(raw_text_toy, tmp_path, capsys) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    state = load_checkpoint(raw_text_toy.specdec)
    state["extra_state"] = _Payload(marker)
    torch.save(state, evil)

    line = _translate(raw_text_toy, evil, capsys)

    assert line.startswith(f"error: refusing to load checkpoint {evil}")
    assert f"'{os.system.__module__}.system'" in line
    assert not marker.exists()


def test_translate_refuses_wrong_architecture(raw_text_toy, tmp_path, capsys) -> None:
    # The saved weights have a draft head; the saved config says stock transformer.
    stock_arch = _variant(
        raw_text_toy.specdec, tmp_path / "a.pt", _name="transformer", arch="transformer"
    )
    line = _translate(raw_text_toy, stock_arch, capsys)
    assert line.startswith(
        f"error: checkpoint {stock_arch} does not match the architecture "
        "(unexpected parameters: draft_head."
    )

    deeper = _variant(raw_text_toy.specdec, tmp_path / "b.pt", encoder_layers=2)
    line = _translate(raw_text_toy, deeper, capsys)
    assert (
        "does not match the architecture (missing parameters: encoder.layers.1." in line
    )

    # fairseq itself fails on an unknown name with an IndexError (a broken
    # format string in fairseq.models.build_model).
    unknown = _variant(
        raw_text_toy.specdec,
        tmp_path / "c.pt",
        _name="no_such_arch",
        arch="no_such_arch",
    )
    line = _translate(raw_text_toy, unknown, capsys)
    assert line == (
        f"error: checkpoint {unknown} needs the model architecture "
        "'no_such_arch', which is not registered; is the --user-dir plugin "
        "that defines it loaded?"
    )


@pytest.mark.parametrize("kind", ["state-dict", "tensor", "no-cfg"])
def test_translate_refuses_pytorch_file_that_is_no_fairseq_checkpoint(
    raw_text_toy, tmp_path, capsys, kind
) -> None:
    state = load_checkpoint(raw_text_toy.specdec)
    content = {
        "state-dict": state["model"],
        "tensor": torch.zeros(3),
        "no-cfg": {"model": state["model"], "cfg": None},
    }[kind]
    path = tmp_path / "weights.pt"
    torch.save(content, path)

    line = _translate(raw_text_toy, path, capsys)

    assert line.startswith(
        f"error: {path} is a PyTorch file but not a fairseq checkpoint"
    )


def test_translate_explains_an_empty_optimizer_history(raw_text_toy, tmp_path, capsys) -> None:
    """A valid checkpoint whose ``optimizer_history`` is empty: fairseq's upgrade
    reads its last entry (an IndexError); the error says how to mend the file,
    and the file mended so decodes."""
    state = load_checkpoint(raw_text_toy.specdec)
    state["optimizer_history"] = []
    path = tmp_path / "no_history.pt"
    torch.save(state, path)

    line = _translate(raw_text_toy, path, capsys)

    assert line.startswith(f"error: checkpoint {path} has an empty 'optimizer_history'")
    state["optimizer_history"] = ast.literal_eval(line[line.index("e.g. ") + 5:])  # as advised
    torch.save(state, path)
    assert tr.main(["--checkpoint", str(path), "--spm-model", str(raw_text_toy.spm_model),
                    "--data", str(raw_text_toy.data), "--cpu", "--input", os.devnull]) == 0


def test_translate_refuses_dictionary_mismatch(raw_text_toy, tmp_path, capsys) -> None:
    other = _other_dictionary(raw_text_toy, tmp_path / "other")

    line = _translate(raw_text_toy, raw_text_toy.specdec, capsys, "--data", str(other))

    assert line.startswith(
        f"error: checkpoint {raw_text_toy.specdec} does not match the "
        "dictionary: its encoder.embed_tokens.weight has "
    )
    rows = load_checkpoint(raw_text_toy.specdec)["model"][
        "encoder.embed_tokens.weight"
    ].size(0)
    assert f"has {rows} rows but the dictionary has {rows + 3} symbols" in line


def test_fairseq_ensemble_loader_explains_mismatches(raw_text_toy, tmp_path) -> None:
    """The loader that fairseq-generate and -interactive call."""
    other = _other_dictionary(raw_text_toy, tmp_path / "other")
    with pytest.raises(
        CheckpointError,
        match=r"does not match the dictionary: its "
        r"encoder\.embed_tokens\.weight has \d+ rows",
    ):
        checkpoint_utils.load_model_ensemble(
            [str(raw_text_toy.specdec)], arg_overrides={"data": str(other)}
        )

    deeper = _variant(raw_text_toy.stock, tmp_path / "deeper.pt", decoder_layers=2)
    with pytest.raises(
        CheckpointError,
        match=r"does not match the architecture \(missing "
        r"parameters: decoder\.layers\.1\.",
    ):
        checkpoint_utils.load_model_ensemble([str(deeper)])

    # fairseq's own existence check (IOError "Model file not found") and a
    # bare state dict (KeyError in fairseq's upgrade code) become one line too.
    missing = tmp_path / "missing.pt"
    with pytest.raises(
        CheckpointError, match=r"^cannot read checkpoint .*missing\.pt: No "
    ):
        checkpoint_utils.load_model_ensemble([str(missing)])
    bare = tmp_path / "bare.pt"
    torch.save(load_checkpoint(raw_text_toy.stock)["model"], bare)
    with pytest.raises(CheckpointError, match=r"is a PyTorch file but not a fairseq"):
        checkpoint_utils.load_model_ensemble([str(bare)])


def test_train_resume_from_checkpoint_with_other_dictionary(
    raw_text_toy, toy_data_bin, tmp_path
) -> None:
    """fairseq-train --restore-file of a checkpoint trained on other data: exit 2."""
    args = [
        toy_data_bin,
        "--user-dir",
        PLUGINS_DIR,
        "--arch",
        "transformer",
        *TINY_DIMS,
        *TINY_TRAIN_ARGS,
        "--max-update",
        "2",
        "--save-dir",
        tmp_path / "ckpt",
        "--restore-file",
        raw_text_toy.stock,
        "--reset-optimizer",
    ]

    proc = run_cli("train", args, check=False)

    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_error_line(proc.stderr)
    assert line.startswith(
        f"error: checkpoint {raw_text_toy.stock} does not match the dictionary"
    )
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
