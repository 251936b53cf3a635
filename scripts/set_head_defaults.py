#!/usr/bin/env python
"""Set how often decoding runs a head file's refinement by default.

The weights and the verifier's fingerprints stay as they are; only the default
that ``--spec-refine-steps`` overrides changes. Example (from the repository root)::

    python scripts/set_head_refine_steps.py work/base-head-cpu/run-5/head.pt 1 \\
        --out models/gettext-de-en-base/head.pt
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
from nmt_specdec.model.head_file import set_head_refine_steps  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("head", type=Path, help="a head file (nmt-specdec-add-draft-head's head.pt)")
    p.add_argument("refine_steps", type=int, help="refinement runs by default (>= 1)")
    p.add_argument("--out", type=Path, help="where to write it (default: in place)")
    args = p.parse_args(argv)
    out = args.out or args.head
    try:
        shape = set_head_refine_steps(args.head, args.refine_steps, out)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{out}: refinement run {shape['refine_steps']}x by default, "
          f"sha256 {file_sha256(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
