#!/usr/bin/env python
"""Greedy and SpecDec decoding as one ONNX Loop, against the engine's (see
nmt_specdec.evaluation.loop_graph_probe)."""
import sys

from nmt_specdec.evaluation.loop_graph_probe import main

if __name__ == "__main__":
    sys.exit(main())
