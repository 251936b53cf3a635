#!/usr/bin/env python
"""``make quickstart`` runs this file; it is ``nmt-specdec-quickstart`` (``--help`` for options)."""
import sys

from nmt_specdec.workflows.quickstart import main

if __name__ == "__main__":
    sys.exit(main())
