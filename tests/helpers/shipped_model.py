"""The shipped model, as the real-model tests see it: the one place that names it.

When ``models/`` ships another model (e.g. a gettext one), change
:data:`MODEL_DIR` and :func:`split_lines` here; the tests take both from here.

Preparing the test data may need the network (the Ding recipe downloads the
Debian package ``trans-de-en`` on first use). Only a genuinely missing network
or apt (:class:`~nmt_specdec.data.steps.SourceUnavailable`) skips a test; any
other failure of the preparation is a bug and fails the test with a clear
message, so that a real-model test cannot quietly turn into a skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "models" / "ding-de-en-tiny"
SETTINGS = json.loads((MODEL_DIR / "settings.json").read_text(encoding="utf-8"))


def load_model():
    """``(model, task)``: the shipped checkpoint through the safe loader, eval mode."""
    import fairseq_plugins  # noqa: F401  (safe loader, task and model registration)
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(MODEL_DIR / "model.pt")], arg_overrides={"data": str(MODEL_DIR)})
    return models[0].eval(), task


def split_lines(out: Path, count: int) -> List[str]:
    """The first ``count`` source lines of the shipped model's test split.

    Skips only when the data source is unreachable (no network, no apt-get);
    fails, naming the error, for anything else.
    """
    from nmt_specdec.data import ding_recipe
    from nmt_specdec.data.steps import SourceUnavailable

    try:
        ding_recipe.run(ding_recipe.DingConfig(out=out), raw_only=True)
    except SourceUnavailable as exc:
        pytest.skip(f"Ding dictionary unreachable (network or apt-get unavailable): {exc}")
    except Exception as exc:  # a bug in the recipe, not a missing network
        pytest.fail(f"preparing the Ding test split failed ({type(exc).__name__}: {exc}); "
                    "this is not a network problem, so the real-model tests fail")
    lines = (out / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    if len(lines) < count:
        pytest.fail(f"the Ding test split has {len(lines)} lines, the tests need {count}")
    return lines[:count]


def encoded_split(out: Path, count: int, task) -> List[torch.Tensor]:
    """:func:`split_lines`, encoded with the model's SentencePiece model and dictionary."""
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(MODEL_DIR / "spm.model"))
    return [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                               add_if_not_exist=False)
            for line in split_lines(out, count)]
