"""Result rows, ``results.json`` and the ``results.md`` table."""

from __future__ import annotations

import json
import statistics
from typing import Dict, List, Optional

from nmt_specdec.decoding.stats import SpecDecStats
from nmt_specdec.evaluation.metrics import Scores
from nmt_specdec.evaluation.profiling import Profile
from nmt_specdec.evaluation.runner import Run
from nmt_specdec.evaluation.time_split import time_split_table

# 2: rows named by what they do, speedups as medians of paired per-repeat ratios
# with min-max, a random pass order per repeat (timing.orders).
SCHEMA_VERSION = 2

# (header, row key, format, spread prefix) of the markdown table: with a prefix,
# the cell also shows the min-max over repeats (``{prefix}_min``/``{prefix}_max``).
_COLUMNS = (
    ("batch", "batch_size", "{}", None),
    ("decoder", "name", "{}", None),
    ("BLEU", "bleu", "{:.2f}", None),
    ("chrF", "chrf", "{:.2f}", None),
    ("wall s (median, min–max)", "wall_s_median", "{:.3f}", "wall_s"),
    ("sent/s", "sentences_per_s", "{:.1f}", None),
    ("tok/s", "target_tokens_per_s", "{:.0f}", None),
    ("vs stock greedy", "speedup", "{:.2f}x", "speedup"),
    ("vs engine greedy", "speedup_vs_k0", "{:.2f}x", "speedup_vs_k0"),
    ("tok/iter", "mean_accepted_tokens", "{:.2f}", None),
    ("iter/sent", "iterations_per_sentence", "{:.2f}", None),
    ("!= greedy", "differs_from_greedy", "{}", None),
)

_LEGEND = (
    "vs stock greedy: speedup against fairseq's SequenceGenerator with beam 1 at the "
    "same batch size; vs engine greedy: against the SpecDec loop with K=0 (no "
    "drafting), which separates the lean loop's gain from drafting's. Both are the "
    "median over repeats of the ratio of the two rows' times in the same repeat, "
    "with the min-max over repeats in brackets. "
    "tok/s: output tokens (EOS included) per second. tok/iter: tokens committed per "
    "SpecDec iteration (accepted drafts + the verifier's own token); a SpecDec row "
    "at 1.00 drafted nothing that was accepted and is labelled so. iter/sent: "
    "verifier calls per sentence. != greedy: sentences whose output differs from "
    "stock greedy at the same batch size. Sampling rows (--sampling-topk) compare with "
    "stock sampling and with the engine's sampling (K=0) instead; their outputs are "
    "samples, so != greedy does not apply."
)

DRAFTED_NOTHING = "drafted nothing"


def paired_ratios(reference: List[float], seconds: List[float]) -> List[float]:
    """Per-repeat speedups: the reference's time over this row's, same repeat.

    Both rows ran once per repeat (in that repeat's random order), so a slow
    stretch of the machine lands on a pair rather than on one side of a ratio
    of medians.
    """
    return [r / s for r, s in zip(reference, seconds)]


def spread(values: List[float]) -> dict:
    """``{"median", "min", "max"}`` of per-repeat values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def row_name(run: Run, stats: Optional[SpecDecStats]) -> str:
    """The spec's name, plus "drafted nothing" for a drafting row at 1.00 tok/iter."""
    name = run.spec.name
    if run.spec.kind == "specdec" and run.spec.k and stats \
            and round(stats.mean_accepted_tokens, 2) <= 1.0:
        name += f" ({DRAFTED_NOTHING})"
    return name


def make_row(
    run: Run,
    baseline: Run,
    scores: Scores,
    differs_from_greedy: Optional[int],
    num_sentences: int,
    profile: Optional[Profile],
    engine_greedy: Optional[Run] = None,
) -> dict:
    """Every figure of one (configuration, batch size).

    Args:
        run: the measured run.
        baseline: stock greedy at the same batch size (a sampling row: stock sampling).
        scores: BLEU and chrF against the raw references.
        differs_from_greedy: sentences whose output differs from ``baseline``'s
            (None: a sampling row, whose output is a sample).
        num_sentences: sentences in the test set.
        profile: SpecDec time split (None unless profiled).
        engine_greedy: the engine's own greedy (K=0) at the same batch size, if run
            (a sampling row: the engine's sampling).
    """
    seconds = run.median_seconds
    stats = run.stats
    return {
        **_config_fields(run, stats),
        "batch_size": run.batch_size,
        **_timing_fields(run, baseline, engine_greedy),
        "sentences_per_s": num_sentences / seconds,
        "target_tokens": run.target_tokens,
        "target_tokens_per_s": run.target_tokens / seconds,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        # Committed tokens per iteration: accepted drafts plus the verifier's token.
        "mean_accepted_tokens": stats.mean_accepted_tokens if stats else None,
        "mean_accepted_drafts": _accepted_drafts(stats) if stats else None,
        "iterations_per_sentence": stats.iterations_per_sentence if stats else None,
        "slot_acceptance": stats.slot_acceptance() if stats else None,
        "differs_from_greedy": differs_from_greedy,
        "equals_greedy": None if differs_from_greedy is None else differs_from_greedy == 0,
        "cuda_peak_mib": (
            run.cuda_peak_bytes / 2**20 if run.cuda_peak_bytes is not None else None
        ),
        "profile": profile.as_dict() if profile else None,
    }


def _config_fields(run: Run, stats: Optional[SpecDecStats]) -> dict:
    """What the row decoded with (None where a field is not the decoder's)."""
    spec = run.spec
    specdec = spec.kind == "specdec"
    return {
        "name": row_name(run, stats),
        "role": spec.role,
        "decoder": spec.kind,
        "backend": spec.backend if specdec else None,
        "int8": spec.int8,
        "fused_draft": spec.fused_draft,
        "drafter": spec.drafter,
        "dtype": spec.dtype,
        "beam": spec.beam,
        "k": spec.k,
        "auto_k": spec.auto,
        "k_chosen": dict(stats.k_chosen) if stats else None,
        "beta": spec.beta,
        "tau": spec.tau,
        "candidates": spec.candidates,
        "refine_steps": spec.decoding.refine_steps if specdec else None,
        "cuda_graphs": spec.decoding.cuda_graphs if specdec else None,
        # CUDA graph capture, over the whole run (warm-up included), not in wall_s.
        "capture_s": getattr(run.generator, "capture_seconds", None),
    }

def _timing_fields(run: Run, baseline: Run, engine_greedy: Optional[Run]) -> dict:
    """Wall times and speedups: median and min-max over repeats."""
    fields = {
        "wall_s_median": run.median_seconds,
        "wall_s_min": min(run.seconds),
        "wall_s_max": max(run.seconds),
        "wall_s": list(run.seconds),
        "cpu_s_median": statistics.median(run.cpu_seconds),
    }
    for key, reference in (("speedup", baseline), ("speedup_vs_k0", engine_greedy)):
        ratios = (spread(paired_ratios(reference.seconds, run.seconds))
                  if reference is not None else {})
        fields[key] = ratios.get("median")
        fields[f"{key}_min"] = ratios.get("min")
        fields[f"{key}_max"] = ratios.get("max")
    return fields


def _accepted_drafts(stats: SpecDecStats) -> float:
    """Draft tokens accepted per iteration (0..K), without the verifier's own token;
    drafts after a committed EOS do not count."""
    return sum(stats.accepted_per_slot) / stats.iterations if stats.iterations else 0.0


def format_cell(row: dict, key: str, fmt: str, spread_prefix: Optional[str]) -> str:
    """One table cell: n/a where the figure does not apply, else the value and,
    for timed figures, `` (min–max)`` over repeats."""
    if row.get(key) is None:
        return "n/a"
    cell = fmt.format(row[key])
    low, high = (row.get(f"{spread_prefix}_{end}") for end in ("min", "max")) \
        if spread_prefix is not None else (None, None)
    if low is not None and high is not None:  # results.json of schema 1 has no spread
        cell += f" ({fmt.format(low)}–{fmt.format(high)})"
    return cell


def write_json(results: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


_CUDA_COLUMN = ("CUDA peak MiB", "cuda_peak_mib", "{:.0f}", None)


def markdown_table(rows: List[dict]) -> str:
    """One line per (batch size, configuration); n/a where a figure does not apply.
    A run on CUDA adds each row's peak allocation."""
    columns = _COLUMNS + ((_CUDA_COLUMN,) if any(r.get("cuda_peak_mib") for r in rows)
                          else ())
    lines = [
        "| " + " | ".join(column[0] for column in columns) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(columns))) + "|",
    ]
    for row in rows:
        cells = [format_cell(row, *column[1:]) for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_report(results: dict) -> str:
    """The whole ``results.md``: table, signatures, machine, model and memory."""
    machine, model, memory = results["machine"], results["model"], results["memory"]
    parts = [
        "# BLEU versus speedup",
        "",
        f"Test set: {results['test_set']['description']} "
        f"({results['test_set']['sentences']} sentences). "
        f"Checkpoint: `{model['checkpoint']}`.",
        f"Timing: {timing_line(results['timing'])} "
        f"CPU/wall time of the timed passes: {results['timing']['cpu_over_wall']:.2f}"
        + (
            " (busy machine: other processes competed for the cores; speedups are "
            "noisy)."
            if _busy(results)
            else "."
        ),
        "",
        markdown_table(results["rows"]),
        "",
        _LEGEND,
        "",
        f"BLEU: `{results['signatures']['bleu']}`  ",
        f"chrF: `{results['signatures']['chrf']}`",
        "",
        machine_line(machine),
        f"Parameters: verifier {model['parameters']['verifier']:,}, draft head "
        f"{model['parameters']['draft_head']:,}. "
        f"Peak RSS {memory['peak_rss_mib']:.0f} MiB"
        + (
            f", CUDA peak {memory['cuda_peak_mib']:.0f} MiB."
            if memory["cuda_peak_mib"]
            else "."
        ),
    ]
    ties = results.get("greedy_mismatches") or []
    parts += ["", "## beta=1 outputs that differ from their greedy reference", "",
              "fp32 rows: stock greedy; int8 rows: the int8 verifier's own greedy (the int8 "
              "engine greedy row), since quantization changes the model; fp16/bf16 rows: "
              "the engine greedy of the same precision, whose rounding depends on the pass "
              "shape (gaps read at that precision).", ""]
    parts += [_mismatch_line(t) for t in ties] or ["None."]
    profile = time_split_table(results["rows"])
    if profile:
        parts += [
            "",
            "## Where a token's time goes (profiled rows: one extra, instrumented pass)",
            "",
            profile,
        ]
    return "\n".join(parts) + "\n"


def _mismatch_line(t: dict) -> str:
    if "int8_reference" in t:
        why = ("a draft tree scores its leaves after the chain, not at their slots"
               if t.get("tree") else "NOT expected: a chain scores each position as greedy does")
        return (f"- {t['decoder']} bs{t['batch_size']}: {t['differs']} sentence(s) differ "
                f"from {t['int8_reference']} ({why})")
    return (f"- {t['decoder']} bs{t['batch_size']}: sentence {t['sentence']}, step {t['step']}: "
            f"logit gap {t['logit_gap']:.2e} between tokens {t['reference_token']} "
            f"({t.get('reference', 'stock greedy')}) and {t['other_token']}"
            + ("" if t["near_tie"] else
               " — NOT a near-tie for its precision: a bug, not rounding"))


def timing_line(timing: dict) -> str:
    """How the passes were scheduled, in one sentence (for results.md and the README)."""
    order = ("each repeat ran every (decoder, batch size) pass once, in a fresh "
             f"random order (Python random.Random({timing.get('order_seed')}); the "
             "orders are in results.json)"
             if timing.get("order") == "random" else "order not recorded")
    return (f"{timing['repeats']} timed passes per row after "
            f"{timing['warmup_batches']} untimed warm-up batch(es) per row; {order}; "
            "`--spec-k auto` rows "
            f"{timing.get('auto_k_state', 'kept their policy state between passes')}.")


def _busy(results: dict) -> bool:
    """CPU decoding got clearly less than its threads' worth of CPU time."""
    machine = results["machine"]
    return (
        machine["device"] == "cpu"
        and results["timing"]["cpu_over_wall"] < 0.8 * machine["torch_threads"]
    )


def machine_line(machine: Dict) -> str:
    """The processor (its instruction sets), threads and runtime versions, in one
    line: ratios between runtimes move with all of them."""
    device = machine["gpu"] or machine["cpu"]
    isa = f" [{machine['cpu_isa']}]" if machine.get("cpu_isa") and not machine["gpu"] else ""
    runtimes = "".join(f", {label} {machine[key]}" for key, label in
                       (("onnxruntime", "ONNX Runtime"), ("ctranslate2", "CTranslate2"))
                       if machine.get(key))
    return (
        f"Machine: {device}{isa} ({machine['device']}), {machine['torch_threads']} torch "
        f"threads; torch {machine['torch']}{runtimes}, fairseq {machine['fairseq']}, "
        f"sacrebleu {machine['sacrebleu']}.  "
    )
