#!/usr/bin/env python
"""Prints the results tables of docs/results.md from evaluation ``results.json`` files.

Example::

    python scripts/readme_tables.py results/ding_tiny/results.json
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402

logs.setup()  # before fairseq is imported: it logs INFO lines as it loads
from nmt_specdec.evaluation.readme_table import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
