"""How many tokens an iteration would accept with more than one draft per slot.

Would verifying a small *tree* of drafts (e.g. the head's top-2 at the first
slot) in one verifier pass pay? At beta=1 the answer needs no tree decoder: a
draft is accepted exactly when it equals the greedy token at its position, and
the head's proposals at an anchor depend only on the greedy prefix up to it
(the verifier state that predicted the anchor, the anchor token, its position,
the source). So one teacher-forced pass over each greedy output gives, for
every anchor position p and slot i, the rank of the greedy token y[p+i] among
the head's slot-i logits, and every tree shape is then replayed on those ranks:

- ``chain``: the linear drafts of the engine (top-1 at each slot). Replaying
  it must give the engine's own tokens per iteration (tested), which is what
  makes the other rows trustworthy;
- ``product w1,w2,...``: every combination of the top-w_i candidates of slot i
  (the NAR head's slot-i candidates do not depend on the earlier slots, so a
  branch's children are the same set): slot i is accepted while its greedy token
  ranks below w_i. Verify positions: 1 + sum_i prod_{j<=i} w_j;
- ``chain+leaves c``: the top-1 chain plus, at every depth, the next c-1
  candidates as leaves hanging off the chain: at the first miss the walk may
  still take one leaf. Verify positions: 1 + K * c. The engine decodes these
  trees (``--spec-candidates c``); the replay predicts its iterations exactly.

Only the acceptance side is measured here; a tree's cost is that of a verify
call with that many positions (``benchmarks/runtimes.py --ks``) plus moving
the accepted path's keys/values into place.

Example (from the repository root)::

    python benchmarks/draft_trees.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --spm-model models/gettext-de-en-tiny/spm.model \\
        --src-file work/gettext/raw/test.de --trees chain4 2,1,1,1 leaves2x4

Shapes: L output tokens (EOS included), K slots, C model dim, V draft vocabulary.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections import Counter
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from nmt_specdec.arguments import add_deprecated_alias
from nmt_specdec.decoding.options import LengthRules
from nmt_specdec.errors import UserError

NEVER = 1 << 30  # rank of a token the head cannot propose (outside its vocabulary, or pad)


class Tree(NamedTuple):
    """A draft tree shape. ``widths[i]``: candidates of slot i+1 (product trees);
    ``leaves``: candidates per depth for chain+leaves trees (0: not that kind)."""

    name: str
    widths: Sequence[int]
    leaves: int = 0

    @property
    def depth(self) -> int:
        return len(self.widths)

    @property
    def positions(self) -> int:
        """Verify positions: the last committed token plus every tree node."""
        if self.leaves:
            return 1 + self.depth * self.leaves
        return 1 + sum(math.prod(self.widths[: i + 1]) for i in range(self.depth))


def parse_tree(spec: str) -> Tree:
    """``chain4`` | ``2,1,1,1`` (product widths) | ``leaves2x4`` (c=2, depth 4)."""
    try:
        if spec.startswith("chain"):
            return Tree(spec, [1] * int(spec[5:]))
        if spec.startswith("leaves"):
            width, depth = (int(v) for v in spec[6:].split("x"))
            return Tree(spec, [1] * depth, leaves=width)
        widths = [int(v) for v in spec.split(",")]
    except ValueError:
        raise UserError(f"bad tree {spec!r}: use chainK, w1,w2,... or leavesCxK") from None
    if not widths or min(widths) < 1:
        raise UserError(f"bad tree {spec!r}: widths must be >= 1")
    return Tree(spec, widths)


def accepted_run(ranks: Tensor, tree: Tree, remaining: int) -> int:
    """Drafts accepted at one anchor. ``ranks``: (K,) rank of the greedy token at
    each slot; ``remaining``: greedy tokens left after the anchor (EOS included)."""
    accepted = 0
    for slot in range(min(tree.depth, remaining)):
        rank = int(ranks[slot])
        if rank == 0 or (not tree.leaves and rank < tree.widths[slot]):
            accepted += 1
            continue
        if tree.leaves and rank < tree.leaves:  # one leaf off the chain, then stop
            accepted += 1
        break
    return accepted


def walk(ranks: Tensor, tree: Tree) -> Iterator[Tuple[int, int, bool]]:
    """The iterations that commit one greedy output with ``tree``: (anchor,
    drafts accepted, whether every draft was) each.

    Args:
        ranks: (L, K) rank of y[p+i] among slot i's candidates at anchor p (p = 0
            is BOS); rows past the end are never read.
    """
    length = ranks.size(0)  # tokens to commit, EOS included
    position = 0
    while position < length:
        accepted = accepted_run(ranks[position], tree, length - position)
        yield position, accepted, accepted == min(tree.depth, length - position)
        # The accepted run plus the verifier's correction, unless EOS was accepted.
        position = min(length, position + accepted + 1)


def replay(ranks: Tensor, tree: Tree) -> int:
    """Iterations to commit one greedy output with ``tree`` (see :func:`walk`)."""
    return sum(1 for _ in walk(ranks, tree))


def slot1_by_anchor(ranks: Tensor, tree: Tree) -> Counter:
    """Slot 1's top-1 hits and anchors, ``(kind, "hits" | "anchors")``, where the
    walk's anchors fall: the sentence's start, after an iteration that rejected
    a draft (a correction), after one that accepted all; and over every anchor
    of the output, as a uniform teacher-forced measure reads it."""
    counts: Counter = Counter()
    kind = "start"
    for position, _, full in walk(ranks, tree):
        counts[kind, "anchors"] += 1
        counts[kind, "hits"] += int(ranks[position, 0] == 0)
        kind = "after a full chain" if full else "after a correction"
    counts["every anchor", "anchors"] += ranks.size(0)
    counts["every anchor", "hits"] += int((ranks[:, 0] == 0).sum())
    return counts


@torch.no_grad()
def greedy_token_ranks(model, sample: dict, outputs: List[Tensor], depth: int) -> List[Tensor]:
    """(L, K) ranks per sentence: where each greedy token falls in the head's
    slot logits at every anchor of its own greedy output (teacher forcing).

    Args:
        model: the joint model (eval mode, with ``draft_head``).
        sample: the fairseq batch the outputs were decoded from.
        outputs: per sentence of the batch, its greedy tokens (EOS last).
        depth: K, the slots to rank.
    """
    from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
    from nmt_specdec.decoding.passes.layers import keep_cross_rows
    from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

    decoder, head = model.decoder, model.draft_head
    verifier = LeanVerifier(decoder)
    lean_head = LeanDraftHead(head, decoder.dictionary.pad())
    encoder_out = model.encoder.forward_torchscript(sample["net_input"])
    cross = verifier.cross_states(encoder_out)
    lean_head.start_batch(encoder_out)
    head_cross = lean_head.cross
    bos = decoder.dictionary.eos()
    ranks = []
    for row, tokens in enumerate(outputs):
        length = tokens.numel()
        one = torch.tensor([row])
        inputs = torch.cat([tokens.new_tensor([bos]), tokens[:-1]]).unsqueeze(0)  # (1, L)
        cache = verifier.new_cache(1, length + 1)
        hidden = verifier.forward(inputs, torch.zeros(1, dtype=torch.long), 0, cache,
                                  [keep_cross_rows(kv, one) for kv in cross], True)[0]
        # Anchor p's state is the one that predicted y[p] (start_state for BOS).
        states = torch.cat([lean_head.start_states(1), hidden[:-1]])  # (L, C)
        lean_head.cross = [keep_cross_rows(kv, one.expand(length)) for kv in head_cross]
        logits = lean_head.slot_logits(states, inputs[0], torch.arange(length), depth)
        targets = torch.full((length, depth), -1, dtype=torch.long)
        padded = torch.cat([tokens, tokens.new_full((depth,), -1)])
        for slot in range(depth):
            targets[:, slot] = padded[slot: slot + length]  # y[p+slot+1] for p = 0..L-1
        vocab = logits.size(-1)
        known = (targets >= 0) & (targets < vocab)
        score = logits.gather(2, targets.clamp(0, vocab - 1).unsqueeze(2))  # (L, K, 1)
        rank = (logits > score).sum(2)
        rank = rank.masked_fill(~known | ~torch.isfinite(score.squeeze(2)), NEVER)
        ranks.append(rank)
    return ranks


def simulate(model, task, sources: List[Tensor], trees: List[Tree], rules,
             batch_size: int = 16) -> Dict:
    """Greedy-decodes ``sources`` with the engine, then replays every tree.

    Returns:
        ``{"sentences", "tokens", "rows": [{"tree", "positions", "tokens_per_iteration",
        "oracle_tokens_per_iteration"}]}``; the oracle is a drafter that always
        proposes the greedy tokens, at the same depth.
    """
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.decoding.stats import oracle_tokens_per_iteration

    # The head fills all K slots of a block in one bidirectional pass, so its
    # slot-i proposal depends on K: each depth is ranked with its own K.
    depths = sorted({tree.depth for tree in trees})
    greedy = SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=0), rules)
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    ranks: Dict[int, List[Tensor]] = {depth: [] for depth in depths}
    for start in range(0, len(sources), batch_size):
        sample = dataset.collater([dataset[i] for i in range(start, min(start + batch_size,
                                                                          len(sources)))])
        order = sample["id"].argsort().tolist()  # input order
        outputs = [h[0]["tokens"] for h in greedy.generate([model], sample)]
        for depth in depths:
            ranked = greedy_token_ranks(model, sample, outputs, depth)
            ranks[depth] += [ranked[i] for i in order]
    lengths = [r.size(0) for r in ranks[depths[0]]]
    rows = []
    for tree in trees:
        iterations = sum(replay(r, tree) for r in ranks[tree.depth])
        anchors = sum((slot1_by_anchor(r, tree) for r in ranks[tree.depth]), Counter())
        rows.append({"tree": tree.name, "depth": tree.depth, "positions": tree.positions,
                     "tokens_per_iteration": round(sum(lengths) / iterations, 3),
                     "oracle_tokens_per_iteration":
                         round(oracle_tokens_per_iteration(lengths, tree.depth), 3),
                     "slot1_by_anchor": {kind: [anchors[kind, "hits"], anchors[kind, "anchors"]]
                                         for kind, what in anchors if what == "anchors"}})
    return {"sentences": len(sources), "tokens": sum(lengths), "rows": rows}


def format_rows(report: Dict) -> str:
    lines = [f"{report['sentences']} sentences, {report['tokens']} greedy tokens, beta=1",
             "| drafts | depth K | verify positions | tokens/iteration | oracle at K |",
             "|---|---:|---:|---:|---:|"]
    for row in report["rows"]:
        lines.append(f"| {row['tree']} | {row['depth']} | {row['positions']} | "
                     f"{row['tokens_per_iteration']:.2f} | "
                     f"{row['oracle_tokens_per_iteration']:.2f} |")
    lines.append("\nslot 1's top-1 rate by where the anchors fall (rate, anchors):")
    for row in report["rows"]:
        kinds = row.get("slot1_by_anchor", {})
        lines.append(f"- {row['tree']}: " + ", ".join(
            f"{kind} {hits / max(total, 1):.3f} ({total})" for kind, (hits, total) in kinds.items()))
    return "\n".join(lines)


class Inputs(NamedTuple):
    """What a run decodes: the model, its task, the encoded sources, the length rules."""

    model: torch.nn.Module
    task: object
    sources: List[Tensor]
    rules: LengthRules


def add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="a SpecDec checkpoint (with a draft head), or a verifier with --draft-head")
    p.add_argument("--draft-head", help="a head file (nmt-specdec-add-draft-head) for --checkpoint")
    p.add_argument("--data", required=True, help="directory with the dictionaries")
    p.add_argument("--src-file", required=True, help="raw source sentences, one per line")
    p.add_argument("--spm-model", required=True)
    first = p.add_argument("--first-sentences", dest="max_sentences", type=int, default=500,
                           metavar="N", help="decode only the first N sentences")
    add_deprecated_alias(p, "--max-sentences", first)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)


def load_inputs(args: argparse.Namespace) -> Inputs:
    """The model (fp32, eval mode; it must have a draft head), its task, the first
    ``--first-sentences`` sources encoded, and fairseq's length rules."""
    import sentencepiece
    from fairseq import checkpoint_utils

    try:
        with open(args.src_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()[: args.max_sentences]
    except OSError as err:
        raise UserError(f"cannot read --src-file {args.src_file}: {err.strerror}") from None
    if args.draft_head:  # a stock verifier and a head file beside it
        from pathlib import Path

        from nmt_specdec import checkpoints
        from nmt_specdec.model.head_file import attach_head_file

        model, task = checkpoints.load(args.checkpoint, {"data": args.data}, specdec_task=True)
        model = model.float().eval()
        attach_head_file(model, Path(args.draft_head))
    else:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [args.checkpoint], arg_overrides={"data": args.data})
        model = models[0].float().eval()
    if not hasattr(model, "draft_head"):
        raise UserError(f"{args.checkpoint} has no draft head")
    spm = sentencepiece.SentencePieceProcessor(model_file=args.spm_model)
    sources = [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                                  add_if_not_exist=False).long()
               for line in lines]
    rules = LengthRules(max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                        max_positions=model.max_decoder_positions())
    return Inputs(model, task, sources, rules)


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_input_args(p)
    p.add_argument("--trees", nargs="+",
                   default=["chain2", "2,1", "2,2", "leaves2x2", "chain4", "2,1,1,1",
                            "3,1,1,1", "2,2,1,1", "leaves2x4", "leaves3x4"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="also write the report as JSON here")
    args = p.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        report = run(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_rows(report))
    if args.out:
        import json
        from pathlib import Path

        Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


def run(args) -> Dict:
    trees = [parse_tree(spec) for spec in args.trees]
    torch.set_num_threads(args.threads)
    test = load_inputs(args)
    return simulate(test.model, test.task, test.sources, trees, test.rules)


if __name__ == "__main__":
    sys.exit(main())
