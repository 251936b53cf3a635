"""Where a new draft head starts: random weights, or copies of the verifier's top layer.

Issue 66's lever "its start": a head whose layers start as copies of the
verifier's top decoder layer begins with the source attention and feed-forward
features of a layer that already predicts the next token, where a random head
must learn them. Each variant trains a new head of the shipped head's shape
from its start, for the same updates on the same batches
(:mod:`head_reads`' training and measures), and reports its slot accuracy on
valid beside the shipped head's:

- ``shipped``: the shipped head, not trained on (the mark to reach);
- ``random``: a new head as ``nmt-specdec-add-draft-head`` builds it;
- ``copy``: the same head with every first-pass and refinement layer a copy of
  the verifier's top decoder layer (the last ones, if it has several), their
  final norms copies of the verifier's, and the state projection the identity,
  so the anchor is embed(c) + pos(p) + h.

The labels are the verifier's teacher-forced argmax, so slot 1's accuracy is the
rate at which its draft would be accepted (:mod:`head_reads`). Only the head
trains; the verifier's weights are read, never changed.

Example (the data as ``nmt-specdec-prepare-gettext`` writes it)::

    python benchmarks/head_start.py --raw work/gt/raw --train-sentences 12000 --updates 1200 \\
        --eval-every 400
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from head_reads import (  # noqa: E402
    MARK_HEADER, Reader, add_training_args, load_cached, mark_misses, mark_row, train)

from nmt_specdec.model.draft_head import DraftHead  # noqa: E402


def new_head(shipped: DraftHead) -> DraftHead:
    """A head of ``shipped``'s shape with new weights, as the plugin builds one."""
    return DraftHead(shipped.verifier, len(shipped.layers),
                     shipped.output_projection is not None, shipped.vocab_size,
                     len(shipped.refine_layers), max(shipped.refine_steps, 1))


@torch.no_grad()
def copy_verifier_top(head: DraftHead) -> DraftHead:
    """``head`` with its layers started as the verifier's top decoder layers and
    its state projection the identity (see the module's ``copy`` variant)."""
    verifier = head.verifier
    for layers in (head.layers, head.refine_layers):
        tops = verifier.layers[-len(layers):] if len(layers) else []
        for layer, top in zip(layers, tops):
            layer.load_state_dict(top.state_dict())
    for norm in (head.layer_norm, head.refine_norm):
        if norm is not None and verifier.layer_norm is not None:
            norm.load_state_dict(verifier.layer_norm.state_dict())
    nn.init.eye_(head.state_proj.weight)
    nn.init.zeros_(head.state_proj.bias)
    return head


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=["shipped", "random", "copy"],
                   choices=["shipped", "random", "copy"])
    add_training_args(p, updates=3000, eval_every=500, lr=1e-3)
    args = p.parse_args(argv)
    args.miss_share, args.window = 0.0, 0  # head_reads' training options these variants leave off
    model, data, valid, bos, pad = load_cached(args)
    shipped = model.draft_head
    mark_misses(Reader(shipped, "control", 0, args.k, bos, pad), valid)
    print(MARK_HEADER)
    for kind in args.variants:
        torch.manual_seed(1)  # the same new weights wherever a variant starts from them
        head = {"shipped": lambda: shipped, "random": lambda: new_head(shipped),
                "copy": lambda: copy_verifier_top(new_head(shipped))}[kind]()
        updates = 0 if kind == "shipped" else args.updates
        reader = Reader(head, "control", 0, args.k, bos, pad)
        for marks in train(reader, data, valid,
                           argparse.Namespace(**{**vars(args), "updates": updates})):
            print(mark_row(kind, *marks), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
