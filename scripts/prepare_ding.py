#!/usr/bin/env python
"""Build the Ding De-En corpus: parse, split, SentencePiece, fairseq binarize.

Output layout under ``--out``: ``raw/`` (clean text), ``DATA_CARD.md``,
``spm.model``, ``spm/`` (pieces) and ``bin/`` (fairseq-preprocess output).
Finished steps are reused on a rerun. The work is done by
:mod:`nmt_specdec.data.ding_recipe`.

Example::

    python scripts/prepare_ding.py --out work/ding --vocab-size 8000
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.data.ding_recipe import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
