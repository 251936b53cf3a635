"""The quickstart report's table reads as the README's (same column names, a
unit on every ratio), its paths as a user in the checkout types them, and the
plot gives coinciding points one label."""

from __future__ import annotations

import os

from nmt_specdec.evaluation.plot import coinciding
from nmt_specdec.workflows.quickstart_report import results_table, shown

ROW = {"name": "engine greedy", "bleu": 31.28, "chrf": 51.02, "wall_s_median": 2.65,
       "sentences_per_s": 75.5, "speedup": 4.38, "speedup_vs_k0": 1.0,
       "mean_accepted_tokens": 1.0, "differs_from_greedy": 0}
SIGNATURES = {"signatures": {"bleu": "b", "chrf": "c"}}


def test_the_table_names_its_columns_as_the_readme():
    lines = results_table({"rows": [ROW, {**ROW, "name": "stock greedy", "speedup_vs_k0": None,
                                          "mean_accepted_tokens": None}], **SIGNATURES})
    assert "| vs stock greedy | vs engine greedy |" in lines[0]
    assert "| 4.38x | 1.00x |" in lines[2]
    assert "| 4.38x | n/a | n/a |" in lines[3]


def test_paths_inside_the_checkout_are_shown_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / "work" / "test.de") == os.path.join("work", "test.de")
    assert shown("/elsewhere/test.de") == "/elsewhere/test.de"


def test_coinciding_points_share_a_label():
    points = [(1.0, 31.28), (3.73, 31.28), (4.38, 31.28), (3.75, 31.28), (3.54, 28.79)]
    assert coinciding(points) == [[0], [1, 3], [2], [4]]
    assert coinciding([(1.0, 30.0)]) == [[0]]
