"""Dedupe/filter/split of sentence pairs, and the reusable-step stamps.

Pairs are generated here from a tiny word list, so every run sees the same
hand-made corpus.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from nmt_specdec.data import splits
from nmt_specdec.data.steps import RecipeError, StepChain

DE_WORDS = ("der", "Hund", "sieht", "eine", "Katze", "im", "Garten", "heute", "nicht")
EN_WORDS = ("the", "dog", "sees", "a", "cat", "in", "garden", "today", "not")


def _corpus(n: int = 400, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs of 1-8 words, word-by-word 'translations', some duplicated."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        idx = [rng.randrange(len(DE_WORDS)) for _ in range(rng.randint(1, 8))]
        de = " ".join(DE_WORDS[i] for i in idx)
        pairs.append((de, " ".join(EN_WORDS[i] for i in idx)))
    return pairs + pairs[:20]  # exact duplicates


CFG = splits.SplitConfig(valid_size=20, test_size=30, max_words=7, sentence_min_words=4)


def _read_all(raw_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in splits.split_paths(raw_dir)}


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    for run in ("a", "b"):
        splits.write_splits(splits.make_splits(_corpus(), CFG), tmp_path / run)
    first, second = _read_all(tmp_path / "a"), _read_all(tmp_path / "b")
    names = [f"{split}.{lang}" for split in splits.SPLIT_NAMES for lang in ("de", "en")]
    assert sorted(first) == sorted(names)
    assert first == second


def test_other_seed_gives_other_split() -> None:
    one = splits.make_splits(_corpus(), CFG)
    other_cfg = splits.SplitConfig(**{**CFG.__dict__, "seed": 2})
    other = splits.make_splits(_corpus(), other_cfg)
    assert one.test != other.test


def test_files_are_line_aligned(tmp_path: Path) -> None:
    result = splits.make_splits(_corpus(), CFG)
    splits.write_splits(result, tmp_path)
    for name, pairs in result.as_dict().items():
        de = (tmp_path / f"{name}.de").read_text(encoding="utf-8").splitlines()
        en = (tmp_path / f"{name}.en").read_text(encoding="utf-8").splitlines()
        assert list(zip(de, en)) == pairs


def test_sizes_and_no_overlap() -> None:
    result = splits.make_splits(_corpus(), CFG)
    assert (len(result.valid), len(result.test)) == (20, 30)
    key = splits.overlap_key
    for side in (0, 1):
        train = {key(p[side]) for p in result.train}
        valid = {key(p[side]) for p in result.valid}
        test = {key(p[side]) for p in result.test}
        assert not train & test, "a test text also occurs in training"
        assert not train & valid, "a valid text also occurs in training"
        assert not valid & test
    # nothing is lost silently: every deduped, length-filtered pair is accounted for
    pool = len(set(_corpus())) - result.stats["too_short"] - result.stats["too_long"]
    assert pool == (len(result.train) + len(result.valid) + len(result.test)
                    + result.stats["train_overlaps_heldout"])
    assert result.stats["duplicate_pair"] >= 20


def test_overlap_ignores_case_and_punctuation() -> None:
    key = splits.overlap_key
    assert key("Der Hund, heute!") == key("der  hund heute")
    pairs = [("Es regnet heute sehr.", "It rains a lot today."),
             ("es regnet heute sehr", "it is raining hard today"),
             ("Ein Satz mit vier Woertern", "a sentence of four words")]
    cfg = splits.SplitConfig(valid_size=0, test_size=1, sentence_min_words=4, seed=3)
    result = splits.make_splits(pairs, cfg)
    held_de = splits.overlap_key(result.test[0][0])
    assert all(splits.overlap_key(de) != held_de for de, _ in result.train)


def test_heldout_prefers_sentence_like_pairs() -> None:
    result = splits.make_splits(_corpus(), CFG)
    for de, en in result.valid + result.test:
        assert min(len(de.split()), len(en.split())) >= CFG.sentence_min_words
    assert result.stats["heldout_not_sentence_like"] == 0
    # training keeps short entries too
    assert any(len(de.split()) < 4 for de, _ in result.train)


def test_length_filter() -> None:
    stats: Counter = Counter()
    cfg = splits.SplitConfig(min_words=2, max_words=3)
    pairs = [("a", "b c"), ("a b", "c d"), ("a b c d", "e")]
    kept = splits.length_filter(pairs, cfg, stats)
    assert kept == [("a b", "c d")]
    assert (stats["too_short"], stats["too_long"]) == (2, 0)


def test_max_train_caps_training_only() -> None:
    cfg = splits.SplitConfig(**{**CFG.__dict__, "max_train": 10})
    result = splits.make_splits(_corpus(), cfg)
    assert len(result.train) == 10
    assert len(result.test) == 30
    assert result.stats["train_over_cap"] > 0


def test_too_few_pairs_is_a_user_error() -> None:
    with pytest.raises(RecipeError, match="too few"):
        cfg = splits.SplitConfig(valid_size=50, test_size=50)
        splits.make_splits(_corpus(n=30), cfg)


@pytest.mark.parametrize("kwargs", [{"valid_size": -1}, {"min_words": 0},
                                    {"min_words": 5, "max_words": 4}, {"max_train": 0}])
def test_bad_config_is_a_user_error(kwargs: dict) -> None:
    with pytest.raises(RecipeError):
        splits.SplitConfig(**kwargs).validate()


def test_step_chain_reuses_and_invalidates_later_steps(tmp_path: Path) -> None:
    calls: list[str] = []

    def step(name: str):
        def action() -> None:
            calls.append(name)
            (tmp_path / name).write_text(name)
        return action

    def run_chain(first_params: dict) -> dict:
        chain = StepChain(tmp_path)
        chain.run("one", first_params, [tmp_path / "one"], step("one"))
        chain.run("two", {}, [tmp_path / "two"], step("two"))
        return chain.status

    assert run_chain({"v": 1}) == {"one": "built", "two": "built"}
    assert run_chain({"v": 1}) == {"one": "reused", "two": "reused"}
    # a changed earlier step rebuilds every later one
    assert run_chain({"v": 2}) == {"one": "built", "two": "built"}
    # a missing output rebuilds that step
    (tmp_path / "two").unlink()
    assert run_chain({"v": 2}) == {"one": "reused", "two": "built"}
    assert calls == ["one", "two", "one", "two", "two"]


def test_step_chain_rejects_missing_outputs(tmp_path: Path) -> None:
    chain = StepChain(tmp_path)
    with pytest.raises(RuntimeError, match="did not produce"):
        chain.run("bad", {}, [tmp_path / "never"], lambda: None)
    assert not (tmp_path / ".stamps" / "bad.json").exists()


def test_step_chain_follows_output_content(tmp_path: Path) -> None:
    """A rebuilt step whose files changed invalidates later steps (same params)."""
    content = {"one": "a"}

    def run_chain() -> dict:
        chain = StepChain(tmp_path)
        chain.run("one", {}, [tmp_path / "one"],
                  lambda: (tmp_path / "one").write_text(content["one"]))
        chain.run("two", {}, [tmp_path / "two"],
                  lambda: (tmp_path / "two").write_text("two"))
        return chain.status

    assert run_chain() == {"one": "built", "two": "built"}
    # the first step is rebuilt with identical output: the second stays valid
    (tmp_path / ".stamps" / "one.json").unlink()
    assert run_chain() == {"one": "built", "two": "reused"}
    # rebuilt with different output: the second is stale and rebuilt
    (tmp_path / ".stamps" / "one.json").unlink()
    content["one"] = "b"
    assert run_chain() == {"one": "built", "two": "built"}
    assert run_chain() == {"one": "reused", "two": "reused"}
