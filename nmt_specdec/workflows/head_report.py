"""After a draft head is trained: the shipped checkpoint and its acceptance figures.

``finish_checkpoint`` writes the checkpoint without optimizer state, refusing
to if any verifier weight differs from the stock model it was attached to;
``write_head_beside`` writes its head alone, for ``--draft-head``.
``acceptance_report`` decodes a split with beta=1 at several K and reports
tokens per iteration, acceptance per slot and agreement with fairseq's greedy
search.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

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


def write_head_beside(checkpoint: Path, data: Path) -> Path:
    """Writes the draft head of the joint ``checkpoint`` as ``head.pt`` beside it:
    the file ``--draft-head`` attaches to the stock verifier."""
    from nmt_specdec import checkpoints
    from nmt_specdec.model.head_file import write_head_file

    checkpoints.register_plugin()
    model, _ = checkpoints.load(str(checkpoint), {"data": str(data)})
    return write_head_file(model, checkpoint.with_name("head.pt"))


def _batches(dataset, count: int, size: int):
    for start in range(0, count, size):
        yield dataset.collater([dataset[i] for i in range(start, min(start + size, count))])


def decode_in_order(generator, model, dataset, count: int, batch_size: int) -> List[List[int]]:
    """Output tokens of the first ``count`` sentences, in dataset order."""
    outputs = []
    for batch in _batches(dataset, count, batch_size):
        hyps = generator.generate([model], batch)
        outputs += zip(batch["id"].tolist(), (h[0]["tokens"].tolist() for h in hyps))
    return [tokens for _, tokens in sorted(outputs)]


def acceptance_report(checkpoint: Path, data: Path, split: str, ks: List[int],
                      sentences: int, threads: int, batch_size: int = 32,
                      refine_steps: Optional[int] = None,
                      draft_head: Optional[Path] = None) -> Dict:
    """Decodes the first ``sentences`` of ``split`` with beta=1 for each K in ``ks``.

    The reference is fairseq's own greedy search (``SequenceGenerator``, beam 1,
    same length rules and batches), not the engine's K=0: agreement with it is
    what beta=1 promises. ``refine_steps`` overrides the checkpoint's number of
    refinement runs (a head without refinement layers ignores it). ``draft_head``:
    a head file attached to ``checkpoint``, a stock verifier.

    Returns:
        ``{"split", "sentences", "reference", "rows": [{"k", "tokens_per_iteration",
        "slot_acceptance", "same_as_greedy", "oracle_tokens_per_iteration"}]}``;
        K=0 is the engine's greedy; the oracle figure is the ceiling at that K on
        the same sentences (a drafter that always proposes greedy's output).
    """
    from fairseq.sequence_generator import SequenceGenerator

    from nmt_specdec import checkpoints
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules
    from nmt_specdec.decoding.passes.draft_pass import refine_steps_of

    torch.set_num_threads(threads)
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(checkpoint), {"data": str(data)})
    model = model.eval()
    if draft_head is not None:
        from nmt_specdec.model.head_file import attach_head_file

        attach_head_file(model, draft_head)
    head = model.draft_head
    task.load_dataset(split)
    dataset = task.dataset(split)
    count = min(sentences, len(dataset))
    rules = LengthRules(max_len_a=1.2, max_len_b=10, max_positions=model.max_decoder_positions())
    stock = SequenceGenerator([model], task.target_dictionary, beam_size=1,
                              max_len_a=rules.max_len_a, max_len_b=rules.max_len_b)
    greedy = decode_in_order(stock, model, dataset, count, batch_size)
    rows = []
    for k in [0] + [k for k in ks if k > 0]:
        options = DecodingOptions(k=k, refine_steps=refine_steps)
        generator = SpecDecGenerator(model, task.target_dictionary, options, rules)
        tokens = decode_in_order(generator, model, dataset, count, batch_size)
        stats = generator.stats
        lengths = [len(t) for t in greedy]  # fairseq's tokens end with EOS
        rows.append({"k": k, "tokens_per_iteration": round(stats.mean_accepted_tokens, 3),
                     "oracle_tokens_per_iteration":
                         round(oracle_tokens_per_iteration(lengths, k), 3),
                     "slot_acceptance": [round(a, 3) for a in stats.slot_acceptance()],
                     "same_as_greedy": sum(a == b for a, b in zip(tokens, greedy))})
    return {"split": split, "sentences": count,
            "refine_steps": refine_steps_of(head, refine_steps),
            "refine_layers": len(head.refine_layers),
            "reference": "fairseq SequenceGenerator, beam 1", "rows": rows}


def format_report(report: Dict) -> str:
    """A markdown table of :func:`acceptance_report`'s rows."""
    refine = (f"refinement run {report['refine_steps']} times; "
              if report.get("refine_steps") else "")
    lines = [f"{report['split']}: {report['sentences']} sentences, beta=1; {refine}"
             f"= greedy: same output as {report.get('reference', 'greedy')}",
             "| K | tokens/iteration | oracle at K | = greedy | acceptance per slot |",
             "|---:|---:|---:|---:|---|"]
    for row in report["rows"]:
        slots = " ".join(f"{a:.2f}" for a in row["slot_acceptance"])
        lines.append(f"| {row['k']} | {row['tokens_per_iteration']:.2f} | "
                     f"{row.get('oracle_tokens_per_iteration', float('nan')):.2f} | "
                     f"{row['same_as_greedy']} | {slots} |")
    return "\n".join(lines)


def plot_acceptance(reports: List[Dict], path: Path) -> None:
    """Acceptance per slot at each report's largest K (tokens per iteration and
    the oracle in the legend), one line per report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for report in reports:
        row = max(report["rows"], key=lambda r: r["k"])
        head = Path(report["checkpoint"]).parent.name or report["checkpoint"]
        refine = (f", refinement x{report['refine_steps']}" if report.get("refine_steps") else
                  ", first pass only" if report.get("refine_layers") else "")
        slots = range(1, len(row["slot_acceptance"]) + 1)
        ax.plot(slots, row["slot_acceptance"], marker="o",
                label=f"{head}{refine}: {row['tokens_per_iteration']:.2f} tok/iter "
                      f"(oracle {row['oracle_tokens_per_iteration']:.2f})")
    ax.set_xlabel("draft slot")
    ax.set_ylabel("acceptance (β=1, before EOS)")
    ax.set_xticks(list(slots))
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{reports[0]['split']}: {reports[0]['sentences']} sentences, K={row['k']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    """``benchmarks/head_acceptance.py``: acceptance tables of a head, one per
    ``--refine-steps`` value, printed and (``--out``) saved as JSON."""
    import json

    from nmt_specdec.data.steps import OneLineParser, atomic_text, report_user_errors

    parser = OneLineParser(description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, nargs="+", required=True,
                        help="one or more heads on the same verifier (joint checkpoints, "
                        "or with --draft-head the stock verifier)")
    parser.add_argument("--draft-head", type=Path, default=None,
                        help="a head file to attach to the --checkpoint verifier")
    parser.add_argument("--data", type=Path, required=True, help="binarized data directory")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--refine-steps", type=int, nargs="*", default=[None],
                        help="refinement runs to report (default: the checkpoint's)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the reports")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG: acceptance per slot at the largest K, one line per report")
    args = parser.parse_args(argv)

    def run() -> None:
        for path in args.checkpoint:
            if not path.is_file():
                raise UserError(f"--checkpoint {path} does not exist")
        reports = []
        for path in args.checkpoint:
            for steps in args.refine_steps:
                report = acceptance_report(path, args.data, args.split, args.k,
                                           args.sentences, args.threads, refine_steps=steps,
                                           draft_head=args.draft_head)
                report["checkpoint"] = str(path)
                print(f"{path}\n{format_report(report)}", flush=True)
                reports.append(report)
        if args.out is not None:
            with atomic_text(args.out) as handle:
                json.dump({"reports": reports}, handle, indent=1)
        if args.plot is not None:
            plot_acceptance(reports, args.plot)

    return report_user_errors(run)
