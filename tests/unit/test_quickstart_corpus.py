"""The quickstart's modes: the shipped model (default), or ``--train`` on Ding or
the gettext corpus (``--corpus``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_specdec.data.steps import RecipeError
from nmt_specdec.errors import UserError
from nmt_specdec.shipped_models import ShippedModel
from nmt_specdec.workflows import quickstart, quickstart_train


def _config(argv: list[str]) -> quickstart.QuickstartConfig:
    args = vars(quickstart.build_parser().parse_args(argv))
    args.pop("verbose")  # a logging switch, not a setting of the run (as main does)
    return quickstart.QuickstartConfig(**args)


def test_default_is_the_shipped_gettext_model() -> None:
    cfg = _config([])
    cfg.validate()
    assert not cfg.train and cfg.model_dir().name == "gettext-de-en-base"
    assert ShippedModel.at(cfg.model_dir()).settings["corpus"] == "gettext"
    assert cfg.report_dir().name == "quickstart"


def test_the_tiny_model_keeps_its_own_report() -> None:
    cfg = _config(["--model", "tiny"])
    cfg.validate()
    assert cfg.model_dir().name == "gettext-de-en-tiny"
    assert cfg.report_dir().name == "quickstart-gettext-de-en-tiny"


def test_training_from_scratch_keeps_its_own_directories() -> None:
    cfg = _config(["--train"])
    cfg.validate()
    assert cfg.training_recipe().name == "cpu_tiny.yaml"
    assert cfg.report_dir().name == "quickstart_train"


def test_a_missing_model_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="settings.json is missing"):
        _config(["--model", str(tmp_path / "nowhere")]).validate()


def test_gettext_has_its_own_recipe_and_directories(tmp_path: Path) -> None:
    cfg = _config(["--train", "--corpus", "gettext", "--work", str(tmp_path)])
    cfg.validate()
    assert cfg.training_recipe().name == "cpu_tiny_gettext.yaml"
    assert cfg.report_dir().name == "quickstart_gettext"
    flags = quickstart_train.train_flags(cfg, tmp_path / "gettext" / "bin", tmp_path / "ckpt")
    assert flags[0] == str(tmp_path / "gettext" / "bin")
    assert flags[flags.index("--arch") + 1] == "specdec_transformer_tiny"


@pytest.mark.parametrize("argv, message", [
    (["--train", "--deb-dir", "debs"], "--deb-dir needs --corpus gettext"),
    (["--train", "--corpus", "gettext", "--ding-file", "de-en"],
     "--ding-file needs --corpus ding"),
])
def test_corpus_specific_flags_are_checked(argv: list[str], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        _config(argv).validate()


def test_unknown_corpus_is_a_one_line_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        quickstart.build_parser().parse_args(["--corpus", "wmt"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
