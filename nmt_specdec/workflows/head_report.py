"""After a draft head is trained: the shipped checkpoint and its acceptance figures.

``finish_checkpoint`` writes the checkpoint without optimizer state, refusing
to if any verifier weight differs from the stock model it was attached to.
``acceptance_report`` decodes a split with beta=1 at several K and reports
tokens per iteration, acceptance per slot and agreement with fairseq's greedy
search.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import torch

from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.decoding.stats import oracle_tokens_per_iteration
from nmt_specdec.errors import UserError
from nmt_specdec.shipping import save_compact


def finish_checkpoint(trained: Path, verifier: Path, out: Path) -> None:
    """Copies ``trained`` to ``out`` without optimizer state, after checking that
    every weight of the stock ``verifier`` checkpoint is bit-identical in it.

    Raises:
        UserError: a verifier weight changed (or is missing).
    """
    state = load_checkpoint(str(trained))
    stock = load_checkpoint(str(verifier))["model"]
    changed = [name for name, value in stock.items()
               if name not in state["model"] or not torch.equal(state["model"][name], value)]
    if changed:
        raise UserError(f"{trained}: verifier weights differ from {verifier} "
                        f"({len(changed)} tensors, e.g. {changed[0]})")
    # The same decoding-only form as a shipped model, at full precision.
    save_compact(state, out, dtype=torch.float32)


def _batches(dataset, count: int, size: int):
    for start in range(0, count, size):
        yield dataset.collater([dataset[i] for i in range(start, min(start + size, count))])


def _decode_all(generator, model, dataset, count: int, batch_size: int) -> List[List[int]]:
    """Output tokens of the first ``count`` sentences, in dataset order."""
    outputs = []
    for batch in _batches(dataset, count, batch_size):
        hyps = generator.generate([model], batch)
        outputs += zip(batch["id"].tolist(), (h[0]["tokens"].tolist() for h in hyps))
    return [tokens for _, tokens in sorted(outputs)]


def acceptance_report(checkpoint: Path, data: Path, split: str, ks: List[int],
                      sentences: int, threads: int, batch_size: int = 32) -> Dict:
    """Decodes the first ``sentences`` of ``split`` with beta=1 for each K in ``ks``.

    The reference is fairseq's own greedy search (``SequenceGenerator``, beam 1,
    same length rules and batches), not the engine's K=0: agreement with it is
    what beta=1 promises.

    Returns:
        ``{"split", "sentences", "reference", "rows": [{"k", "tokens_per_iteration",
        "slot_acceptance", "same_as_greedy", "oracle_tokens_per_iteration"}]}``;
        K=0 is the engine's greedy; the oracle figure is the ceiling at that K on
        the same sentences (a drafter that always proposes greedy's output).
    """
    from fairseq import checkpoint_utils
    from fairseq.sequence_generator import SequenceGenerator

    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)
    from nmt_specdec.decoding.loop import SpecDecGenerator
    from nmt_specdec.decoding.options import LengthRules, SpecDecOptions

    torch.set_num_threads(threads)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)})
    model = models[0].eval()
    task.load_dataset(split)
    dataset = task.dataset(split)
    count = min(sentences, len(dataset))
    rules = LengthRules(max_len_a=1.2, max_len_b=10, max_positions=model.max_decoder_positions())
    stock = SequenceGenerator([model], task.target_dictionary, beam_size=1,
                              max_len_a=rules.max_len_a, max_len_b=rules.max_len_b)
    greedy = _decode_all(stock, model, dataset, count, batch_size)
    rows = []
    for k in [0] + [k for k in ks if k > 0]:
        generator = SpecDecGenerator(model, task.target_dictionary, SpecDecOptions(k=k), rules)
        tokens = _decode_all(generator, model, dataset, count, batch_size)
        stats = generator.stats
        lengths = [len(t) for t in greedy]  # fairseq's tokens end with EOS
        rows.append({"k": k, "tokens_per_iteration": round(stats.mean_accepted_tokens, 3),
                     "oracle_tokens_per_iteration":
                         round(oracle_tokens_per_iteration(lengths, k), 3),
                     "slot_acceptance": [round(a, 3) for a in stats.slot_acceptance()],
                     "same_as_greedy": sum(a == b for a, b in zip(tokens, greedy))})
    return {"split": split, "sentences": count,
            "reference": "fairseq SequenceGenerator, beam 1", "rows": rows}


def format_report(report: Dict) -> str:
    """A markdown table of :func:`acceptance_report`'s rows."""
    lines = [f"{report['split']}: {report['sentences']} sentences, beta=1; "
             f"= greedy: same output as {report.get('reference', 'greedy')}",
             "| K | tokens/iteration | oracle at K | = greedy | acceptance per slot |",
             "|---:|---:|---:|---:|---|"]
    for row in report["rows"]:
        slots = " ".join(f"{a:.2f}" for a in row["slot_acceptance"])
        lines.append(f"| {row['k']} | {row['tokens_per_iteration']:.2f} | "
                     f"{row.get('oracle_tokens_per_iteration', float('nan')):.2f} | "
                     f"{row['same_as_greedy']} | {slots} |")
    return "\n".join(lines)
