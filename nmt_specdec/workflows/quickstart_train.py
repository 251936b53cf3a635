"""``--train``: a tiny joint model trained from scratch on the CPU, then evaluated.

Three reusable steps, stamped under ``{work}/quickstart{suffix}/.stamps``:
``data`` (the corpus's recipe), ``train`` (``fairseq-train`` with the corpus's
Hydra recipe and a wall-clock budget; an interrupted run resumes) and ``eval``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from nmt_specdec.data import ding_recipe, gettext_recipe
from nmt_specdec.data.steps import LOG, StepChain, atomic_text
from nmt_specdec.workflows import train_recipe
from nmt_specdec.workflows.quickstart_report import evaluate, fmt, results_table, shown

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


def train_flags(cfg, data_bin: Path, save_dir: Path) -> list[str]:
    """``fairseq-train`` flags: the recipe file plus the quickstart's overrides."""
    from nmt_specdec.checkpoints import plugin_dir

    overrides = {
        **QUICK_OVERRIDES,
        "task.data": str(data_bin),
        "common.user_dir": plugin_dir(),
        "common.log_interval": 10,  # a progress line every ~10-20 s on 2 cores
        "checkpoint.save_dir": str(save_dir),
        "optimization.stop_time_hours": round(cfg.train_minutes / 60, 6),
    }
    recipe = train_recipe.apply_overrides(
        train_recipe.load_recipe(cfg.training_recipe()), overrides)
    return train_recipe.recipe_to_flags(recipe)



def eval_config(cfg, checkpoint: Path, data_dir: Path):
    """The evaluation settings: four rows at batch size 1 (200 sentences, 5
    repeats and beta=3 tau=2 where the flags leave them open)."""
    from nmt_specdec.evaluation.config import EvalConfig

    def flag(value, default):
        return default if value is None else value

    return EvalConfig(
        checkpoint=str(checkpoint), out=str(cfg.report_dir()),
        data=str(data_dir / "bin"), split="test",
        spm_model=str(data_dir / "spm.model"),
        max_sentences=flag(cfg.eval_sentences, 200),
        beams=(1, 5), grid_beta=(1, flag(cfg.relaxed_beta, 3)),
        grid_tau=(flag(cfg.relaxed_tau, 2.0),),
        # An under-trained model may babble: bound outputs by the source length.
        max_len_a=1.2, max_len_b=5,
        batch_sizes=(1,), repeats=flag(cfg.repeats, 5), warmup_batches=2,
        threads=cfg.threads, cpu=True, progress=True,
        command="scripts/quickstart.py",
    )



def _eval_params(eval_cfg) -> dict:
    """Stamp parameters of the eval step (paths and cosmetics left out)."""
    skip = {"checkpoint", "out", "data", "spm_model", "progress", "command"}
    return {k: v for k, v in vars(eval_cfg).items() if k not in skip}



def run(cfg) -> dict:
    """Run or reuse every step, then write ``report.md``.

    Returns:
        The evaluation results (as in ``results.json``) plus a ``quickstart``
        entry with training figures, step statuses and the wall time.
    """
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
             results["quickstart"]["wall_seconds"] / 60, shown(cfg.report_dir() / "report.md"))
    return results



def prepare_data(cfg, data_dir: Path) -> dict[str, str]:
    """Run the corpus's recipe with its default settings (so stamps stay valid)."""
    if cfg.corpus == "gettext":
        return gettext_recipe.run(gettext_recipe.GettextConfig(
            out=data_dir, deb_dir=cfg.deb_dir))
    return ding_recipe.run(ding_recipe.DingConfig(out=data_dir,
                                                  ding_file=cfg.ding_file))



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
        f"{fmt(train['valid_loss'], '.3f')} (base 2)",
        f"- hyper-parameters: `{Path(qs['recipe']).name}` with overrides "
        f"{', '.join(f'{k}={v}' for k, v in QUICK_OVERRIDES.items())}; command: "
        f"`fairseq-train {' '.join(flags)}`",
        "",
        "## Decoding (batch size 1)",
        "",
        f"Test set: {shown(test['description'])}, first {test['sentences']} sentences. "
        "vs stock greedy = stock greedy's time / the row's time (median of "
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
