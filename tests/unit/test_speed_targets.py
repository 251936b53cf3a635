"""``benchmarks/speed_targets.py``: what a target ratio over greedy needs, from
a profiled evaluation's rows."""

import json

import pytest

from benchmarks.speed_targets import main, target_rows


def _row(role, k, int8, tokens_per_iter, encoder, draft, verify, host):
    total = encoder + draft + verify + host
    return {"name": f"{role} K={k}", "role": role, "k": k, "int8": int8, "batch_size": 1,
            "target_tokens": 1000, "mean_accepted_tokens": tokens_per_iter,
            "profile": {"encoder_s": encoder, "draft_s": draft, "verify_s": verify,
                        "bookkeeping_s": host, "total_s": total}}


ROWS = [_row("engine greedy", 0, False, 1.0, 2.0, 0.0, 7.5, 0.5),
        _row("specdec", 2, False, 2.0, 2.0, 1.0, 5.0, 0.5),
        _row("engine greedy", 0, True, 1.0, 1.0, 0.0, 3.0, 0.2),
        _row("stock", None, False, None, 0, 0, 0, 0) | {"profile": None}]


def test_needed_tokens_and_budget_follow_from_the_split():
    (row,) = target_rows(ROWS, target=1.25, target_int8=1.15)
    # 500 iterations of 13 ms; the loop may take 10 / 1.25 - 2 = 6 s.
    assert row["iteration_ms"] == pytest.approx(13.0)
    assert row["greedy_step_ms"] == pytest.approx(8.0)
    assert row["needed_tok_per_iter"] == pytest.approx(1000 / (6.0 / 0.013))
    assert row["draft_host_budget_ms"] == pytest.approx(6000 / 500 - 10.0)
    assert row["measured_ratio"] == pytest.approx(10.0 / 8.5)


def test_a_row_is_compared_with_the_greedy_of_its_precision():
    int8 = _row("specdec", 3, True, 2.5, 1.0, 0.5, 2.0, 0.1)
    (row,) = target_rows(ROWS[2:] + [int8], target=2.0, target_int8=1.1)
    assert row["ratio"] == 1.1
    assert row["greedy_step_ms"] == pytest.approx(3.2)


def test_results_without_a_profile_are_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rows": [dict(r, profile=None) for r in ROWS[:2]]}))
    assert main([str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main([str(tmp_path / "missing.json")]) == 2
