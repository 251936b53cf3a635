"""The quickstart report's table reads as the README's (same column names, a
unit on every ratio), its paths as a user in the checkout types them, and the
plot gives coinciding points one label."""

from __future__ import annotations

import os

from nmt_specdec.evaluation.plot import coinciding
from nmt_specdec.workflows.quickstart_report import drafting_summary, results_table, shown

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


def _specdec(k, ratio, int8=False, auto=False, beta=1, drafter="head"):
    return {"role": "specdec", "k": k, "beta": beta, "auto_k": auto, "int8": int8,
            "dtype": "float32", "speedup_vs_k0": ratio, "mean_accepted_tokens": 1.9,
            "drafter": drafter, "name": f"K={k} {'auto' if auto else ''} {beta} {int8} {drafter}"}


def test_the_first_sentence_says_what_drafting_gained_or_lost_per_precision():
    rows = [{"role": "stock", "int8": False, "dtype": "float32", "beta": None},
            _specdec(2, 1.21), _specdec(4, 1.27), _specdec(4, 1.25, auto=True),
            _specdec(2, 1.40, beta=3),  # relaxed: not what beta=1 drafting gained
            _specdec(2, 0.91, int8=True), _specdec(4, 0.88, int8=True, auto=True)]
    text = drafting_summary({"rows": rows, "machine": {"cpu": "AMD EPYC (family 25, model 1)"},
                             "greedy_mismatches": [{"decoder": rows[5]["name"]}]})
    assert text.startswith("On this machine (AMD EPYC (family 25, model 1)")
    fp32, int8 = text.split("; in int8")
    assert "fp32 drafting gained: K=4 β=1 ran **1.27x**" in fp32 and "auto` 1.25x" in fp32
    assert "output identical to its greedy" in fp32
    assert "drafting lost: K=2 β=1 ran **0.91x**" in int8 and "output differs" in int8
    assert "auto` 0.88x" in int8 and "1.40" not in text
    assert "verifier-int4" not in text
    assert drafting_summary({"rows": rows[:1], "machine": {}}) == ""


def test_each_drafter_gets_its_own_clause():
    rows = [_specdec(2, 1.17), _specdec(2, 1.20, auto=True),
            _specdec(2, 1.31, drafter="verifier-int4"),
            _specdec(10, 1.52, auto=True, drafter="verifier-int4")]
    text = drafting_summary({"rows": rows, "machine": {"cpu": "AMD EPYC"}})
    head, copy = text.split("; in fp32 drafting with `--spec-drafter verifier-int4` gained: ")
    assert "K=2 β=1 ran **1.17x**" in head and "auto` 1.20x" in head
    assert copy.startswith("K=2 β=1 ran **1.31x**") and "auto` 1.52x" in copy
