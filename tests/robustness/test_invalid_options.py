"""Invalid options and missing files: one ``error:`` line, exit status 2, no traceback.

``nmt-specdec-translate`` is checked in-process through ``main`` (which maps
:class:`UserError` to status 2). fairseq's CLIs with our ``--user-dir`` run in
a subprocess, because the one-line report comes from the plugin's excepthook,
which only a real process exercises; each subprocess costs ~10 s, so there is
one per CLI here (generate, interactive) and fairseq-train's is in
``test_broken_checkpoints.py``. The option checks themselves are the task's
(one code path for all three CLIs) and are covered in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_specdec import translate as tr
from nmt_specdec.errors import UserError
from tests.helpers.fairseq_toy import PLUGINS_DIR, run_cli
from tests.robustness.toy_models import MAX_TARGET_POSITIONS


def one_error_line(stderr: str) -> str:
    """The single ``error:`` line of ``stderr``; fails on a traceback or several."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def _translate_args(toy, *extra: str) -> list[str]:
    return [
        "--checkpoint",
        str(toy.specdec),
        "--spm-model",
        str(toy.spm_model),
        "--data",
        str(toy.data),
        "--cpu",
        "--max-len-b",
        "4",
        "--input",
        "/dev/null",
        *extra,
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--spec-decoding", "--spec-beta", "0"],
            "error: --spec-beta must be >= 1, got 0",
        ),
        (
            ["--spec-decoding", "--spec-tau", "-0.5"],
            "error: --spec-tau must be >= 0, got -0.5",
        ),
        (
            ["--spec-decoding", "--spec-tau", "nan"],
            "error: --spec-tau must be >= 0, got nan",
        ),
        (
            ["--spec-decoding", "--spec-k", str(MAX_TARGET_POSITIONS)],
            f"error: --spec-k {MAX_TARGET_POSITIONS} must be below the model's "
            f"{MAX_TARGET_POSITIONS} target positions",
        ),
        (["--beam", "0"], "error: --beam must be >= 1, got 0"),
        (["--batch-size", "0"], "error: --batch-size must be >= 1, got 0"),
    ],
    ids=["beta0", "tau-neg", "tau-nan", "k-too-long", "beam0", "batch0"],
)
def test_translate_rejects_bad_decoding_options(
    raw_text_toy, capsys, extra, message
) -> None:
    assert tr.main(_translate_args(raw_text_toy, *extra)) == 2
    assert one_error_line(capsys.readouterr().err) == message


@pytest.mark.parametrize("value, message", [("-1", "must be >= 0, got -1"),
                                            ("banana", "must be an integer >= 0 or 'auto', "
                                                       "got 'banana'")])
def test_translate_rejects_a_bad_spec_k_as_argparse_does(raw_text_toy, capsys, value,
                                                         message) -> None:
    """--spec-k's text is checked by argparse, like every typed flag: usage, then
    the program's one error line."""
    with pytest.raises(SystemExit) as exit_:
        tr.main(_translate_args(raw_text_toy, "--spec-decoding", "--spec-k", value))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: nmt-specdec-translate")
    assert err.splitlines()[-1] == f"nmt-specdec-translate: error: argument --spec-k: {message}"


def test_spec_k_above_the_heads_block_size_is_lowered_with_one_warning(tmp_path, caplog):
    from nmt_specdec.decoding.build import resolve
    from nmt_specdec.decoding.options import DecodingOptions
    from tests.helpers.specdec_toy import random_specdec_model

    _, model = random_specdec_model(tmp_path)  # --draft-block-size 4
    with caplog.at_level("WARNING"):
        resolved = resolve(model, DecodingOptions(spec_decoding=True, k=9))
    assert resolved.k == 4 and not resolved.auto_k
    assert [r.getMessage() for r in caplog.records] == [
        "--spec-k 9: this draft head was trained to draft 4 tokens; decoding with --spec-k 4"]
    assert resolve(model, DecodingOptions(spec_decoding=True, k=3)).k == 3


def test_translate_finds_the_dictionaries_beside_the_checkpoint(raw_text_toy, tmp_path,
                                                               capsys) -> None:
    """Without --data, the checkpoint's own directory when it has the dictionaries
    (as a shipped model's does), though its training data directory is gone."""
    import shutil

    import torch

    from nmt_specdec.checkpoint_safety import load_checkpoint

    shipped = tmp_path / "model"
    shutil.copytree(raw_text_toy.data, shipped)
    state = load_checkpoint(raw_text_toy.specdec)
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    torch.save(state, shipped / "model.pt")
    args = _translate_args(raw_text_toy)
    args[1], data = str(shipped / "model.pt"), args.index("--data")
    del args[data: data + 2]
    assert tr.main(args) == 0, capsys.readouterr().err


def test_translate_spec_decoding_needs_a_draft_head(raw_text_toy, capsys) -> None:
    args = _translate_args(raw_text_toy, "--spec-decoding")
    args[1] = str(raw_text_toy.stock)

    assert tr.main(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "needs a checkpoint with a draft head" in line and "train one with" in line
    assert "specdec_transformer" in line


def test_translate_rejects_foreign_sentencepiece_model(raw_text_toy, capsys) -> None:
    args = _translate_args(raw_text_toy, "--spm-model", str(raw_text_toy.other_spm))

    assert tr.main(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(
        f"error: --spm-model {raw_text_toy.other_spm} does not match "
        "the checkpoint's source dictionary: only "
    )


@pytest.mark.parametrize(
    "flag, value, message",
    [
        (
            "--checkpoint",
            "nowhere.pt",
            "error: cannot read checkpoint {}: No such file",
        ),
        ("--spm-model", "nowhere.model", "error: --spm-model: no such file {}"),
        ("--input", "nowhere.txt", "error: --input: no such file {}"),
        ("--data", "nowhere", "error: --data: no such directory {}"),
        ("--user-dir", "nowhere", "error: --user-dir: no such directory {}"),
    ],
)
def test_translate_reports_missing_files(
    raw_text_toy, tmp_path: Path, capsys, flag, value, message
) -> None:
    missing = str(tmp_path / value)
    assert tr.main([*_translate_args(raw_text_toy), flag, missing]) == 2
    assert one_error_line(capsys.readouterr().err).startswith(message.format(missing))


def test_task_reports_missing_dictionary_in_one_line(tmp_path: Path) -> None:
    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.specdec_task import (
        TranslationSpecDecConfig,
        TranslationSpecDecTask,
    )

    cfg = TranslationSpecDecConfig(
        data=str(tmp_path), source_lang="src", target_lang="tgt"
    )
    with pytest.raises(UserError, match=r"no such file .*dict\.src\.txt"):
        TranslationSpecDecTask.setup_task(cfg)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"spec_k": "-1"}, "--spec-k must be >= 0, got -1"),
        ({"spec_k": 1024}, "--spec-k 1024 must be below --max-target-positions 1024"),
        ({"spec_beta": 0}, "--spec-beta must be >= 1, got 0"),
        ({"spec_tau": -1.0}, "--spec-tau must be >= 0, got -1.0"),
        ({"spec_drafter": "oracle"},
         "--spec-drafter must be one of head, verifier-int8, verifier-int4, got 'oracle'"),
    ],
)
def test_task_rejects_bad_decoding_options(raw_text_toy, options, message) -> None:
    """What fairseq-train/-generate/-interactive build first: the task."""
    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.specdec_task import (
        TranslationSpecDecConfig,
        TranslationSpecDecTask,
    )

    cfg = TranslationSpecDecConfig(
        data=str(raw_text_toy.data), source_lang="src", target_lang="tgt", **options
    )
    with pytest.raises(UserError) as err:
        TranslationSpecDecTask.setup_task(cfg)
    assert str(err.value) == message


# ----------------------------------------------------- fairseq CLIs (subprocess)


def test_generate_rejects_negative_spec_k(raw_text_toy) -> None:
    proc = run_cli(
        "generate",
        [
            raw_text_toy.data,
            "--path",
            raw_text_toy.specdec,
            "--user-dir",
            PLUGINS_DIR,
            "--task",
            "translation_specdec",
            "-s",
            "src",
            "-t",
            "tgt",
            "--cpu",
            "--spec-decoding",
            "--spec-k",
            "-1",
        ],
        check=False,
    )

    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == "error: --spec-k must be >= 0, got -1"


def test_interactive_spec_decoding_without_draft_head(raw_text_toy) -> None:
    proc = run_cli(
        "interactive",
        [
            raw_text_toy.data,
            "--path",
            raw_text_toy.stock,
            "--user-dir",
            PLUGINS_DIR,
            "--task",
            "translation_specdec",
            "-s",
            "src",
            "-t",
            "tgt",
            "--cpu",
            "--spec-decoding",
        ],
        stdin="the cat\n",
        check=False,
    )

    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert "--spec-decoding needs a checkpoint with a draft head" in line
    assert "train one with" in line
    assert "H-" not in proc.stdout
