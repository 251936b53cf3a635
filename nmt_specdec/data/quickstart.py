"""Quickstart: the shipped model on the Ding test set, or (``--train``) from scratch.

By default the quickstart decodes with the pretrained model shipped in
``models/ding-de-en-tiny`` (:mod:`nmt_specdec.data.pretrained_quickstart`).
With ``--train`` it trains a tiny joint model on the CPU instead, in three
reusable steps, stamped under ``{work}/quickstart/.stamps``:

1. ``data``: the Ding recipe (:mod:`nmt_specdec.data.ding_recipe`) into
   ``{work}/ding`` (its own steps are stamped, so a finished corpus is reused);
   with ``--corpus gettext`` the gettext recipe
   (:mod:`nmt_specdec.data.gettext_recipe`) into ``{work}/gettext`` instead;
2. ``train``: ``fairseq-train`` with the hyper-parameters of
   ``conf/cpu_tiny.yaml`` (gettext: ``conf/cpu_tiny_gettext.yaml``) and a
   wall-clock budget (``--stop-time-hours``); an interrupted run resumes, a
   finished one with the same settings is reused;
3. ``eval``: :func:`nmt_specdec.evaluation.pipeline.run` on the first
   sentences of the corpus's test split, batch size 1: stock greedy, stock
   beam 5, SpecDec beta=1 (exactly greedy) and a relaxed SpecDec row.

Each corpus has its own model and report directories (``{work}/quickstart``
and ``results/quickstart`` for Ding, ``..._gettext`` for gettext), so
switching corpus never discards the other one's checkpoints.

``report.md`` is rewritten on every run from the stored results. Entry points:
``scripts/quickstart.py``, ``make quickstart``, ``nmt-specdec-quickstart``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nmt_specdec.data import ding_recipe, gettext_recipe, train_recipe
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    StepChain,
    atomic_text,
    report_user_errors,
    setup_logging,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Deviations from the recipe file for a minutes-long CPU budget: at 4096 tokens
# per batch two cores manage only ~100-200 updates in 7 minutes, still inside
# the recipe's 400-update warm-up. Smaller batches give ~4x more updates.
QUICK_OVERRIDES = {"dataset.max_tokens": 1024, "lr_scheduler.warmup_updates": 200}
# Corpus -> (training recipe under conf/, description for the report).
CORPORA = {
    "ding": ("cpu_tiny.yaml", "the Ding De-En dictionary"),
    "gettext": ("cpu_tiny_gettext.yaml",
                "German-English gettext catalogs of Debian packages"),
}


@dataclass(frozen=True)
class QuickstartConfig:
    """Settings of the quickstart (mirrors the command-line flags).

    Attributes:
        work: Working directory (data in ``work/<corpus>``, model in
            ``work/quickstart``, or ``work/quickstart_gettext``).
        out: Where ``report.md``, ``results.json`` and the plot go (None:
            ``results/quickstart``, or ``results/quickstart_gettext``).
        recipe: Hydra training recipe holding the hyper-parameters (None: the
            corpus's recipe in ``CORPORA``).
        train_minutes: Training wall-clock budget.
        threads: CPU threads for training and decoding.
        eval_sentences: Decode the first N test sentences.
        relaxed_beta: top-beta of the relaxed SpecDec row.
        relaxed_tau: log-probability margin of the relaxed SpecDec row.
        ding_file: Optional local Ding ``de-en`` file (else found/downloaded).
        repeats: Timed passes per decoder (the median is reported).
        corpus: ``ding`` or ``gettext``.
        deb_dir: gettext only: read .deb/.mo files from here, not apt-get.
        train: train a model from scratch instead of using the shipped one.
    """

    work: Path = REPO_ROOT / "work"
    out: Path | None = None
    recipe: Path | None = None
    train_minutes: float = 7.0
    threads: int = 2
    eval_sentences: int = 200
    relaxed_beta: int = 3
    relaxed_tau: float = 2.0
    ding_file: Path | None = None
    repeats: int = 3
    corpus: str = "ding"
    deb_dir: Path | None = None
    train: bool = False

    @property
    def suffix(self) -> str:
        """Directory-name suffix that keeps each corpus's (and mode's) runs apart."""
        if not self.train:
            return ""
        return "_train" if self.corpus == "ding" else f"_{self.corpus}"

    def report_dir(self) -> Path:
        """``out``, or the corpus's default report directory."""
        return self.out or REPO_ROOT / "results" / f"quickstart{self.suffix}"

    def training_recipe(self) -> Path:
        """``recipe``, or the corpus's default Hydra recipe."""
        return self.recipe or REPO_ROOT / "conf" / CORPORA[self.corpus][0]

    def validate(self) -> None:
        """Raise RecipeError naming the first impossible option."""
        if self.train_minutes <= 0:
            raise RecipeError("--train-minutes must be > 0")
        if self.threads < 1 or self.eval_sentences < 1 or self.repeats < 1:
            raise RecipeError("--threads, --eval-sentences and --repeats must be >= 1")
        if self.relaxed_beta < 1 or self.relaxed_tau < 0:
            raise RecipeError("--relaxed-beta must be >= 1 and --relaxed-tau >= 0")
        if self.corpus not in CORPORA:
            raise RecipeError(f"--corpus must be one of {', '.join(CORPORA)}")
        if self.corpus != "ding" and not self.train:
            raise RecipeError("the shipped model is Ding's; --corpus gettext needs --train")
        if self.ding_file is not None and self.corpus != "ding":
            raise RecipeError("--ding-file needs --corpus ding")
        if self.deb_dir is not None and self.corpus != "gettext":
            raise RecipeError("--deb-dir needs --corpus gettext")
        if not self.training_recipe().is_file():
            raise RecipeError(f"--recipe {self.training_recipe()} does not exist")


def train_flags(cfg: QuickstartConfig, data_bin: Path, save_dir: Path) -> list[str]:
    """``fairseq-train`` flags: the recipe file plus the quickstart's overrides."""
    overrides = {
        **QUICK_OVERRIDES,
        "task.data": str(data_bin),
        "common.user_dir": str(REPO_ROOT / "fairseq_plugins"),
        "common.log_interval": 10,  # a progress line every ~10-20 s on 2 cores
        "checkpoint.save_dir": str(save_dir),
        "optimization.stop_time_hours": round(cfg.train_minutes / 60, 6),
    }
    recipe = train_recipe.apply_overrides(
        train_recipe.load_recipe(cfg.training_recipe()), overrides)
    return train_recipe.recipe_to_flags(recipe)


def eval_config(cfg: QuickstartConfig, checkpoint: Path, data_dir: Path):
    """The evaluation settings: four rows at batch size 1."""
    from nmt_specdec.evaluation.config import EvalConfig

    return EvalConfig(
        checkpoint=str(checkpoint), out=str(cfg.report_dir()),
        data=str(data_dir / "bin"), split="test",
        spm_model=str(data_dir / "spm.model"),
        max_sentences=cfg.eval_sentences,
        beams=(1, 5), grid_beta=(1, cfg.relaxed_beta), grid_tau=(cfg.relaxed_tau,),
        # An under-trained model may babble: bound outputs by the source length.
        max_len_a=1.2, max_len_b=5,
        batch_sizes=(1,), repeats=cfg.repeats, warmup_batches=2,
        threads=cfg.threads, cpu=True, progress=True,
        command="scripts/quickstart.py",
    )


def _eval_params(eval_cfg) -> dict:
    """Stamp parameters of the eval step (paths and cosmetics left out)."""
    skip = {"checkpoint", "out", "data", "spm_model", "progress", "command"}
    return {k: v for k, v in vars(eval_cfg).items() if k not in skip}


def run(cfg: QuickstartConfig) -> dict:
    """Run or reuse every step, then write ``report.md``.

    Returns:
        The evaluation results (as in ``results.json``) plus a ``quickstart``
        entry with training figures, step statuses and the wall time.
    """
    cfg.validate()
    if not cfg.train:
        from nmt_specdec.data import pretrained_quickstart

        return pretrained_quickstart.run(cfg)
    start = time.monotonic()
    data_dir, qs_dir = cfg.work / cfg.corpus, cfg.work / f"quickstart{cfg.suffix}"
    save_dir = qs_dir / "checkpoints"
    chain = StepChain(qs_dir)

    data_status = prepare_data(cfg, data_dir)
    data_stamp = (data_dir / ".stamps" / "binarize.json").read_text(encoding="utf-8")
    reused = set(data_status.values()) == {"reused"}
    chain.status["data"] = "reused" if reused else "built"

    flags = train_flags(cfg, data_dir / "bin", save_dir)
    chain.run("train", {"flags": flags, "data": json.loads(data_stamp)["digest"]},
              [save_dir / "checkpoint_last.pt", save_dir / train_recipe.INFO_FILE],
              lambda: train_recipe.train(flags, save_dir, qs_dir / "train.log",
                                         cfg.threads, REPO_ROOT))
    info = train_recipe.read_train_info(save_dir)

    eval_cfg = eval_config(cfg, Path(info.checkpoint), data_dir)
    results_json = cfg.report_dir() / "results.json"
    chain.run("eval", _eval_params(eval_cfg),
              [results_json, cfg.report_dir() / "bleu_vs_speedup.png"],
              lambda: evaluate(eval_cfg))
    results = json.loads(results_json.read_text(encoding="utf-8"))
    results["quickstart"] = {
        "train": asdict(info),
        "steps": dict(chain.status),
        "wall_seconds": time.monotonic() - start,
        "train_minutes": cfg.train_minutes,
        "recipe": str(cfg.training_recipe()),
        "threads": cfg.threads,
        "corpus": cfg.corpus,
    }
    with atomic_text(cfg.report_dir() / "report.md") as handle:
        handle.write(render_report(results, flags))
    LOG.info("quickstart finished in %.1f min; report: %s",
             results["quickstart"]["wall_seconds"] / 60, cfg.report_dir() / "report.md")
    return results


def prepare_data(cfg: QuickstartConfig, data_dir: Path) -> dict[str, str]:
    """Run the corpus's recipe with its default settings (so stamps stay valid)."""
    if cfg.corpus == "gettext":
        return gettext_recipe.run(gettext_recipe.GettextConfig(
            out=data_dir, deb_dir=cfg.deb_dir))
    return ding_recipe.run(ding_recipe.DingConfig(out=data_dir,
                                                  ding_file=cfg.ding_file))


def evaluate(eval_cfg) -> None:
    import fairseq_plugins  # noqa: F401  (registers the task/model, safe loading)
    from nmt_specdec.evaluation import pipeline

    pipeline.run(eval_cfg)


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def render_report(results: dict, flags: list[str]) -> str:
    """Markdown report: training facts, the results table, signatures, plot."""
    qs, train = results["quickstart"], results["quickstart"]["train"]
    test = results["test_set"]
    lines = [
        "# nmt-specdec quickstart",
        "",
        "A tiny joint SpecDec model (`specdec_transformer_tiny`: 3+3-layer d=256 "
        "verifier, 2-layer draft head, K=10) trained on "
        f"{CORPORA[qs.get('corpus', 'ding')][1]} "
        f"for a fixed budget of {qs['train_minutes']:g} min (CPU threads: "
        f"{qs['threads']}). It is far from converged: the numbers show the pipeline, "
        "not the quality or the speedups of a trained system (an under-trained "
        "draft head gets few tokens accepted, so SpecDec can be slower than "
        "greedy search here).",
        "",
        "## Training",
        "",
        f"- updates: {train['updates']}; fairseq training time "
        f"{train['train_seconds'] / 60:.1f} min; last valid loss "
        f"{_fmt(train['valid_loss'], '.3f')} (base 2)",
        f"- hyper-parameters: `{Path(qs['recipe']).name}` with overrides "
        f"{', '.join(f'{k}={v}' for k, v in QUICK_OVERRIDES.items())}; command: "
        f"`fairseq-train {' '.join(flags)}`",
        "",
        "## Decoding (batch size 1)",
        "",
        f"Test set: {test['description']}, first {test['sentences']} sentences. "
        "Speedup = stock beam 1 time / row time (median of "
        f"{results['timing']['repeats']} pass(es), same process and checkpoint).",
        "",
        *results_table(results),
        f"- machine: {results['machine'].get('cpu')}, torch threads "
        f"{results['machine'].get('torch_threads')}",
        f"- steps this run: {', '.join(f'{k} {v}' for k, v in qs['steps'].items())}; "
        f"wall time {qs['wall_seconds'] / 60:.1f} min",
        "",
        "![BLEU versus speedup](bleu_vs_speedup.png)",
        "",
    ]
    return "\n".join(lines)


def results_table(results: dict) -> list[str]:
    """The decoding rows as markdown lines, with a legend and the signatures."""
    lines = [
        "| decoder | BLEU | chrF | wall s | sent/s | speedup vs beam 1 | vs engine greedy "
        "| tokens/iteration | != greedy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['name']} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
            f"{row['wall_s_median']:.2f} | {row['sentences_per_s']:.1f} | "
            f"{row['speedup']:.2f}x | {_fmt(row.get('speedup_vs_k0'), '.2f')} | "
            f"{_fmt(row['mean_accepted_tokens'], '.2f')} | {row['differs_from_greedy']} |")
    return lines + [
        "",
        "tokens/iteration: tokens committed per verifier call (accepted drafts plus "
        "the verifier's own token); stock decoders commit 1 per step by definition. "
        "engine greedy: our lean decoding loop without drafting (`--spec-k 0`).",
        "",
        f"- BLEU signature: `{results['signatures']['bleu']}`",
        f"- chrF signature: `{results['signatures']['chrf']}`",
    ]


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from QuickstartConfig)."""
    d = QuickstartConfig()
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=d.work, help="working directory")
    p.add_argument("--train", action="store_true",
                   help="train a tiny model from scratch (minutes of CPU: it will not "
                   "translate well) instead of decoding with the shipped model")
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
    p.add_argument("--eval-sentences", type=int, default=d.eval_sentences)
    p.add_argument("--relaxed-beta", type=int, default=d.relaxed_beta)
    p.add_argument("--relaxed-tau", type=float, default=d.relaxed_tau)
    p.add_argument("--repeats", type=int, default=d.repeats)
    p.add_argument("--ding-file", type=Path, default=None,
                   help="local Ding de-en file (default: installed or downloaded)")
    p.add_argument("--deb-dir", type=Path, default=None,
                   help="--corpus gettext: read .deb files / .mo directories from "
                   "here instead of running apt-get download")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run; user mistakes exit 2 with one line."""
    args = vars(build_parser().parse_args(argv))
    # Claim the root logger before fairseq/matplotlib do (their DEBUG chatter).
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    setup_logging()
    return report_user_errors(lambda: run(QuickstartConfig(**args)))
