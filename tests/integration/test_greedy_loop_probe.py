"""The greedy-as-one-ONNX-Loop probe (``scripts/probe_greedy_loop.py``) decodes what
the engine's greedy decodes: its timing is only worth printing if it does.

The loop is built around the shipped model's exported verify graph (certified
projection, the engine's constraints in-graph); with ``--max-len-b 3`` EOS is
forced at the limit on most sentences, which the loop must do as the engine does.
"""

from __future__ import annotations

import pytest

from tests.helpers.shipped_model import SETTINGS, hand_written_sources, load_model

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("max_len_b", [SETTINGS["max_len_b"], 3])
def test_loop_graph_decodes_the_engines_greedy_output(onnx_cache, max_len_b):
    from nmt_specdec.decoding.options import LengthRules
    from nmt_specdec.evaluation.greedy_loop_probe import probe

    model, task = load_model()
    rules = LengthRules(max_len_a=SETTINGS["max_len_a"] if max_len_b > 3 else 0.0,
                        max_len_b=max_len_b, max_positions=model.max_decoder_positions())
    rows = probe(model, task, hand_written_sources(task, 20), rules, repeats=1, threads=1)
    assert [row["same"] for row in rows] == [20, 20]
    assert all(row["ms_per_token"] > 0 for row in rows)
