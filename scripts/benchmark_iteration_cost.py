#!/usr/bin/env python
"""Cost of one SpecDec iteration in stock greedy steps (see nmt_specdec.evaluation.iteration_cost)."""
import sys

from nmt_specdec.evaluation.iteration_cost import main

if __name__ == "__main__":
    sys.exit(main())
