"""Quickstart: decode a test set with a shipped model, or (``--train``) train one.

By default the quickstart decodes the first gettext test sentences with the
Transformer-base model shipped in ``models/gettext-de-en-base`` (``--model
tiny``: the small ``models/gettext-de-en-tiny``; a model shipped by
``scripts/ship_model.py --corpus ding`` decodes the Ding test split): fairseq's
greedy, CTranslate2's, this project's greedy and SpecDec rows as the model's
``settings.json`` plans them, timed at batch size 1; then a few example
translations, and ``results/quickstart/report.md`` (another model:
``results/quickstart-<its directory name>``) with ``bleu_vs_speedup.png``.
Nothing is trained and only the held-out data is downloaded
(:mod:`nmt_specdec.workflows.quickstart_pretrained`; its steps are stamped under
``{work}/quickstart_pretrained/.stamps`` and reused on a rerun).

With ``--train`` it trains a tiny joint model on the CPU instead (it will not
translate well), in three reusable steps
(:mod:`nmt_specdec.workflows.quickstart_train`):

1. ``data``: the Ding recipe (:mod:`nmt_specdec.data.ding_recipe`) into
   ``{work}/ding`` (its own steps are stamped, so a finished corpus is reused);
   with ``--corpus gettext`` the gettext recipe
   (:mod:`nmt_specdec.data.gettext_recipe`) into ``{work}/gettext`` instead;
2. ``train``: ``fairseq-train`` with the hyper-parameters of
   ``conf/cpu_tiny.yaml`` (gettext: ``conf/cpu_tiny_gettext.yaml``) and a
   wall-clock budget (``--train-minutes``); an interrupted run resumes, a
   finished one with the same settings is reused;
3. ``eval``: :func:`nmt_specdec.evaluation.pipeline.run` on the first
   sentences of the corpus's test split, batch size 1: stock greedy, stock
   beam 5, SpecDec beta=1 (exactly greedy) and a relaxed SpecDec row.

Each mode and corpus keeps its own model and report directories
(``{work}/quickstart_train`` and ``results/quickstart_train`` for Ding,
``..._gettext`` for gettext), so switching never discards another's results.

Progress bars and this project's progress lines are shown; the libraries' INFO
logs only with ``-v/--verbose``. ``report.md`` is rewritten on every run from
the stored results. Entry points: ``make quickstart``, ``scripts/quickstart.py``,
``nmt-specdec-quickstart``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from nmt_specdec import logs, shipped_models
from nmt_specdec.data.steps import (
    OneLineParser,
    RecipeError,
    run_command,
)
from nmt_specdec.workflows import quickstart_pretrained, quickstart_train
from nmt_specdec.workflows.quickstart_train import CORPORA

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class QuickstartConfig:
    """Settings of the quickstart (mirrors the command-line flags).

    Attributes:
        work: Working directory (data in ``work/<corpus>``; with ``--train`` the
            model in ``work/quickstart_train`` or ``work/quickstart_gettext``).
        out: Where ``report.md``, ``results.json`` and the plot go (None:
            ``results/quickstart``, or ``results/quickstart_gettext``).
        recipe: Hydra training recipe holding the hyper-parameters (None: the
            corpus's recipe in ``CORPORA``).
        train_minutes: Training wall-clock budget.
        threads: CPU threads for training and decoding.
        eval_sentences: Decode the first N test sentences (None: as the shipped
            model's settings.json plans, else 200).
        relaxed_beta: top-beta of the relaxed SpecDec row (None: as planned).
        relaxed_tau: log-probability margin of the relaxed SpecDec row (None:
            as planned).
        ding_file: Optional local Ding ``de-en`` file (else found/downloaded).
        repeats: Timed passes per decoder, the median reported (None: as planned).
        corpus: ``ding`` or ``gettext``.
        deb_dir: gettext only: read .deb/.mo files from here, not apt-get.
        train: train a model from scratch instead of using the shipped one.
        model: the shipped model decoded without ``--train``: a directory, or
            ``base`` / ``tiny``.
    """

    work: Path = REPO_ROOT / "work"
    out: Path | None = None
    recipe: Path | None = None
    train_minutes: float = 7.0
    threads: int = 2
    eval_sentences: int | None = None
    relaxed_beta: int | None = None
    relaxed_tau: float | None = None
    ding_file: Path | None = None
    repeats: int | None = None
    corpus: str = "ding"
    deb_dir: Path | None = None
    train: bool = False
    model: Path = shipped_models.DEFAULT

    def model_dir(self) -> Path:
        """The shipped model to decode with (a directory with settings.json)."""
        return shipped_models.model_directory(self.model)

    @property
    def suffix(self) -> str:
        """Directory-name suffix that keeps each corpus's (and mode's) runs apart."""
        if not self.train:
            return ""
        return "_train" if self.corpus == "ding" else f"_{self.corpus}"

    def report_dir(self) -> Path:
        """``out``, or the default report directory of the corpus (``--train``) or
        of the shipped model (the default model's: ``results/quickstart``)."""
        if self.out:
            return self.out
        if not self.train and self.model_dir().resolve() != shipped_models.DEFAULT.resolve():
            return REPO_ROOT / "results" / f"quickstart-{self.model_dir().resolve().name}"
        return REPO_ROOT / "results" / f"quickstart{self.suffix}"

    def training_recipe(self) -> Path:
        """``recipe``, or the corpus's default Hydra recipe."""
        return self.recipe or REPO_ROOT / "conf" / CORPORA[self.corpus][0]

    def validate(self) -> None:
        """Raise RecipeError naming the first impossible option."""
        if self.train_minutes <= 0:
            raise RecipeError("--train-minutes must be > 0")
        if self.threads < 1 or any(value is not None and value < 1 for value in
                                   (self.eval_sentences, self.repeats)):
            raise RecipeError("--threads, --eval-sentences and --repeats must be >= 1")
        if (self.relaxed_beta is not None and self.relaxed_beta < 1) or (
                self.relaxed_tau is not None and self.relaxed_tau < 0):
            raise RecipeError("--relaxed-beta must be >= 1 and --relaxed-tau >= 0")
        if self.corpus not in CORPORA:
            raise RecipeError(f"--corpus must be one of {', '.join(CORPORA)}")
        if self.train and self.ding_file is not None and self.corpus != "ding":
            raise RecipeError("--ding-file needs --corpus ding")
        if self.train and self.deb_dir is not None and self.corpus != "gettext":
            raise RecipeError("--deb-dir needs --corpus gettext")
        if not self.train:
            shipped_models.ShippedModel.at(self.model_dir())  # exists and readable
        if not self.training_recipe().is_file():
            raise RecipeError(f"--recipe {self.training_recipe()} does not exist")


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from QuickstartConfig)."""
    d = QuickstartConfig()
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=d.work, help="working directory")
    p.add_argument("--train", action="store_true",
                   help="train a tiny model from scratch (minutes of CPU: it will not "
                   "translate well) instead of decoding with the shipped model")
    p.add_argument("--model", type=Path, default=d.model,
                   help="shipped model to decode with: base (the default, "
                   "models/gettext-de-en-base), tiny (models/gettext-de-en-tiny) or a "
                   "model directory")
    p.add_argument("--corpus", choices=list(CORPORA), default=d.corpus,
                   help="training data: the Ding dictionary or Debian's gettext "
                   "catalogs (default %(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="report directory (default results/quickstart; with --train "
                   "results/quickstart_train, results/quickstart_gettext)")
    p.add_argument("--recipe", type=Path, default=None,
                   help="training recipe YAML (default conf/cpu_tiny.yaml, "
                   "conf/cpu_tiny_gettext.yaml for --corpus gettext)")
    p.add_argument("--train-minutes", type=float, default=d.train_minutes)
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--eval-sentences", type=int, default=d.eval_sentences,
                   help="decode the first N test sentences (default: as the model plans)")
    p.add_argument("--relaxed-beta", type=int, default=d.relaxed_beta,
                   help="top-beta of the relaxed row (default: as the model plans)")
    p.add_argument("--relaxed-tau", type=float, default=d.relaxed_tau,
                   help="margin of the relaxed row (default: as the model plans)")
    p.add_argument("--repeats", type=int, default=d.repeats,
                   help="timed passes per decoder (default: as the model plans)")
    p.add_argument("--ding-file", type=Path, default=None,
                   help="local Ding de-en file (default: installed or downloaded)")
    p.add_argument("--deb-dir", type=Path, default=None,
                   help="--corpus gettext: read .deb files / .mo directories from "
                   "here instead of running apt-get download")
    logs.add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run; user mistakes exit 2 with one line."""
    return run_command(build_parser(), lambda args: run(QuickstartConfig(**args)), argv)


def run(cfg: QuickstartConfig) -> dict:
    """Validate, then run the chosen mode; returns its results."""
    cfg.validate()
    if cfg.train:
        return quickstart_train.run(cfg)
    return quickstart_pretrained.run(cfg)


if __name__ == "__main__":  # python -m nmt_specdec.workflows.quickstart, as the console script
    sys.exit(main())
