#!/usr/bin/env python
"""Translate raw text line by line (issue #8); same as ``nmt-specdec-translate``.

Example::

    python scripts/translate.py --checkpoint ckpt/checkpoint_best.pt \\
        --spm-model spm.model --spec-decoding --spec-k 10 < raw.de > out.en

Exactly one output line per input line, in order; see
:mod:`nmt_specdec.translate` for how empty, invalid-UTF-8 and over-long lines
are handled. The work is done by :func:`nmt_specdec.translate.run`.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.translate import TranslateConfig, main, run  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
