"""The default quickstart: decode the Ding test split with the shipped model.

No CPU trains a translating model in minutes, so ``make quickstart`` uses the
model shipped in ``models/ding-de-en-tiny`` (its card says how it was made) and
only prepares what decoding needs: the Ding test split as plain text (the
recipe's ``raw`` step; no SentencePiece training, no binarization). Steps,
stamped under ``{work}/quickstart_pretrained/.stamps``:

1. ``data``: Ding ``raw/`` (parse and split the dictionary);
2. ``eval``: :func:`nmt_specdec.evaluation.pipeline.run` on the first test
   sentences at batch size 1: stock greedy, stock beam 5, the engine's greedy
   (K=0), SpecDec beta=1 (exactly greedy) and a relaxed SpecDec row;
3. a few example translations, then ``report.md`` and the plot.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, List

from nmt_specdec.data import ding_recipe
from nmt_specdec.data.steps import LOG, RecipeError, StepChain, atomic_text
from nmt_specdec.workflows.quickstart_report import evaluate, results_table

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO_ROOT / "models" / "ding-de-en-tiny"
# Written for this project (not taken from any corpus): everyday sentences
# whose translations should contain the listed words.
EXAMPLES = (
    ("Das Haus ist sehr groß.", ("house",)),
    ("Ich trinke gern Kaffee.", ("coffee",)),
    ("Der Hund schläft im Garten.", ("dog", "garden")),
    ("Wir fahren morgen mit dem Zug nach Berlin.", ("train", "Berlin")),
    ("Das Wetter ist heute schön.", ("weather",)),
)


def model_settings(model_dir: Path = MODEL_DIR) -> Dict:
    """The shipped model's decoding settings (``settings.json`` beside it)."""
    path = model_dir / "settings.json"
    if not path.is_file():
        raise RecipeError(f"{path} is missing: is models/ shipped with this checkout?")
    return json.loads(path.read_text(encoding="utf-8"))


def eval_config(cfg, model_dir: Path, raw_dir: Path):
    from nmt_specdec.evaluation.config import EvalConfig

    settings = model_settings(model_dir)
    return EvalConfig(
        checkpoint=str(model_dir / "model.pt"), out=str(cfg.report_dir()),
        data=str(model_dir), src_file=str(raw_dir / "test.de"),
        ref_file=str(raw_dir / "test.en"), spm_model=str(model_dir / "spm.model"),
        max_sentences=cfg.eval_sentences, beams=(1, 5),
        grid_k=(0, settings["k"]), grid_beta=(1, cfg.relaxed_beta),
        grid_tau=(cfg.relaxed_tau,), max_len_a=settings["max_len_a"],
        max_len_b=settings["max_len_b"], batch_sizes=(1,), repeats=cfg.repeats,
        warmup_batches=2, threads=1, cpu=True, progress=True,
        command="scripts/quickstart.py",
    )


def translate_examples(model_dir: Path = MODEL_DIR) -> List[Dict]:
    """The example sentences through ``nmt-specdec-translate``'s code path (SpecDec)."""
    from nmt_specdec.translate import TranslateConfig, load_translator, translate_lines

    settings = model_settings(model_dir)
    cfg = TranslateConfig(checkpoint=str(model_dir / "model.pt"),
                          spm_model=str(model_dir / "spm.model"), data=str(model_dir),
                          spec_decoding=True, spec_k=str(settings["k"]), cpu=True,
                          max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"])
    outputs = translate_lines([source for source, _ in EXAMPLES], load_translator(cfg),
                              batch_size=len(EXAMPLES))
    return [{"source": s, "translation": t, "expect": list(words)}
            for (s, words), t in zip(EXAMPLES, outputs)]


def run(cfg) -> Dict:
    """Data, evaluation, examples, report; returns the results (``results.json`` +)."""
    start = time.monotonic()
    data_dir, qs_dir = cfg.work / "ding", cfg.work / "quickstart_pretrained"
    chain = StepChain(qs_dir)
    status = ding_recipe.run(ding_recipe.DingConfig(out=data_dir, ding_file=cfg.ding_file),
                             raw_only=True)
    chain.status["data"] = "reused" if set(status.values()) == {"reused"} else "built"
    eval_cfg = eval_config(cfg, MODEL_DIR, data_dir / "raw")
    results_json = cfg.report_dir() / "results.json"
    params = {k: v for k, v in vars(eval_cfg).items()
              if k not in {"checkpoint", "out", "data", "src_file", "ref_file", "spm_model",
                           "progress", "command"}}
    params["model_sha256"] = model_settings()["sha256"]
    chain.run("eval", params, [results_json, cfg.report_dir() / "bleu_vs_speedup.png"],
              lambda: evaluate(eval_cfg))
    results = json.loads(results_json.read_text(encoding="utf-8"))
    results["examples"] = translate_examples()
    results["quickstart"] = {"mode": "pretrained", "model": str(MODEL_DIR.relative_to(REPO_ROOT)),
                             "steps": dict(chain.status), "threads": 1,
                             "wall_seconds": time.monotonic() - start}
    with atomic_text(cfg.report_dir() / "report.md") as handle:
        handle.write(render_report(results))
    LOG.info("quickstart finished in %.1f min; report: %s",
             results["quickstart"]["wall_seconds"] / 60, cfg.report_dir() / "report.md")
    return results


def render_report(results: Dict) -> str:
    """Markdown: the model, the decoding table, examples, signatures, the plot."""
    qs, test = results["quickstart"], results["test_set"]
    lines = [
        "# nmt-specdec quickstart: the shipped De-En model",
        "",
        f"Model: `{qs['model']}` (its `README.md` says how it was trained and on what): "
        "a small Transformer verifier (3+3 layers, d=256) trained 2 h on the Ding "
        "dictionary, plus a SpecDec draft head trained onto it by "
        "`nmt-specdec-add-draft-head`. It is a small model trained on a dictionary, "
        "not a strong system: expect word-level translations of short sentences.",
        "",
        f"## Decoding (batch size 1, 1 thread)",
        "",
        f"Test set: {test['description']}, first {test['sentences']} sentences. "
        "Speedups are ratios of median wall times "
        f"({results['timing']['repeats']} interleaved passes, same process, same "
        "checkpoint).",
        "",
        *results_table(results),
        f"- machine: {results['machine'].get('cpu')}",
        f"- steps this run: {', '.join(f'{k} {v}' for k, v in qs['steps'].items())}; "
        f"wall time {qs['wall_seconds'] / 60:.1f} min",
        "",
        "## Examples (SpecDec, beta=1)",
        "",
        "| German | English |",
        "|---|---|",
        *(f"| {e['source']} | {e['translation']} |" for e in results["examples"]),
        "",
        "![BLEU versus speedup](bleu_vs_speedup.png)",
        "",
    ]
    return "\n".join(lines)
