#!/usr/bin/env python
"""Greedy decoding as one ONNX Loop against the engine's greedy (see
nmt_specdec.evaluation.greedy_loop_probe)."""
import sys

from nmt_specdec.evaluation.greedy_loop_probe import main

if __name__ == "__main__":
    sys.exit(main())
