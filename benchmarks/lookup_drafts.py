"""What drafters without weights could add to the head: the training targets' n-grams and the source.

gettext catalogs repeat themselves ("Could not open file %s") and keep tokens
of the source as they are (format strings, options, names), so two drafters
that need no training propose such continuations beside the draft head
(compare prompt lookup and REST, He et al., 2024):

- **target n-grams**: the longest suffix of the committed prefix (up to
  ``--max-n`` tokens, BOS included) found in the training targets; its draft
  is the K tokens that most often follow it there;
- **source copy**: the last place in the source where the prefix's suffix (up
  to 3 tokens) appears; its draft is the source tokens after it (the dictionary
  is shared).

At beta=1 every iteration commits exactly greedy's output, so the benchmark
knows, at each iteration, how far greedy accepts each of the three drafts. Its
second run proposes the one accepted furthest: an oracle choice, the ceiling of
any rule that picks among them and of a tree that verifies them all. It
prints, per K, tokens per iteration of the head alone and of the oracle choice
(each checked equal to fairseq's greedy search), and each drafter's mean
accepted drafts over the oracle run's iterations. Torch backend, batch 32:
tokens per iteration do not depend on the backend or the batch. Example (the
data directory from ``nmt-specdec-prepare-gettext``)::

    M=models/gettext-de-en-base
    python benchmarks/lookup_drafts.py --checkpoint $M/model.pt --draft-head $M/head.pt \\
        --data work/gt/bin --split valid --sentences 300 --ks 2 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.early_exit import add_split_args  # noqa: E402
from nmt_specdec import logs  # noqa: E402
from nmt_specdec.decoding.drafters import Drafter, DraftRequest  # noqa: E402

BITS = 14  # bits per token id in an n-gram key: ids below 16,384, up to 4 tokens in 64 bits
SOURCE_N = 3  # the longest prefix suffix looked up in the source


class NgramStore:
    """Every n-gram (n = 1..``max_n``) of ``sequences`` (each ending with EOS,
    concatenated after one EOS, which stands for BOS), sorted by key."""

    def __init__(self, sequences: Sequence[np.ndarray], eos: int, max_n: int = 4):
        if not 1 <= max_n <= 64 // BITS:
            raise ValueError(f"max_n must be in 1..{64 // BITS}")
        self.tokens = np.concatenate([np.array([eos], np.int64)]
                                     + [np.asarray(s, np.int64) for s in sequences])
        if self.tokens.max() >= 1 << BITS:
            raise ValueError(f"token ids must be below {1 << BITS}")
        self.keys, self.ends = {}, {}
        for n in range(1, max_n + 1):
            key = np.zeros(len(self.tokens) - n + 1, np.int64)
            for j in range(n):
                key = (key << BITS) | self.tokens[j:len(self.tokens) - n + 1 + j]
            order = np.argsort(key, kind="stable")
            self.keys[n], self.ends[n] = key[order], order + n - 1  # position of its last token

    def continuation(self, history: Sequence[int], k: int,
                     cap: int = 4000) -> Optional[List[int]]:
        """The K tokens that most often follow the longest suffix of ``history``
        found (ties: the smallest tokens), or None where not even its last token
        is (``cap``: at most that many places, evenly spread, are counted)."""
        for n in range(min(len(self.keys), len(history)), 0, -1):
            key = 0
            for token in history[-n:]:
                key = (key << BITS) | int(token)
            low, high = np.searchsorted(self.keys[n], [key, key + 1])
            ends = self.ends[n][low:high]
            ends = ends[ends + k < len(self.tokens)]
            if len(ends) == 0:
                continue
            if len(ends) > cap:
                ends = ends[np.linspace(0, len(ends) - 1, cap).astype(int)]
            following = np.stack([self.tokens[ends + 1 + j] for j in range(k)], 1)
            rows, counts = np.unique(following, axis=0, return_counts=True)
            return rows[counts.argmax()].tolist()
        return None


def source_copy(source: Sequence[int], history: Sequence[int], k: int) -> Optional[List[int]]:
    """The source tokens after the last place where the longest suffix of
    ``history`` (up to :data:`SOURCE_N` tokens) appears in ``source`` (at most K
    of them), or None."""
    source, history = list(source), list(history)
    for n in range(min(SOURCE_N, len(history)), 0, -1):
        tail = history[-n:]
        for start in range(len(source) - n - 1, -1, -1):
            if source[start:start + n] == tail:
                return source[start + n:start + n + k]
    return None


def accepted(draft: Optional[Sequence[int]], greedy: Sequence[int]) -> int:
    """How many leading tokens of ``draft`` greedy accepts (0 for None)."""
    count = 0
    for token, want in zip(draft or (), greedy):
        if token != want:
            break
        count += 1
    return count


class OracleChoice(Drafter):
    """Drafts what the head drafts, or where ``choose`` is set, whichever of the
    head's, the target n-grams' and the source's drafts greedy accepts furthest;
    counts each one's accepted drafts per iteration either way."""

    NAMES = ("head", "target n-grams", "source copy")

    def __init__(self, head: Drafter, store: NgramStore, greedy: List[List[int]], pad: int,
                 choose: bool):
        self.head, self.store, self.greedy, self.pad = head, store, greedy, pad
        self.choose = choose
        self.counts: List[Tuple[int, int, int]] = []

    def start_batch(self, sample: dict, encoder_out) -> None:
        self.head.start_batch(sample, encoder_out)
        self.ids = sample["id"].tolist()
        self.sources = [[t for t in row.tolist() if t != self.pad]
                        for row in sample["net_input"]["src_tokens"]]

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.head.keep_rows(rows)

    def start_states(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return self.head.start_states(batch, like)

    def propose(self, request: DraftRequest) -> torch.Tensor:
        drafts = self.head.propose(request)
        k = request.num_slots
        for b in range(drafts.size(0)):
            length, row = int(request.lengths[b]), int(request.rows[b])
            history = request.prefix[b, :length].tolist()
            wanted = self.greedy[self.ids[row]][length - 1:length - 1 + k]
            proposals = [drafts[b].tolist(), self.store.continuation(history, k),
                         source_copy(self.sources[row], history, k)]
            counts = [accepted(p, wanted) for p in proposals]
            self.counts.append(tuple(counts))
            best = int(np.argmax(counts))
            if self.choose and best > 0:
                drafts[b, :len(proposals[best])] = torch.tensor(proposals[best])
        return drafts


def run(args: argparse.Namespace) -> str:
    """Decodes the split with the head alone and with the oracle choice, per K;
    returns the markdown table."""
    from fairseq.sequence_generator import SequenceGenerator

    from nmt_specdec import checkpoints
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules
    from nmt_specdec.model.head_file import attach_head_file
    from nmt_specdec.workflows.head_report import decode_in_order

    torch.set_num_threads(args.threads)
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(args.checkpoint), {"data": str(args.data)})
    model = model.eval()
    if args.draft_head is not None:
        attach_head_file(model, args.draft_head)
    task.load_dataset("train")
    task.load_dataset(args.split)
    train, dataset = task.dataset("train"), task.dataset(args.split)
    dictionary = task.target_dictionary
    store = NgramStore([train.tgt[i].numpy() for i in range(len(train.tgt))], dictionary.eos(),
                       args.max_n)
    count = min(args.sentences, len(dataset))
    rules = LengthRules(max_len_a=1.2, max_len_b=10, max_positions=model.max_decoder_positions())
    stock = SequenceGenerator([model], dictionary, beam_size=1, max_len_a=rules.max_len_a,
                              max_len_b=rules.max_len_b)
    greedy = decode_in_order(stock, model, dataset, count, 32)
    lines = [f"{args.split}: {count} sentences, beta=1; target n-grams of {len(store.tokens):,} "
             f"training tokens, up to {args.max_n} tokens matched",
             "| K | drafts | tok/iter | = greedy | mean accepted drafts: head | target n-grams "
             "| source copy | the best of the three |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for k in args.ks:
        for choose in (False, True):
            generator = SpecDecGenerator(model, dictionary, DecodingOptions(k=k), rules)
            generator.drafter = OracleChoice(generator.drafter, store, greedy,
                                             dictionary.pad(), choose)
            same = sum(a == b for a, b in zip(decode_in_order(generator, model, dataset, count, 32),
                                              greedy))
            counts = np.array(generator.drafter.counts, dtype=float)
            means = " | ".join(f"{m:.3f}" for m in counts.mean(0))
            lines.append(f"| {k} | {'the best of the three' if choose else 'the head'} | "
                         f"{generator.stats.mean_accepted_tokens:.3f} | {same}/{count} | "
                         f"{means} | {counts.max(1).mean():.3f} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    from nmt_specdec.data.steps import OneLineParser, report_user_errors

    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    add_split_args(parser)
    parser.add_argument("--draft-head", type=Path, default=None)
    parser.add_argument("--max-n", type=int, default=4, choices=[1, 2, 3, 4])
    args = parser.parse_args(argv)
    return report_user_errors(lambda: print(run(args), flush=True))


if __name__ == "__main__":
    logs.setup()
    sys.exit(main())
