#!/usr/bin/env python
"""Tokens per iteration and acceptance per slot of a draft head at beta=1
(see nmt_specdec.workflows.head_report)."""
import sys

from nmt_specdec.workflows.head_report import main

if __name__ == "__main__":
    sys.exit(main())
