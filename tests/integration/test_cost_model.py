"""``benchmarks/cost_model.py``: the break-even arithmetic from fixed costs, the
structure of a tiny run on the shipped model, and one-line errors for bad input.

No timing is asserted: the benchmark prints measurements, the tests check that
the table, the JSON and the plot hold what they should.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.cost_model import build_parser, main, run
from benchmarks.cost_model_report import (
    RANDOM_LABEL,
    break_even,
    cost_rows,
    format_table,
    verdicts,
)

# verify(N) ms for N = 1..3, draft(K) ms, host(K) ms (K=0: greedy).
COSTS = {"verify": {1: 1.0, 2: 1.2, 3: 1.5}, "draft": {1: 0.3, 2: 0.4},
         "host": {0: 0.25, 1: 0.3, 2: 0.35}}
TOKENS = {"head": {1: 1.6, 2: 1.5}, "oracle": {1: 1.9, 2: 2.7}}


def test_break_even_is_iteration_cost_over_greedy_step_cost():
    # (1.5 + 0.4 + 0.35) / (1.0 + 0.25) = 2.25 / 1.25
    assert break_even(1.0, 1.5, 0.4, 0.25, 0.35) == pytest.approx(1.8)
    # One host time for both: the brief's (verify(K+1) + draft + host) / (verify(1) + host).
    assert break_even(2.0, 3.0, 1.0, 1.0) == pytest.approx(5.0 / 3.0)


def test_rows_say_whether_drafting_pays_and_by_how_much():
    rows = cost_rows({"name": "ckpt", "random": False}, 1, COSTS, TOKENS)
    assert [row["k"] for row in rows] == [1, 2]
    one, two = rows
    assert one["break_even"] == pytest.approx((1.2 + 0.3 + 0.3) / 1.25)  # 1.44
    assert two["break_even"] == pytest.approx((1.5 + 0.4 + 0.35) / 1.25)  # 1.80
    assert one["pays"] is True and one["speedup_head"] == pytest.approx(1.6 / 1.44)
    assert two["pays"] is False and two["speedup_head"] == pytest.approx(1.5 / 1.8)
    assert two["speedup_oracle"] == pytest.approx(2.7 / 1.8)
    table = format_table(rows)
    assert "| ckpt | 1 | 1 |" in table and "yes, 1.11x" in table and "no, 0.83x" in table
    assert verdicts(rows) == ["ckpt, batch 1: drafting pays at K=1; best K=1, "
                              "predicted 1.11x greedy's speed"]


def test_random_shapes_are_labelled_time_per_token_only():
    rows = cost_rows({"name": f"big ({RANDOM_LABEL})", "random": True}, 32, COSTS, TOKENS)
    assert all(row["random_weights"] and row["label"] == RANDOM_LABEL for row in rows)
    assert all(row["tokens_from"] == "the checkpoint's head" for row in rows)
    table = format_table(rows)
    assert "random weights: time per token only" in table
    assert "(1.60)" in table and "(yes, 1.11x)" in table  # borrowed tok/iter, in parentheses
    # Without tokens there is nothing to compare: the verdict is n/a, not a guess.
    bare = cost_rows({"name": "x", "random": True}, 1, COSTS, {})
    assert all(row["pays"] is None and row["speedup_head"] is None for row in bare)
    assert "n/a" in format_table(bare)


def test_tiny_run_on_the_shipped_model(tmp_path, capsys, onnx_cache):
    args = build_parser().parse_args([
        "--shapes", "checkpoint", "--max-k", "2", "--repeats", "2", "--budget-s", "0",
        "--sentences", "3", "--decode-repeats", "1", "--out", str(tmp_path)])
    result = run(args)
    rows = result["rows"]
    assert [(row["batch"], row["k"]) for row in rows] == [(1, 1), (1, 2)]
    for row in rows:
        assert not row["random_weights"]
        for key in ("verify_1_ms", "verify_k1_ms", "draft_k_ms", "host_greedy_ms", "host_k_ms"):
            assert row[key] > 0 and math.isfinite(row[key]), key
        expected = break_even(row["verify_1_ms"], row["verify_k1_ms"], row["draft_k_ms"],
                              row["host_greedy_ms"], row["host_k_ms"])
        assert row["break_even"] == pytest.approx(expected)
        assert 1.0 <= row["head_tokens_per_iteration"] <= row["k"] + 1
        assert 1.0 <= row["oracle_tokens_per_iteration"] <= row["k"] + 1
        assert row["speedup_head"] == pytest.approx(row["head_tokens_per_iteration"]
                                                    / row["break_even"])
    printed = capsys.readouterr().out
    assert "expected run time" in printed and "processor:" in printed and "ISA:" in printed
    assert "onnxruntime" in printed and "torch" in printed
    assert "| checkpoint (model.pt) | 1 | 2 |" in printed
    saved = json.loads((tmp_path / "cost_model.json").read_text(encoding="utf-8"))
    assert saved["rows"] == json.loads(json.dumps(rows)) and saved["machine"]["cpu"]
    assert "break-even" in (tmp_path / "cost_model.md").read_text(encoding="utf-8")
    assert (tmp_path / "cost_model.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "checkpoint", "huge"], "invalid choice: 'huge'"),
    (["--checkpoint", "/no/such/model.pt"], "/no/such/model.pt does not exist"),
    (["--max-k", "0"], "--max-k must be >= 1"),
])
def test_bad_input_is_one_line_and_nonzero(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors (OneLineParser)
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
