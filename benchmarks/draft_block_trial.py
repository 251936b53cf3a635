"""Acceptance when the head drafts over the block it was trained on and the
verifier checks only the first K slots (a trial; the engine drafts K slots).

A head is trained with ``--k B`` ``[MASK]`` slots after the anchor, and its first
pass is bidirectional over them: at K < B decoding shows it fewer masks than it
ever saw. This probe makes the torch draft pass run ``--block`` slots (the
head's training block) and keep the first K, then prints the same report
as ``benchmarks/head_acceptance.py`` (whose options it takes). The refinement
is causal, so the slots after K change nothing but the first pass's attention.

    python benchmarks/draft_block_trial.py --checkpoint work/base-head-cpu/run-4/model.pt \\
        --data work/base-head-cpu/run-4/data --split valid --sentences 300 --k 2 3 4 --threads 2 \\
        --block 6
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.workflows.head_report import main as report_main


def draft_over_block(block: int) -> None:
    """Makes :meth:`LeanDraftHead.slot_logits` draft ``block`` slots (at least K)
    and return the first K."""
    own = LeanDraftHead.slot_logits

    def slot_logits(self, states, last_tokens, positions, num_slots):
        return own(self, states, last_tokens, positions, max(num_slots, block))[:, :num_slots]

    LeanDraftHead.slot_logits = slot_logits


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    parser.add_argument("--block", type=int, required=True,
                        help="slots the first pass drafts: the head's training block (--k)")
    known, rest = parser.parse_known_args(argv)
    draft_over_block(known.block)
    return report_main(rest)


if __name__ == "__main__":
    sys.exit(main())
