#!/usr/bin/env python
"""Tokens per iteration of draft trees at beta=1 (see nmt_specdec.evaluation.draft_trees)."""
import sys

from nmt_specdec.evaluation.draft_trees import main

if __name__ == "__main__":
    sys.exit(main())
