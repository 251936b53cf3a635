"""Ding dictionary parser on hand-written lines in the Ding format.

Format reminder: ``DE-sub | DE-sub :: EN-sub | EN-sub``; ``;`` separates
synonyms inside a sub-entry; ``{m}``, ``[Am.]``, ``<key>``, ``(gloss)``,
``/ABBR/`` and ``~xref`` are annotations.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nmt_specdec.data import ding
from nmt_specdec.data.steps import RecipeError


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hund {m}", "Hund"),
        ("Hunde {pl}", "Hunde"),
        ("elevator [Am.]", "elevator"),
        ("Blinddarm {m} [med.] [anat.]", "Blinddarm"),
        ("Bank {f} (Sitzgelegenheit)", "Bank"),
        ("Aal {m} (Speise) [cook.]", "Aal"),
        # nested groups are peeled from the inside out
        ("Haus {n} (alt [veraltet] {n})", "Haus"),
        ("Abk. <Abkuerzung>", "Abk."),
        ("Europaeische Union /EU/", "Europaeische Union"),
        ("siehe ~Haus auch", "siehe auch"),
        # slash alternatives and units stay as written
        ("sheer/pure", "sheer/pure"),
        ("100 km/h", "100 km/h"),
        # removing a gloss before a full stop must not leave "word ."
        ("Es regnet (heute) .", "Es regnet."),
        ("  viel   Platz  ", "viel Platz"),
        ("{m} [Am.]", ""),
    ],
)
def test_clean_text(raw: str, expected: str) -> None:
    assert ding.clean_text(raw) == expected


def test_clean_text_normalises_to_nfc() -> None:
    decomposed = "Mu\u0308ller"  # u + combining diaeresis
    assert ding.clean_text(decomposed) == "M\u00fcller"


def test_semicolon_inside_gloss_is_not_an_alternative() -> None:
    # cleaning first removes "(Tier; Pflanze)" so only two real alternatives remain
    alternatives = ding.split_alternatives("Art {f} (Tier; Pflanze); Sorte {f}")
    assert alternatives == ["Art", "Sorte"]


def test_simple_line() -> None:
    assert ding.parse_line("Hund {m} :: dog") == [("Hund", "dog")]


def test_sub_entries_are_aligned_by_position() -> None:
    line = "Hund {m} | Hunde {pl} :: dog | dogs"
    assert ding.parse_line(line) == [("Hund", "dog"), ("Hunde", "dogs")]


def test_sub_entry_count_mismatch_is_skipped() -> None:
    stats: Counter = Counter()
    line = "Hund {m} | Hunde {pl} :: dog | dogs | hound"  # 2 vs 3 sub-entries
    assert ding.parse_line(line, stats) == []
    assert stats["misaligned"] == 1
    assert stats["pairs"] == 0


def test_equal_alternatives_pair_by_position() -> None:
    line = "Aufzug {m}; Fahrstuhl {m} :: elevator [Am.]; lift [Br.]"
    assert ding.parse_line(line) == [("Aufzug", "elevator"), ("Fahrstuhl", "lift")]


def test_unequal_alternatives_pair_first_only() -> None:
    stats: Counter = Counter()
    line = "Aufzug {m}; Fahrstuhl {m}; Lift {m} :: elevator [Am.]; lift [Br.]"
    assert ding.parse_line(line, stats) == [("Aufzug", "elevator")]
    assert stats["unpaired_alternatives"] == 3  # 3 + 2 alternatives, 2 used


def test_full_line_with_sentences() -> None:
    line = ("Er hat Fieber. {f} | Sie hat Kopfschmerzen [med.] :: "
            "He has a fever. [Am.] | She has a headache.")
    assert ding.parse_line(line) == [
        ("Er hat Fieber.", "He has a fever."),
        ("Sie hat Kopfschmerzen", "She has a headache."),
    ]


@pytest.mark.parametrize(
    "line, reason",
    [
        ("# Version :: devel", "comment_or_blank"),
        ("   ", "comment_or_blank"),
        ("kein Trenner hier", "malformed"),
        ("a :: b :: c", "malformed"),
        ("Abbau… {m} :: reduction", "fragment"),
        ("Abbau... {m} :: reduction", "fragment"),
        ("{m} :: dog", "empty_after_cleaning"),
        ("Hund (offen :: dog", "unbalanced_brackets"),
    ],
)
def test_rejected_lines_are_counted(line: str, reason: str) -> None:
    stats: Counter = Counter()
    assert ding.parse_line(line, stats) == []
    assert stats[reason] == 1
    assert stats["lines"] == 1


def test_rejected_german_side_counted_once() -> None:
    stats: Counter = Counter()
    # both sides are empty, but the pair is rejected (and counted) only once
    assert ding.parse_line("{m} :: [Am.]", stats) == []
    assert stats["empty_after_cleaning"] == 1


def test_one_bad_sub_entry_keeps_the_others() -> None:
    line = "Hund {m} | {pl} :: dog | dogs"
    assert ding.parse_line(line) == [("Hund", "dog")]


def test_read_ding_and_header(tmp_path: Path) -> None:
    path = tmp_path / "de-en"
    path.write_text(
        "# Version :: devel 2024-01-01\n"
        "# Copyright :: (c) Someone\n"
        "# License :: GPL Version 2 or later\n"
        "Hund {m} | Hunde {pl} :: dog | dogs\n"
        "Katze {f} :: cat\n"
        "Maus {f} | Maeuse {pl} :: mouse\n",
        encoding="utf-8",
    )
    stats: Counter = Counter()
    pairs = ding.read_ding(path, stats)
    assert pairs == [("Hund", "dog"), ("Hunde", "dogs"), ("Katze", "cat")]
    assert stats["lines"] == 6
    assert stats["comment_or_blank"] == 3
    assert stats["misaligned"] == 1
    assert stats["pairs"] == 3
    header = ding.read_header(path)
    assert header["Version"] == "devel 2024-01-01"
    assert header["License"] == "GPL Version 2 or later"
    assert "Hund {m} | Hunde {pl}" not in header


def test_locate_explicit_file_missing_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="--ding-file"):
        ding.locate_ding(tmp_path / "nope", tmp_path / "cache")


def test_locate_order(tmp_path: Path) -> None:
    explicit = tmp_path / "mine"
    explicit.write_text("a :: b\n", encoding="utf-8")
    system = tmp_path / "system"
    cache = tmp_path / "cache"
    fetched: list[Path] = []

    def fake_fetch(cache_dir: Path) -> Path:
        fetched.append(cache_dir)
        target = cache_dir / "x" / "usr/share/trans/de-en"
        target.parent.mkdir(parents=True)
        target.write_text("c :: d\n", encoding="utf-8")
        return target

    assert ding.locate_ding(explicit, cache, system, fake_fetch) == explicit
    # nothing installed, nothing cached: download once, then reuse the cache
    first = ding.locate_ding(None, cache, system, fake_fetch)
    second = ding.locate_ding(None, cache, system, fake_fetch)
    assert first == second and first.is_file()
    assert fetched == [cache]
    # an installed system copy wins over the cache
    system.write_text("e :: f\n", encoding="utf-8")
    assert ding.locate_ding(None, cache, system, fake_fetch) == system


def _write_tiny_ding(path: Path, n: int = 120, seed: int = 0) -> None:
    """A generated dictionary: word entries plus sentence-like example lines."""
    import random

    words = [("Hund", "dog"), ("Katze", "cat"), ("Haus", "house"), ("Baum", "tree"),
             ("sieht", "sees"), ("rot", "red"), ("gross", "big"), ("klein", "small")]
    rng = random.Random(seed)
    lines = ["# Version :: test 2024-01-01", "# License :: GPL Version 2 or later"]
    for de, en in words:
        lines.append(f"{de} {{m}} | {de}e {{pl}} :: {en} [Am.] | {en}s")
    for _ in range(n):
        idx = [rng.randrange(len(words)) for _ in range(rng.randint(4, 7))]
        lines.append(" ".join(words[i][0] for i in idx) + " [ugs.] :: "
                     + " ".join(words[i][1] for i in idx))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.slow
def test_recipe_end_to_end_and_reuse(tmp_path: Path) -> None:
    from nmt_specdec.data import ding_recipe

    corpus = tmp_path / "de-en"
    _write_tiny_ding(corpus)
    cfg = ding_recipe.DingConfig(out=tmp_path / "out", ding_file=corpus, vocab_size=40,
                                 valid_size=5, test_size=5, workers=1)
    assert set(ding_recipe.run(cfg).values()) == {"built"}
    raw = cfg.out / "raw"
    test_de = (raw / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(test_de) == 5 and all(len(s.split()) >= 4 for s in test_de)
    train_en = (raw / "train.en").read_text(encoding="utf-8").splitlines()
    assert "dogs" in train_en and not any("[" in s for s in train_en)
    for name in ("dict.de.txt", "train.de-en.de.bin", "test.de-en.en.idx"):
        assert (cfg.out / "bin" / name).is_file(), name
    card = (cfg.out / "DATA_CARD.md").read_text(encoding="utf-8")
    assert "GPL-2.0-or-later" in card and "test 2024-01-01" in card
    assert set(ding_recipe.run(cfg).values()) == {"reused"}


@pytest.mark.slow
def test_recipe_with_an_existing_models_vocabulary(tmp_path: Path, capsys) -> None:
    """--model-dir encodes with the given SentencePiece model and binarizes with
    the given dictionary (no new vocabulary); an edited dictionary rebuilds."""
    from nmt_specdec.data import ding_recipe

    corpus = tmp_path / "de-en"
    _write_tiny_ding(corpus)
    first = ding_recipe.DingConfig(out=tmp_path / "first", ding_file=corpus, vocab_size=40,
                                   valid_size=5, test_size=5, workers=1)
    ding_recipe.run(first)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "spm.model").write_bytes((first.out / "spm.model").read_bytes())
    dictionary = (first.out / "bin" / "dict.de.txt").read_text(encoding="utf-8")
    # A symbol the new data never produces must survive: the dictionary is taken, not rebuilt.
    dictionary += "zzzunseen 1\n"
    for lang in ("de", "en"):
        (model_dir / f"dict.{lang}.txt").write_text(dictionary, encoding="utf-8")
    cfg = ding_recipe.DingConfig(out=tmp_path / "given", ding_file=corpus, valid_size=5,
                                 test_size=5, workers=1, seed=2, model_dir=model_dir)
    ding_recipe.run(cfg)
    for lang in ("de", "en"):
        assert (cfg.out / "bin" / f"dict.{lang}.txt").read_text(encoding="utf-8") == dictionary
    assert (cfg.out / "spm.model").read_bytes() == (model_dir / "spm.model").read_bytes()
    assert "Vocabulary of an existing model" in (cfg.out / "DATA_CARD.md").read_text()
    assert set(ding_recipe.run(cfg).values()) == {"reused"}
    for lang in ("de", "en"):
        (model_dir / f"dict.{lang}.txt").write_text(dictionary + "zzzother 1\n")
    status = ding_recipe.run(cfg)
    assert status["binarize"] == "built" and status["raw"] == "reused"
    assert ding_recipe.main(["--out", str(tmp_path / "bad"), "--ding-file", str(corpus),
                             "--spm-model", str(model_dir / "spm.model")]) == 2
    assert ding_recipe.main(["--out", str(tmp_path / "bad"), "--ding-file", str(corpus),
                             "--model-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith("error: --spm-model and --dict go together")
    assert err[-1].startswith("error: ") and "not found" in err[-1]
