"""The verifier's own lower layers as a drafter: how often an early exit agrees with greedy.

A drafter read off the verifier without training (self-speculative decoding,
Zhang et al., 2023; LayerSkip, Elhoushi et al., 2024 train for it): the state
after decoder layer l, through the verifier's final layer norm and output
projection, drafts the next token; fed its own drafts, it drafts K tokens one
call each, at about l / L of a verifier call. At beta=1 the committed prefix
is greedy's output, and an accepted draft is greedy's token, so such a
drafter's chain is accepted exactly as far as the exit's argmax agrees with
greedy's token at consecutive positions, which one teacher-forced pass over
greedy's output gives. The benchmark prints, for each exit, that agreement and
the tokens per iteration the chain drafter commits at each K (the
iterations simulated on the agreement, sentence by sentence, EOS included; the
top layer's row, which always agrees, is the oracle's). Example (the data directory from
``nmt-specdec-prepare-gettext``)::

    python benchmarks/early_exit.py --checkpoint models/gettext-de-en-base/model.pt \\
        --data work/gt/bin --split valid --sentences 300 --ks 2 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402


def chain_iterations(agrees: Sequence[bool], k: int) -> int:
    """Iterations a chain drafter of K slots takes over one sentence: at each,
    its drafts are accepted while the exit agrees with greedy at consecutive
    positions (at most K), and the verifier adds its own token; ``agrees[t]``:
    the exit's token at position t is greedy's (EOS the last)."""
    position, iterations = 0, 0
    while position < len(agrees):
        run = 0
        while run < k and position + run < len(agrees) and agrees[position + run]:
            run += 1
        position = min(position + run + 1, len(agrees))
        iterations += 1
    return iterations


@torch.no_grad()
def exit_agreement(model, source: torch.Tensor, greedy: torch.Tensor,
                   bos: int) -> List[torch.Tensor]:
    """Per decoder layer (0: the embeddings), (T,) whether the exit after it
    drafts greedy's token at each position of ``greedy`` (teacher-forced)."""
    decoder = model.decoder
    encoder_out = model.encoder(source.unsqueeze(0),
                                src_lengths=torch.tensor([source.numel()]))
    previous = torch.cat([greedy.new_tensor([bos]), greedy[:-1]]).unsqueeze(0)
    _, extra = decoder.extract_features(previous, encoder_out=encoder_out)
    agreement = []
    for state in extra["inner_states"]:  # (T, 1, C) each
        state = state.transpose(0, 1)
        if decoder.layer_norm is not None:
            state = decoder.layer_norm(state)
        agreement.append(decoder.output_layer(state).argmax(-1)[0] == greedy)
    return agreement


def run(args: argparse.Namespace) -> str:
    """The table: per exit, agreement and the chain drafter's tokens per iteration."""
    from fairseq.sequence_generator import SequenceGenerator

    from nmt_specdec import checkpoints
    from nmt_specdec.workflows.head_report import decode_in_order

    torch.set_num_threads(args.threads)
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(args.checkpoint), {"data": str(args.data)})
    model = model.eval()
    task.load_dataset(args.split)
    dataset, dictionary = task.dataset(args.split), task.target_dictionary
    count = min(args.sentences, len(dataset))
    stock = SequenceGenerator([model], dictionary, beam_size=1, max_len_a=1.2, max_len_b=10)
    greedy = decode_in_order(stock, model, dataset, count, 32)
    per_layer: List[List[torch.Tensor]] = []
    for index, tokens in enumerate(greedy):
        agreement = exit_agreement(model, dataset[index]["source"], torch.tensor(tokens),
                                   dictionary.eos())
        if not bool(agreement[-1].all()):
            raise RuntimeError(f"sentence {index}: the top layer does not give greedy's tokens")
        per_layer.append(agreement)
    total = sum(len(tokens) for tokens in greedy)
    layers = len(per_layer[0])
    heading = " | ".join(f"tok/iter K={k}" for k in args.ks)
    lines = [f"{args.split}: {count} sentences, {total} greedy tokens; the exit after layer l of "
             f"{layers - 1}", f"| exit after layer | agreement with greedy | {heading} |",
             "|---:|---:|" + "---:|" * len(args.ks)]
    for layer in range(layers):
        agreed = sum(int(row[layer].sum()) for row in per_layer)
        rates = " | ".join(
            f"{total / sum(chain_iterations(row[layer].tolist(), k) for row in per_layer):.2f}"
            for k in args.ks)
        lines.append(f"| {layer} | {agreed / total:.3f} | {rates} |")
    return "\n".join(lines)


def add_split_args(parser: argparse.ArgumentParser) -> None:
    """The verifier, the split decoded and the K measured (shared with lookup_drafts.py)."""
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True,
                        help="binarized data directory (lookup_drafts.py: with the train split)")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--threads", type=int, default=1)


def main(argv: Optional[List[str]] = None) -> int:
    from nmt_specdec.data.steps import OneLineParser, report_user_errors

    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    add_split_args(parser)
    args = parser.parse_args(argv)
    return report_user_errors(lambda: print(run(args), flush=True))


if __name__ == "__main__":
    logs.setup()
    sys.exit(main())
