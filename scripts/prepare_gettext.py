#!/usr/bin/env python
"""Build the gettext De-En corpus from Debian's German message catalogs.

Downloads the declared packages with ``apt-get download`` (or reads
``--deb-dir``), parses their ``.mo`` files, cleans and splits the pairs by
package, trains SentencePiece and binarizes. Output layout under ``--out``:
``catalogs/``, ``raw/``, ``DATA_CARD.md``, ``spm.model``, ``spm/``, ``bin/``.
Finished steps are reused on a rerun. The work is done by
:mod:`nmt_specdec.data.gettext_recipe`.

Example::

    python scripts/prepare_gettext.py --out work/gettext
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import nmt_specdec  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec.data.gettext_recipe import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
