#!/usr/bin/env python
"""Sequence-level distillation: translate a binarized split with a checkpoint.

Writes ``{out}/{split}.{src}-{tgt}.{tgt}.{bin,idx}`` (plus the source side and
dictionaries), usable as ``--distill-data`` of ``translation_specdec``.
Resumable: finished chunks under ``{out}/chunks`` are skipped. The work is
done by :mod:`nmt_specdec.workflows.distill`.

Example::

    python scripts/distill.py --data work/ding/bin \\
        --checkpoint checkpoints/teacher/checkpoint_best.pt --out work/ding/distill
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.workflows.distill import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
