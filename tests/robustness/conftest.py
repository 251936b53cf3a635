"""Fixtures of the robustness tests: raw-text toy models, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.robustness.toy_models import RawTextToy, build_raw_text_toy, hostile_lines


@pytest.fixture(scope="session")
def raw_text_toy(tmp_path_factory: pytest.TempPathFactory) -> RawTextToy:
    """SentencePiece model, dictionaries, random SpecDec and stock checkpoints."""
    return build_raw_text_toy(tmp_path_factory.mktemp("raw_text_toy"))


@pytest.fixture(scope="session")
def hostile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`hostile_lines` as a file, one line per ``\\n``."""
    path = tmp_path_factory.mktemp("hostile") / "hostile.txt"
    path.write_bytes(b"".join(line + b"\n" for line in hostile_lines()))
    return path
