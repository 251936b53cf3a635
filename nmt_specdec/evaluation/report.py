"""Result rows, ``results.json`` and the ``results.md`` table."""

from __future__ import annotations

import json
import statistics
from typing import Dict, List, Optional

from nmt_specdec.evaluation.metrics import Scores
from nmt_specdec.evaluation.profiling import Profile
from nmt_specdec.evaluation.runner import Run
from nmt_specdec.stats import SpecDecStats

SCHEMA_VERSION = 1

# (header, row key, format) of the markdown table.
_COLUMNS = (
    ("batch", "batch_size", "{}"),
    ("decoder", "name", "{}"),
    ("BLEU", "bleu", "{:.2f}"),
    ("chrF", "chrf", "{:.2f}"),
    ("wall s (median)", "wall_s_median", "{:.3f}"),
    ("sent/s", "sentences_per_s", "{:.1f}"),
    ("tok/s", "target_tokens_per_s", "{:.0f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("vs k0", "speedup_vs_k0", "{:.2f}x"),
    ("tok/iter", "mean_accepted_tokens", "{:.2f}"),
    ("iter/sent", "iterations_per_sentence", "{:.2f}"),
    ("!= greedy", "differs_from_greedy", "{}"),
)

_LEGEND = (
    "speedup: against stock beam 1 (fairseq's SequenceGenerator) at the same batch size; "
    "vs k0: against the engine's own greedy decoding (--spec-k 0), which separates the "
    "lean loop's gain from drafting's. "
    "tok/s: output tokens (EOS included) per second. tok/iter: tokens committed per "
    "SpecDec iteration (accepted drafts + the verifier's own token). iter/sent: "
    "verifier calls per sentence. != greedy: sentences whose output differs from "
    "stock beam 1 at the same batch size."
)


def make_row(
    run: Run,
    baseline: Run,
    scores: Scores,
    differs_from_greedy: int,
    num_sentences: int,
    profile: Optional[Profile],
    engine_greedy: Optional[Run] = None,
) -> dict:
    """Every figure of one (configuration, batch size).

    Args:
        run: the measured run.
        baseline: stock beam 1 at the same batch size (speedup = its time / this time).
        scores: BLEU and chrF against the raw references.
        differs_from_greedy: sentences whose output differs from ``baseline``'s.
        num_sentences: sentences in the test set.
        profile: SpecDec time split (None unless profiled).
        engine_greedy: the engine's own greedy (K=0) at the same batch size, if run.
    """
    seconds = run.median_seconds
    stats = run.stats
    return {
        "name": run.spec.name,
        "decoder": run.spec.kind,
        "backend": run.spec.backend if run.spec.kind == "specdec" else None,
        "int8": run.spec.int8,
        "fused_draft": run.spec.fused_draft,
        "beam": run.spec.beam,
        "k": run.spec.k,
        "auto_k": run.spec.auto,
        "k_chosen": dict(stats.k_chosen) if stats else None,
        "beta": run.spec.beta,
        "tau": run.spec.tau,
        "batch_size": run.batch_size,
        "wall_s_median": seconds,
        "wall_s": list(run.seconds),
        "cpu_s_median": statistics.median(run.cpu_seconds),
        "sentences_per_s": num_sentences / seconds,
        "target_tokens": run.target_tokens,
        "target_tokens_per_s": run.target_tokens / seconds,
        "speedup": baseline.median_seconds / seconds,
        "speedup_vs_k0": (engine_greedy.median_seconds / seconds
                          if engine_greedy is not None else None),
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        # Committed tokens per iteration: accepted drafts plus the verifier's token.
        "mean_accepted_tokens": stats.mean_accepted_tokens if stats else None,
        "mean_accepted_drafts": _accepted_drafts(stats) if stats else None,
        "iterations_per_sentence": stats.iterations_per_sentence if stats else None,
        "slot_acceptance": stats.slot_acceptance() if stats else None,
        "differs_from_greedy": differs_from_greedy,
        "equals_greedy": differs_from_greedy == 0,
        "cuda_peak_mib": (
            run.cuda_peak_bytes / 2**20 if run.cuda_peak_bytes is not None else None
        ),
        "profile": profile.as_dict() if profile else None,
    }


def _accepted_drafts(stats: SpecDecStats) -> float:
    """Draft tokens accepted per iteration (0..K), without the verifier's own token."""
    return sum(stats.accepted_per_slot) / stats.iterations if stats.iterations else 0.0


def write_json(results: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")


def markdown_table(rows: List[dict]) -> str:
    """One line per (batch size, configuration); n/a where a figure does not apply."""
    lines = [
        "| " + " | ".join(header for header, _, _ in _COLUMNS) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(_COLUMNS))) + "|",
    ]
    for row in rows:
        cells = [
            fmt.format(row[key]) if row[key] is not None else "n/a"
            for _, key, fmt in _COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile_table(rows: List[dict]) -> str:
    """Share of SpecDec time per component, for the profiled rows."""
    profiled = [row for row in rows if row["profile"]]
    if not profiled:
        return ""
    parts = ("encoder", "draft", "verify", "bookkeeping")
    lines = [
        "| batch | decoder | total s | " + " | ".join(parts) + " |",
        "|---|---|---:|" + "---:|" * len(parts),
    ]
    for row in profiled:
        prof = row["profile"]
        shares = " | ".join(f"{100 * prof[f'{p}_share']:.1f}%" for p in parts)
        lines.append(
            f"| {row['batch_size']} | {row['name']} | {prof['total_s']:.3f} | "
            f"{shares} |"
        )
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
        "Speedup: median wall time of stock beam 1 at the same batch size / this "
        f"row's (interleaved timed passes: {results['timing']['repeats']}, after "
        f"warm-up batches: {results['timing']['warmup_batches']}). "
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
        _machine_line(machine),
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
    parts += ["", "## beta=1 outputs that differ from stock greedy", ""]
    parts += [f"- {t['decoder']} bs{t['batch_size']}: sentence {t['sentence']}, step {t['step']}: "
              f"logit gap {t['logit_gap']:.2e} between tokens {t['reference_token']} and "
              f"{t['other_token']}" for t in ties] or ["None."]
    profile = profile_table(results["rows"])
    if profile:
        parts += [
            "",
            "## SpecDec time split (one extra, instrumented pass)",
            "",
            profile,
        ]
    return "\n".join(parts) + "\n"


def _busy(results: dict) -> bool:
    """CPU decoding got clearly less than its threads' worth of CPU time."""
    machine = results["machine"]
    return (
        machine["device"] == "cpu"
        and results["timing"]["cpu_over_wall"] < 0.8 * machine["torch_threads"]
    )


def _machine_line(machine: Dict) -> str:
    device = machine["gpu"] or machine["cpu"]
    return (
        f"Machine: {device} ({machine['device']}), {machine['torch_threads']} torch "
        f"threads; torch {machine['torch']}, fairseq {machine['fairseq']}, "
        f"sacrebleu {machine['sacrebleu']}.  "
    )
