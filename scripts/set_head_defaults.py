#!/usr/bin/env python
"""Set a head file's decoding defaults: its refinement runs and its draft vocabulary.

The weights and the verifier's fingerprints stay as they are; only the defaults
change (``--spec-refine-steps`` still overrides the runs). Example (from the
repository root: the shipped base head, its refinement run once, drafting from
every id)::

    python scripts/set_head_defaults.py work/base-head-cpu/run-5/head.pt --refine-steps 1 \\
        --draft-vocab-size 0 --out models/gettext-de-en-base/head.pt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402

logs.setup()  # before fairseq is imported: it logs INFO lines as it loads

from nmt_specdec.errors import UserError  # noqa: E402
from nmt_specdec.hashing import file_sha256  # noqa: E402
from nmt_specdec.model.head_file import set_head_defaults  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("head", type=Path, help="a head file (nmt-specdec-add-draft-head's head.pt)")
    p.add_argument("--refine-steps", type=int, help="refinement runs by default (>= 1)")
    p.add_argument("--draft-vocab-size", type=int,
                   help="draft from the first N ids of the vocabulary (0: every id; a head "
                        "tied to the verifier's output projection only)")
    p.add_argument("--out", type=Path, help="where to write it (default: in place)")
    args = p.parse_args(argv)
    if args.refine_steps is None and args.draft_vocab_size is None:
        print("error: nothing to set: give --refine-steps and/or --draft-vocab-size",
              file=sys.stderr)
        return 1
    out = args.out or args.head
    try:
        shape = set_head_defaults(args.head, out, args.refine_steps, args.draft_vocab_size)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    vocab = f"the first {shape['vocab_size']} ids" if shape["vocab_size"] else "every id"
    print(f"{out}: refinement run {shape['refine_steps']}x by default, drafts from {vocab}, "
          f"sha256 {file_sha256(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
