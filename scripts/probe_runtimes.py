#!/usr/bin/env python
"""One verifier call on each candidate runtime (see nmt_specdec.evaluation.runtime_probe)."""
import sys

from nmt_specdec.evaluation.runtime_probe import main

if __name__ == "__main__":
    sys.exit(main())
