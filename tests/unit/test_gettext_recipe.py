"""The gettext recipe: by-package split, reserved packages, .deb/.mo reading.

Catalogs are written here from made-up strings (tests/helpers/mo_writer); the
.deb test builds a package with dpkg-deb and is skipped where that is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nmt_specdec.data import gettext_recipe, gettext_sources, gettext_split
from nmt_specdec.data.gettext_packages import RESERVED_PACKAGES, declared_packages
from nmt_specdec.data.steps import RecipeError
from tests.helpers.mo_writer import write_mo

COLOURS = ["red", "blue", "green", "black", "white", "yellow", "brown", "grey"]
FARBEN = ["rot", "blau", "grün", "schwarz", "weiß", "gelb", "braun", "grau"]
THINGS = [("door", "Tür"), ("lamp", "Lampe"), ("chair", "Stuhl"),
          ("table", "Tisch"), ("cup", "Tasse"), ("bag", "Tasche"),
          ("coat", "Mantel"), ("key", "Schlüssel")]


def _entries(package: int, n: int) -> list[tuple[str, str]]:
    """n distinct sentence pairs, each package with its own sentence frame."""
    out = []
    for i in range(n):
        colour, farbe = COLOURS[i % 8], FARBEN[i % 8]
        thing, ding = THINGS[(i // 8) % 8]
        out.append((f"Paint the {thing} {colour} in room {package}-{i}",
                    f"Streiche {ding} {farbe} in Raum {package}-{i}"))
    return out


def _mo_dirs(root: Path, sizes: dict[str, int]) -> Path:
    """One directory of .mo files per package under ``root``."""
    for index, (name, size) in enumerate(sizes.items()):
        entries = _entries(index, size) + [("Cancel", "Abbrechen"),
                                           ("_Quit", "_Beenden")]
        locale = root / name / "usr/share/locale"
        write_mo(locale / "de/LC_MESSAGES" / f"{name}.mo", entries)
        # Not German: must be ignored.
        write_mo(locale / "fr/LC_MESSAGES" / f"{name}.mo", [("Cancel", "Annuler")])
    return root


def test_declared_list_has_no_reserved_package() -> None:
    names = declared_packages()
    assert len(names) == len(set(names)) > 0
    assert not set(names) & RESERVED_PACKAGES


def test_package_order_is_stable_when_packages_are_added() -> None:
    names = [f"pkg{i}" for i in range(30)]
    before = gettext_split.package_order(names, seed=1)
    after = gettext_split.package_order(names + ["newcomer"], seed=1)
    assert [n for n in after if n != "newcomer"] == before
    assert gettext_split.package_order(names, seed=2) != before


def test_assign_splits_whole_packages_within_size() -> None:
    sizes = {f"pkg{i}": 3 + 2 * i for i in range(40)}
    first = gettext_split.assign_splits(sizes, valid_size=100, test_size=100, seed=3)
    assert first == gettext_split.assign_splits(sizes, 100, 100, seed=3)
    for split in ("valid", "test"):
        members = [n for n, s in first.items() if s == split]
        assert len(members) >= 2
        assert all(sizes[n] <= 25 for n in members)  # a quarter of 100
        assert 0 < sum(sizes[n] for n in members) <= 100
    assert set(first) == set(sizes)


def test_assign_splits_needs_small_packages() -> None:
    with pytest.raises(RecipeError, match="--valid-size"):
        gettext_split.assign_splits({"big": 500, "bigger": 900}, 100, 100, seed=1)


def test_split_by_package_has_no_overlap() -> None:
    shared = ("Abbrechen", "Cancel")
    package_pairs = {
        "a": [("Rot", "Red"), shared],
        "b": [("Blau", "Blue"), shared],
        "c": [("Grün", "Green"), ("abbrechen!", "Stop")],  # same text as shared
        "d": [("Gelb", "Yellow"), ("Gelb", "Yellow")],
    }
    assignment = {"a": "valid", "b": "test", "c": "train", "d": "train"}
    result = gettext_split.split_by_package(package_pairs, assignment, seed=1)
    assert sorted(result.valid) == sorted([("Rot", "Red"), shared])
    assert result.test == [("Blau", "Blue")]
    assert sorted(result.train) == [("Gelb", "Yellow"), ("Grün", "Green")]
    assert result.stats["test_overlaps_valid"] == 1
    assert result.stats["train_overlaps_heldout"] == 1
    assert result.stats["duplicate_pair"] == 1


@pytest.mark.parametrize("text, expected", [
    ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\n"
     "Files: debian/*\nLicense: GPL-3+\n\nFiles: *\nCopyright: 2020 A\n"
     "License: LGPL-2.1+\n", "LGPL-2.1+"),
    ("Files: src/*\nLicense: MIT\n", "MIT"),
    ("This package is under the GNU General Public License.\n",
     "GPL (free-form copyright file)"),
    ("Under the GNU General Public License; icons under the GNU Lesser General "
     "Public License.", "GPL (free-form copyright file)"),  # first named wins
    (None, "unknown (no copyright file in the package)"),
])
def test_licence_of(text: str | None, expected: str) -> None:
    assert gettext_sources.licence_of(text) == expected


def test_reserved_packages_are_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(RecipeError, match="reserved for evaluation: coreutils"):
        gettext_recipe.run(gettext_recipe.GettextConfig(
            out=tmp_path / "out", packages=["gimp-data", "coreutils"]))
    deb_dir = _mo_dirs(tmp_path / "debs", {"sed": 3})
    code = gettext_recipe.main(["--out", str(tmp_path / "o2"), "--deb-dir",
                                str(deb_dir), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "reserved" in err and "sed" in err


def test_reserved_catalog_inside_another_package_is_left_out(tmp_path: Path) -> None:
    write_mo(tmp_path / "src/toolbox/de/LC_MESSAGES/coreutils.mo", [("Red", "Rot")])
    write_mo(tmp_path / "src/toolbox/de/LC_MESSAGES/toolbox.mo", [("Blue", "Blau")])
    info = gettext_sources.store_mo_dir(tmp_path / "src/toolbox", tmp_path / "cat")
    assert list(info.catalogs) == ["toolbox.mo"]
    assert info.refused_catalogs == ["de/LC_MESSAGES/coreutils.mo"]


def test_bad_deb_dir_is_one_line_error(tmp_path: Path, capsys) -> None:
    code = gettext_recipe.main(["--out", str(tmp_path / "o"), "--deb-dir",
                                str(tmp_path / "missing")])
    assert code == 2 and capsys.readouterr().err.startswith("error: --deb-dir")


def test_collect_and_split_from_mo_dirs(tmp_path: Path) -> None:
    sizes = {f"prog{i}": 6 + 3 * i for i in range(12)}
    cfg = gettext_recipe.GettextConfig(out=tmp_path / "out",
                                       deb_dir=_mo_dirs(tmp_path / "debs", sizes),
                                       valid_size=80, test_size=80)
    gettext_recipe.collect(cfg)
    gettext_recipe.build_raw(cfg)
    raw = cfg.out / "raw"
    lines = {f"{s}.{l}": (raw / f"{s}.{l}").read_text("utf-8").splitlines()
             for s in ("train", "valid", "test") for l in ("de", "en")}
    for split in ("train", "valid", "test"):
        assert len(lines[f"{split}.de"]) == len(lines[f"{split}.en"]) > 0
    # Each package numbers its rooms "<package index>-<i>": a package's
    # sentences must all land in one split.
    owners: dict[str, set[str]] = {}
    for split in ("train", "valid", "test"):
        for en in lines[f"{split}.en"]:
            if en.startswith("Paint"):
                owners.setdefault(en.split()[-1].split("-")[0], set()).add(split)
    assert len(owners) == 12 and all(len(s) == 1 for s in owners.values())
    all_en = sum((lines[f"{s}.en"] for s in ("train", "valid", "test")), [])
    assert all_en.count("Cancel") == 1 and "Quit" in all_en  # dedupe, accelerator
    assert "Annuler" not in "".join(sum(lines.values(), []))
    card = (cfg.out / "DATA_CARD.md").read_text("utf-8")
    assert "| prog0 | unknown |" in card and "prog0 (" in card


def _build_deb(root: Path, name: str, out_dir: Path) -> None:
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.2-3\nArchitecture: all\n"
        "Maintainer: Test <test@example.org>\nDescription: test package\n")
    out_dir.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root),
                    str(out_dir / f"{name}_1.2-3_all.deb")],
                   check=True, capture_output=True)


def test_read_deb_built_with_dpkg_deb(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    root = tmp_path / "pkg"
    write_mo(root / "usr/share/locale/de/LC_MESSAGES/paint.mo",
             [("Paint the door", "Streiche die Tür")])
    write_mo(root / "usr/lib/paint/program/resource/de/LC_MESSAGES/extra.mo",
             [("Dry the brush", "Trockne den Pinsel")])
    write_mo(root / "usr/share/locale/de_CH/LC_MESSAGES/paint.mo", [("x", "y")])
    doc = root / "usr/share/doc/paint-data"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("Files: *\nLicense: GPL-2+\n")
    _build_deb(root, "paint-data", tmp_path / "debs")
    # A sibling package whose doc directory links to paint-data's.
    other = tmp_path / "other"
    write_mo(other / "usr/share/locale/de/LC_MESSAGES/brush.mo", [("Wet", "Nass")])
    (other / "usr/share/doc").mkdir(parents=True)
    (other / "usr/share/doc/paint-l10n").symlink_to("paint-data")
    _build_deb(other, "paint-l10n", tmp_path / "debs")

    names = gettext_sources.collect_from_dir(tmp_path / "debs", tmp_path / "cat")
    info = gettext_sources.load_info(tmp_path / "cat" / "paint-data")
    assert names == ["paint-data", "paint-l10n"] and info is not None
    assert (info.version, info.licence) == ("1.2-3", "GPL-2+")
    assert sorted(info.catalogs.values()) == [
        "usr/lib/paint/program/resource/de/LC_MESSAGES/extra.mo",
        "usr/share/locale/de/LC_MESSAGES/paint.mo"]
    linked = gettext_sources.load_info(tmp_path / "cat" / "paint-l10n")
    assert linked is not None and linked.licence == "see package paint-data"


@pytest.mark.slow
def test_recipe_end_to_end_and_reuse(tmp_path: Path) -> None:
    sizes = {f"prog{i}": 10 + 4 * i for i in range(10)}
    cfg = gettext_recipe.GettextConfig(out=tmp_path / "out",
                                       deb_dir=_mo_dirs(tmp_path / "debs", sizes),
                                       valid_size=80, test_size=80, vocab_size=60,
                                       workers=1)
    assert set(gettext_recipe.run(cfg).values()) == {"built"}
    for name in ("dict.de.txt", "train.de-en.de.bin", "test.de-en.en.idx"):
        assert (cfg.out / "bin" / name).is_file(), name
    index = json.loads((cfg.out / "catalogs/index.json").read_text())
    assert index["packages"] == sorted(sizes)
    assert set(gettext_recipe.run(cfg).values()) == {"reused"}


def test_heldout_packages_alone_rebuild_the_same_valid_and_test(tmp_path: Path) -> None:
    """The quickstart fetches only a model's held-out packages: its valid and
    test splits must equal the full recipe's, line for line."""
    sizes = {f"prog{i}": 10 + 4 * i for i in range(10)}
    full = gettext_recipe.GettextConfig(out=tmp_path / "full",
                                        deb_dir=_mo_dirs(tmp_path / "debs", sizes),
                                        valid_size=80, test_size=80, workers=1)
    gettext_recipe.run(full, raw_only=True)
    card = (full.out / "DATA_CARD.md").read_text(encoding="utf-8")
    heldout = {split: [name for name in sizes if f"| {name} |" in card
                       and f"| {split} |" in card.split(f"| {name} |")[1].split("\n")[0]]
               for split in ("valid", "test")}
    assert heldout["valid"] and heldout["test"]
    kept = {name: sizes[name] for name in heldout["valid"] + heldout["test"]}
    alone = gettext_recipe.GettextConfig(out=tmp_path / "alone",
                                         deb_dir=_mo_dirs(tmp_path / "debs2", kept),
                                         heldout=heldout, workers=1)
    gettext_recipe.run(alone, raw_only=True)
    for name in ("valid.de", "valid.en", "test.de", "test.en"):
        assert (alone.out / "raw" / name).read_bytes() == (full.out / "raw" / name).read_bytes()
    assert not (alone.out / "bin").exists()
    missing = gettext_recipe.GettextConfig(out=tmp_path / "missing",
                                           deb_dir=_mo_dirs(tmp_path / "debs3", {"prog0": 10}),
                                           heldout={"test": ["prog9"]}, workers=1)
    with pytest.raises(RecipeError, match="prog9"):
        gettext_recipe.run(missing, raw_only=True)
