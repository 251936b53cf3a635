"""``benchmarks/head_acceptance.py``'s pieces that need no model: the plot and the
one-line error (the decoding itself is run by the real-model tests)."""

from pathlib import Path

from nmt_specdec.workflows.head_report import format_report, main, plot_acceptance


def _report(checkpoint: str, steps: int, slots):
    return {"split": "valid", "sentences": 3, "refine_steps": steps, "checkpoint": checkpoint,
            "rows": [{"k": 0, "tokens_per_iteration": 1.0, "oracle_tokens_per_iteration": 1.0,
                      "slot_acceptance": [], "same_as_greedy": 3},
                     {"k": len(slots), "tokens_per_iteration": 1.0 + sum(slots),
                      "oracle_tokens_per_iteration": 2.5, "slot_acceptance": slots,
                      "same_as_greedy": 3}]}


def test_plot_draws_one_line_per_report(tmp_path: Path):
    reports = [_report("work/a/model.pt", 0, [0.6, 0.2]), _report("work/b/model.pt", 1,
                                                                    [0.7, 0.5])]
    plot_acceptance(reports, tmp_path / "slots.png")
    assert (tmp_path / "slots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = format_report(reports[1])
    assert "refinement run 1 times" in table and "| 2 | 2.20 | 2.50 | 3 | 0.70 0.50 |" in table


def test_missing_checkpoint_is_one_line(tmp_path: Path, capsys):
    code = main(["--checkpoint", str(tmp_path / "none.pt"), "--data", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "does not exist" in err and "\n" not in err
