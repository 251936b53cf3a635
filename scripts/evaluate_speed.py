#!/usr/bin/env python
"""BLEU versus speedup of SpecDec against fairseq's SequenceGenerator (issue #6).

Decodes one test set with stock beam 1 / beam N and a grid of SpecDec
settings (k, beta, tau) at several batch sizes, interleaved in one process on
one loaded checkpoint, and writes ``results.json``, ``results.md`` and
``bleu_vs_speedup.png`` into ``--out``; the table is also printed. With the
default grid this is also issue #4's benchmark: batch-1 and batch-32
wall-clock speedup over stock beam 1, side by side.

Example::

    python scripts/evaluate_speed.py --checkpoint ckpt/checkpoint_best.pt \\
        --data data-bin --split test --spm-model spm.model --out eval/

The work is done by :func:`nmt_specdec.evaluation.pipeline.run`; this file
only registers the fairseq plugin and hands over.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Registers the task and model and installs the safe checkpoint loader.
import fairseq_plugins  # noqa: E402,F401
from nmt_specdec.evaluation.cli import main  # noqa: E402
from nmt_specdec.evaluation.config import EvalConfig  # noqa: E402,F401
from nmt_specdec.evaluation.pipeline import run  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
