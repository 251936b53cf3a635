"""What the draft head learns when it may draft every id: its draft vocabulary, trained on.

Issue 66's lever "draft vocabulary". The shipped base head drafts from the
verifier's 4,000 most frequent ids, and its training left every label beyond
them out of the loss. Tied to the verifier's output projection, the same head
can draft from the whole vocabulary without a new weight (``draft_vocab.py``
measures that in the engine); this asks what training on with the whole
vocabulary adds. Each variant trains the shipped head on for the same updates on
the same batches (:mod:`head_reads`' training and measures) and reports its slot
accuracy on valid:

- ``ids-4000``: the head as shipped, labels beyond its 4,000 ids left out (the
  control: what training on alone does);
- ``all-ids``: the same head drafting from every id, every label in the loss.

The update-0 rows are the two vocabularies before any training. Labels are the
verifier's teacher-forced argmax, so slot 1's accuracy is the rate at which its
draft would be accepted; a label outside a head's draft ids counts as a miss.
``--save-heads DIR`` writes each trained head as ``DIR/VARIANT.pt``.

Example (the data as ``nmt-specdec-prepare-gettext`` writes it)::

    python benchmarks/head_vocab.py --raw work/gt/raw --train-sentences 30000 --updates 1200 \\
        --save-heads work/heads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from head_reads import (  # noqa: E402
    MARK_HEADER, Reader, add_training_args, load_cached, mark_misses, mark_row, train)

VARIANTS = {"ids-4000": 4000, "all-ids": 0}  # variant -> draft ids (0: every id)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--save-heads", type=Path, default=None,
                   help="writes each variant's trained head here (VARIANT.pt)")
    add_training_args(p, updates=1200, eval_every=300, lr=2e-4)
    args = p.parse_args(argv)
    args.miss_share, args.window = 0.0, 0  # head_reads' options these variants leave off
    model, data, valid, bos, pad = load_cached(args)
    head = model.draft_head
    start = {name: tensor.clone() for name, tensor in head.state_dict().items()}
    mark_misses(Reader(head, "control", 0, args.k, bos, pad), valid)
    print(MARK_HEADER)
    for kind in args.variants:
        head.load_state_dict(start)
        head.vocab_size = VARIANTS[kind] or model.decoder.output_projection.out_features
        reader = Reader(head, "control", 0, args.k, bos, pad)
        for marks in train(reader, data, valid, args):
            print(mark_row(kind, *marks), flush=True)
        if args.save_heads is not None:
            from nmt_specdec.model.head_file import write_head_file

            write_head_file(model, args.save_heads / f"{kind}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
