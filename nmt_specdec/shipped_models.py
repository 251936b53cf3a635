"""The models shipped in ``models/``: which one is the default, and what a model
directory holds.

A shipped model directory holds ``model.pt`` (or its shards and their index,
:mod:`nmt_specdec.model_shards`: joined on first use), ``dict.SRC.txt`` and
``dict.TGT.txt``, ``spm.model``, its card ``README.md`` and ``settings.json``:
the settings the quickstart decodes with, the sha256 of every shipped file and,
for a stock verifier shipped with its draft head beside it, ``draft_head`` (the
head file's name, for ``--draft-head``).

The default is the Transformer-base verifier with its head: the paper's setting,
where drafting pays. The tiny model is the test suite's, and a smaller choice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from nmt_specdec.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[1]
BASE = REPO_ROOT / "models" / "gettext-de-en-base"
TINY = REPO_ROOT / "models" / "gettext-de-en-tiny"
DEFAULT = BASE
# Short names the quickstart takes for --model (make quickstart MODEL=tiny).
NAMES = {"base": BASE, "tiny": TINY}


def model_directory(name_or_path: str | Path) -> Path:
    """A shipped model's short name (``base``, ``tiny``) or any directory, as a path."""
    return NAMES.get(str(name_or_path), Path(name_or_path))


@dataclass(frozen=True)
class ShippedModel:
    """A model directory and its ``settings.json``."""

    directory: Path
    settings: Dict

    @classmethod
    def at(cls, directory: str | Path = DEFAULT) -> "ShippedModel":
        """Reads ``directory/settings.json``.

        Raises:
            UserError: the directory holds no settings.json.
        """
        directory = model_directory(directory)
        path = directory / "settings.json"
        if not path.is_file():
            raise UserError(f"{path} is missing: not a shipped model directory (is models/ "
                            "in this checkout?)")
        return cls(directory, json.loads(path.read_text(encoding="utf-8")))

    @property
    def checkpoint(self) -> Path:
        """``model.pt`` (joined from its shards by the loaders where shipped so)."""
        return self.directory / "model.pt"

    @property
    def draft_head(self) -> Optional[Path]:
        """The head file shipped beside a stock verifier, else None."""
        name = self.settings.get("draft_head")
        return self.directory / name if name else None

    @property
    def spm_model(self) -> Path:
        return self.directory / "spm.model"


def spm_beside(checkpoint: str) -> str:
    """``spm.model`` in the checkpoint's directory (a shipped model has one).

    Raises:
        UserError: there is none: the SentencePiece model must be named.
    """
    beside = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), "spm.model")
    if not os.path.isfile(beside):
        raise UserError(f"--spm-model is needed: {checkpoint}'s directory has no spm.model")
    return beside
