#!/usr/bin/env python
"""Add a SpecDec draft head to a stock fairseq Transformer (see nmt_specdec.workflows.add_draft_head)."""
import sys

from nmt_specdec.workflows.add_draft_head import main

if __name__ == "__main__":
    sys.exit(main())
