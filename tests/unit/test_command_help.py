"""What ``--help`` shows: every option explained, defaults stated, and the
evaluation's sentence limit under a name fairseq users cannot mistake for a
batch size (the old one still works, with a warning)."""

from __future__ import annotations

import argparse

import pytest

from nmt_specdec import translate
from nmt_specdec.data import binarize
from nmt_specdec.evaluation import cli


def _options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions
            if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"]


@pytest.mark.parametrize("build", [translate.build_parser, cli.build_parser,
                                   binarize.build_parser],
                         ids=["translate", "evaluate", "binarize"])
def test_every_option_has_help_and_its_default(build):
    parser = build()
    for action in _options(parser):
        assert action.help, action.option_strings
    text = parser.format_help()
    assert any(default in text for default in ("(default: 1 32)", "(default: 5)",
                                               "(default: 2)"))
    assert "(default: None)" not in text and "(default: False)" not in text


def test_translate_help_states_the_defaults_of_typed_options():
    text = " ".join(translate.build_parser().format_help().split())
    for shown in ("beam size without --spec-decoding (default: 5)",
                  "sentences per model call (default: 32)", "(default: head)"):
        assert shown in text


def test_first_sentences_and_its_deprecated_alias(caplog):
    parser = cli.build_parser()
    required = ["--checkpoint", "m.pt", "--out", "o"]
    with caplog.at_level("WARNING"):
        assert parser.parse_args([*required, "--first-sentences", "6"]).max_sentences == 6
        assert not caplog.records
        assert parser.parse_args([*required, "--max-sentences", "7"]).max_sentences == 7
    assert [r.getMessage() for r in caplog.records] == [
        "--max-sentences is deprecated: use --first-sentences"]
    assert parser.parse_args(required).max_sentences is None
    assert "--max-sentences" not in parser.format_help()
