#!/usr/bin/env python
"""Build the WMT14 De-En corpus: download, clean, SentencePiece 32k, binarize.

Training: Europarl v7 + Common Crawl + News Commentary v9; valid: newstest2013;
test: newstest2014 (full). Without internet, put the original archives
(``training-parallel-europarl-v7.tgz``, ``training-parallel-commoncrawl.tgz``,
``training-parallel-nc-v9.tgz``, ``dev.tgz``, ``test-full.tgz``) into a
directory and pass ``--raw-dir DIR --offline``. Finished steps are reused on
a rerun. The work is done by :mod:`nmt_specdec.data.wmt14`.

Example::

    python scripts/prepare_wmt14.py --out work/wmt14
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.data.wmt14 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
