#!/usr/bin/env python
"""Quickstart: Ding data, a tiny joint SpecDec model on the CPU, BLEU vs speed.

Prepares the Ding De-En corpus (or with ``--corpus gettext`` the gettext
corpus of Debian message catalogs; reused when done), trains
``specdec_transformer_tiny`` for a fixed time budget with the values of
``conf/cpu_tiny.yaml``, decodes 200 test sentences with stock greedy, stock
beam 5 and two SpecDec settings, and writes ``results/quickstart/report.md``
and ``bleu_vs_speedup.png``. Finished steps are reused on a rerun. The work is
done by :mod:`nmt_specdec.workflows.quickstart`.

Example::

    make quickstart        # or: .venv/bin/python scripts/quickstart.py
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.workflows.quickstart import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
