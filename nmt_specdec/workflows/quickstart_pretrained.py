"""The default quickstart: decode a test split with a shipped model.

No CPU trains a translating model in minutes, so ``make quickstart`` uses a
model shipped under ``models/`` (default the Transformer-base
``gettext-de-en-base``; each card says how its model was made) and only
prepares what decoding needs: the test split of the model's corpus as plain
text, no SentencePiece training, no binarization. For a gettext model that
means downloading only the held-out packages named in its ``settings.json``
(valid and test: the test split is deduplicated against valid, so both are
needed to rebuild it line for line). Steps, stamped under
``{work}/quickstart_pretrained/.stamps``:

1. ``data``: the corpus recipe up to its ``raw`` split;
2. ``eval``: :func:`nmt_specdec.evaluation.pipeline.run` on the first test
   sentences at batch size 1, with the rows the model's ``settings.json``
   plans (its ``quickstart`` entry): stock greedy (and beams), CTranslate2,
   the engine's greedy (K=0), SpecDec beta=1 (exactly greedy) at the model's K
   and ``auto``, fp32 and int8 where planned, with the verifier's 4-bit copy
   drafting too where planned (beside the int8 verifier at a fixed K only), and
   a relaxed SpecDec row;
3. a few example translations, then ``report.md`` (its first sentence: what
   drafting gained or lost against the engine's greedy, per precision) and
   the plot.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, List

from nmt_specdec.data import ding_recipe, gettext_recipe
from nmt_specdec.data.steps import LOG, StepChain, atomic_text
from nmt_specdec.shipped_models import DEFAULT as MODEL_DIR, ShippedModel
from nmt_specdec.workflows.quickstart_report import (
    drafting_summary,
    evaluate,
    results_table,
    shown,
)
# Written for this project (not taken from any corpus): sentences whose
# translations should contain the listed words (case-insensitive).
EXAMPLES = {
    "gettext": (
        ("Die Datei konnte nicht geöffnet werden.", ("file", "open")),
        ("Möchten Sie die Änderungen speichern?", ("save", "changes")),
        ("Verbindung zum Server fehlgeschlagen", ("server",)),
        ("Neues Fenster öffnen", ("new", "window")),
        ("Das Bild wird gedruckt.", ("image",)),
        # Everyday sentences: the model has seen almost none (see its card).
        ("Das Wetter ist heute schön.", ()),
        ("Ich trinke gern Kaffee.", ()),
    ),
    "ding": (
        ("Das Haus ist sehr groß.", ("house",)),
        ("Ich trinke gern Kaffee.", ("coffee",)),
        ("Der Hund schläft im Garten.", ("dog", "garden")),
        ("Wir fahren morgen mit dem Zug nach Berlin.", ("train", "Berlin")),
        ("Das Wetter ist heute schön.", ("weather",)),
    ),
}


def examples_for(model_dir: Path = MODEL_DIR):
    """The example sentences written for the model's corpus."""
    return EXAMPLES[ShippedModel.at(model_dir).settings.get("corpus", "ding")]


def prepare_test_split(cfg, model_dir: Path) -> tuple[Path, Dict[str, str]]:
    """The raw test split of the model's corpus; returns (raw dir, step status)."""
    settings = ShippedModel.at(model_dir).settings
    if settings.get("corpus") == "gettext":
        heldout = settings["gettext_heldout"]
        out = cfg.work / "gettext-heldout"
        status = gettext_recipe.run(gettext_recipe.GettextConfig(
            out=out, deb_dir=cfg.deb_dir,
            packages=None if cfg.deb_dir else heldout["valid"] + heldout["test"],
            heldout=heldout), raw_only=True)
    else:
        out = cfg.work / "ding"
        status = ding_recipe.run(ding_recipe.DingConfig(out=out, ding_file=cfg.ding_file),
                                 raw_only=True)
    return out / "raw", status


def eval_config(cfg, model_dir: Path, raw_dir: Path):
    """The evaluation the model's ``settings.json`` plans (its ``quickstart``
    entry), each planned value overridden by the flag of the same name."""
    from nmt_specdec.evaluation.config import EvalConfig

    model = ShippedModel.at(model_dir)
    settings, plan = model.settings, model.settings.get("quickstart", {})

    def chosen(flag: str, default):
        value = getattr(cfg, flag)
        return plan.get(flag, default) if value is None else value

    return EvalConfig(
        checkpoint=str(model.checkpoint), out=str(cfg.report_dir()), data=str(model_dir),
        draft_head=str(model.draft_head) if model.draft_head else None,
        src_file=str(raw_dir / "test.de"), ref_file=str(raw_dir / "test.en"),
        spm_model=str(model.spm_model), max_sentences=chosen("eval_sentences", 200),
        beams=tuple(plan.get("beams", (1, 5))), grid_k=(0, settings["k"]),
        grid_auto=plan.get("auto", False), grid_beta=(1, chosen("relaxed_beta", 3)),
        grid_candidates=tuple(sorted({1, settings.get("candidates", 1)})),
        grid_tau=(chosen("relaxed_tau", 2.0),), relaxed_rows=plan.get("relaxed_rows", "all"),
        int8=plan.get("int8", False), drafters=tuple(plan.get("drafters", ("head",))),
        grid_copy_k=tuple(plan.get("copy_k", ())),
        max_len_a=settings["max_len_a"],
        max_len_b=settings["max_len_b"], batch_sizes=(1,), repeats=chosen("repeats", 5),
        warmup_batches=2, threads=1, cpu=True, progress=True, ct2=True,
        command="scripts/quickstart.py",
    )


def translate_examples(model_dir: Path = MODEL_DIR) -> List[Dict]:
    """The example sentences through ``nmt-specdec-translate``'s code path (SpecDec)."""
    from nmt_specdec import checkpoints
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.translate import TranslateConfig, load_translator, translate_lines

    # The task and model come with the plugin; the evaluation step registers it
    # too, but a reused evaluation (outputs up to date) does not run.
    checkpoints.register_plugin()
    model = ShippedModel.at(model_dir)
    settings = model.settings
    head = str(model.draft_head) if model.draft_head else None
    cfg = TranslateConfig(checkpoint=str(model.checkpoint), spm_model=str(model.spm_model),
                          data=str(model_dir), cpu=True,
                          decoding=DecodingOptions(spec_decoding=True, k=settings["k"],
                                                   draft_head=head),
                          max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"])
    examples = examples_for(model_dir)
    outputs = translate_lines([source for source, _ in examples], load_translator(cfg),
                              batch_size=len(examples))
    return [{"source": s, "translation": t, "expect": list(words)}
            for (s, words), t in zip(examples, outputs)]


def run(cfg) -> Dict:
    """Data, evaluation, examples, report; returns the results (``results.json`` +)."""
    start = time.monotonic()
    model_dir = cfg.model_dir()
    chain = StepChain(cfg.work / "quickstart_pretrained")
    raw_dir, status = prepare_test_split(cfg, model_dir)
    chain.status["data"] = "reused" if set(status.values()) == {"reused"} else "built"
    eval_cfg = eval_config(cfg, model_dir, raw_dir)
    results_json = cfg.report_dir() / "results.json"
    params = {k: v for k, v in vars(eval_cfg).items()
              if k not in {"checkpoint", "out", "data", "src_file", "ref_file", "spm_model",
                           "progress", "command"}}
    settings = ShippedModel.at(model_dir).settings
    params["model_sha256"] = settings["sha256"]
    chain.run("eval", params, [results_json, cfg.report_dir() / "bleu_vs_speedup.png"],
              lambda: evaluate(eval_cfg))
    results = json.loads(results_json.read_text(encoding="utf-8"))
    results["examples"] = translate_examples(model_dir)
    results["quickstart"] = {"mode": "pretrained", "model": shown(model_dir.resolve()),
                             "card_summary": settings.get("summary", ""),
                             "steps": dict(chain.status), "threads": 1,
                             "wall_seconds": time.monotonic() - start}
    with atomic_text(cfg.report_dir() / "report.md") as handle:
        handle.write(render_report(results))
    LOG.info("quickstart finished in %.1f min; report: %s",
             results["quickstart"]["wall_seconds"] / 60, shown(cfg.report_dir() / "report.md"))
    return results


def render_report(results: Dict) -> str:
    """Markdown: the model, the decoding table, examples, signatures, the plot."""
    qs, test = results["quickstart"], results["test_set"]
    lines = [
        "# nmt-specdec quickstart: the shipped De-En model",
        "",
        drafting_summary(results),
        "",
        f"Model: `{qs['model']}` (its `README.md` says how it was trained and on what). "
        + qs.get("card_summary", ""),
        "",
        f"## Decoding (batch size 1, 1 thread)",
        "",
        f"Test set: {shown(test['description'])}, first {test['sentences']} sentences. "
        "Speedups are medians over "
        f"{results['timing']['repeats']} repeats of the per-repeat time ratios (each repeat "
        "runs every decoder once, in a fresh random order; same process, same checkpoint).",
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
