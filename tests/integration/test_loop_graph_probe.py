"""The loop-graph probe (``scripts/probe_loop_graphs.py``) decodes what the engine's
greedy decodes: its timings are only worth printing if it does.

Greedy and SpecDec K=2 are built around the shipped model's exported graphs
(certified projection, the engine's constraints, acceptance and EOS cut
in-graph). With ``--max-len-b 3`` EOS is forced at the limit on most
sentences, which the loops must do as the engine does; SpecDec's loop must
also commit as many tokens per iteration as the engine's SpecDec, and the loop
drafting with the verifier's 8-bit copy nearly the oracle's.
"""

from __future__ import annotations

import pytest

from tests.helpers.shipped_model import SETTINGS, hand_written_sources, load_model

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("max_len_b", [SETTINGS["max_len_b"], 3])
def test_loop_graphs_decode_the_engines_greedy_output(onnx_cache, max_len_b):
    from nmt_specdec.decoding.options import LengthRules
    from nmt_specdec.evaluation.loop_graph_probe import probe

    model, task = load_model()
    rules = LengthRules(max_len_a=SETTINGS["max_len_a"] if max_len_b > 3 else 0.0,
                        max_len_b=max_len_b, max_positions=model.max_decoder_positions())
    rows = probe(model, task, hand_written_sources(task, 20), rules, k=2, repeats=1, threads=1,
                 copy_k=2)
    assert [row["same"] for row in rows] == [20] * 5
    engine, loop, copy = (rows[i]["tokens_per_iteration"] for i in (1, 3, 4))
    assert loop > 1.3 and abs(engine - loop) < 0.05  # the same iterations, or nearly
    assert rows[2]["tokens_per_iteration"] == 1.0  # greedy: one token a call
    # The 8-bit copy's drafts, its past cut back to the committed tokens each
    # iteration: near the oracle at K=2 (a past cut one position short is not).
    assert copy > 2.65 or max_len_b == 3  # 2.76; one position off: 2.53
