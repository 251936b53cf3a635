"""WMT14 recipe end to end on tiny archives that this test writes itself.

The archives have the original names and inner file names (plain text for
training and newstest2013, SGML for newstest2014); their lines are generated
from a small word list. No network: the recipe runs with ``offline=True``.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from nmt_specdec.data import wmt14
from nmt_specdec.data.steps import RecipeError

WORDS = [("haus", "house"), ("katze", "cat"), ("hund", "dog"), ("baum", "tree"),
         ("rot", "red"), ("gross", "big"), ("klein", "small"), ("und", "and"),
         ("der", "the"), ("sieht", "sees"), ("wasser", "water"), ("stadt", "city")]


def _sentence(rng: random.Random, n: int) -> tuple[str, str]:
    idx = [rng.randrange(len(WORDS)) for _ in range(n)]
    return " ".join(WORDS[i][0] for i in idx), " ".join(WORDS[i][1] for i in idx)


def _add(tar: tarfile.TarFile, name: str, lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _archive(path: Path, members: dict[str, list[str]]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in members.items():
            _add(tar, name, lines)


def _sgm(lines: list[str], lang: str) -> list[str]:
    body = [f'<seg id="{i + 1}"> {line} </seg>' for i, line in enumerate(lines)]
    return [f'<srcset setid="newstest2014" srclang="{lang}">', '<doc docid="d1">',
            "<p>", *body, "</p>", "</doc>", "</srcset>"]


def make_archives(raw: Path, seed: int = 0) -> dict[str, int]:
    """Write the five archives; returns the expected number of kept train pairs."""
    rng = random.Random(seed)
    raw.mkdir(parents=True)
    kept = 0
    for archive, stem in wmt14.TRAIN_CORPORA:
        pairs = [_sentence(rng, rng.randint(1, 12)) for _ in range(60)]
        kept += len(pairs)
        # removed by cleaning: too long, bad length ratio, empty side
        pairs += [_sentence(rng, 31), ("haus haus haus haus haus haus", "house"),
                  ("", "x")]
        # stray \r and U+2028 inside a line must not split it
        pairs.append(("der hund\rsieht", "the dog\u2028sees"))
        kept += 1
        _archive(raw / archive, {f"{stem}.de": [d for d, _ in pairs],
                                 f"{stem}.en": [e for _, e in pairs]})
    valid = [_sentence(rng, rng.randint(2, 8)) for _ in range(25)]
    _archive(raw / "dev.tgz", {"dev/newstest2013.de": [d for d, _ in valid],
                               "dev/newstest2013.en": [e for _, e in valid]})
    test = [_sentence(rng, rng.randint(2, 8)) for _ in range(30)]
    _archive(raw / "test-full.tgz", {
        "test-full/newstest2014-deen-src.de.sgm": _sgm([d for d, _ in test], "de"),
        "test-full/newstest2014-deen-ref.en.sgm": _sgm([e for _, e in test], "en")})
    return {"train": kept, "valid": 25, "test": 30}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("wmt14")
    expected = make_archives(root / "orig")
    cfg = wmt14.Wmt14Config(out=root / "out", raw_dir=root / "orig", offline=True,
                            vocab_size=48, max_words=30, workers=1)
    status = wmt14.run(cfg)
    return cfg, expected, status


def test_builds_every_step(recipe) -> None:
    cfg, expected, status = recipe
    assert status == {"raw": "built", "spm": "built", "encode": "built",
                      "binarize": "built"}
    for split, n in expected.items():
        de = _lines(cfg.out / "raw" / f"{split}.de")
        en = _lines(cfg.out / "raw" / f"{split}.en")
        assert len(de) == len(en) == n, split
        pieces = _lines(cfg.out / "spm" / f"{split}.en")
        assert len(pieces) == n and all(p.startswith("\u2581") for p in pieces)
    for path in wmt14.spm.binarized_outputs(cfg.out / "bin"):
        assert path.is_file() and path.stat().st_size > 0, path
    # one joined dictionary for both languages
    dicts = [(cfg.out / f"bin/dict.{lang}.txt").read_bytes() for lang in ("de", "en")]
    assert dicts[0] == dicts[1]
    assert "WMT14 De-En" in (cfg.out / "DATA_CARD.md").read_text(encoding="utf-8")


def test_cleaning(recipe) -> None:
    cfg, _, _ = recipe
    de = _lines(cfg.out / "raw/train.de")
    en = _lines(cfg.out / "raw/train.en")
    assert all(1 <= len(x.split()) <= 30 for x in de + en)
    assert "haus haus haus haus haus haus" not in de
    assert de.count("der hund sieht") >= 3 and en.count("the dog sees") >= 3
    for d, e in zip(de, en):  # the word-by-word toy translation stays aligned
        assert len(d.split()) == len(e.split())
    card = (cfg.out / "DATA_CARD.md").read_text(encoding="utf-8")
    assert "| too_long | 3 |" in card and "| bad_ratio | 3 |" in card
    assert "| empty | 3 |" in card


def test_sgm_test_set_is_plain_text(recipe) -> None:
    cfg, _, _ = recipe
    test = _lines(cfg.out / "raw/test.de") + _lines(cfg.out / "raw/test.en")
    assert not any("<" in line or line != line.strip() for line in test)


def test_rerun_reuses_everything(recipe) -> None:
    cfg, _, _ = recipe
    assert set(wmt14.run(cfg).values()) == {"reused"}


def test_offline_missing_archive(tmp_path: Path) -> None:
    (tmp_path / "orig").mkdir()
    with pytest.raises(RecipeError, match="--offline: missing .*dev.tgz"):
        wmt14.run(wmt14.Wmt14Config(out=tmp_path / "out", raw_dir=tmp_path / "orig",
                                    offline=True))


def test_corrupt_archive_is_a_user_error(tmp_path: Path) -> None:
    raw = tmp_path / "orig"
    raw.mkdir()
    for name in wmt14.ARCHIVES:
        (raw / name).write_bytes(b"not a tarball")
    with pytest.raises(RecipeError, match="cannot read"):
        wmt14.run(wmt14.Wmt14Config(out=tmp_path / "out", raw_dir=raw, offline=True))


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    script = str(Path(sys.executable).with_name("nmt-specdec-prepare-wmt14"))  # pip's console script
    proc = subprocess.run([script, "--out", str(tmp_path / "o"),
                           "--raw-dir", str(tmp_path / "nope")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --raw-dir {tmp_path / 'nope'} is not a directory"]
