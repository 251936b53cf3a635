"""``nmt-specdec-list-german-packages``: which packages of a ``Contents`` index
ship German catalogs, and which of them the extra source may read."""

from __future__ import annotations

import json

import pytest

from nmt_specdec.data import german_catalogs
from nmt_specdec.data.gettext_packages import PACKAGE_GROUPS, RESERVED_PACKAGES
from nmt_specdec.data.steps import RecipeError

CORPUS_PACKAGE = PACKAGE_GROUPS[0].packages[0]
RESERVED = sorted(RESERVED_PACKAGES)[0]

CONTENTS = f"""\
usr/share/locale/de/LC_MESSAGES/foo.mo                 gnome/foo-common
usr/share/locale/de/LC_MESSAGES/bar baz.mo             kde/bar-l10n,kde/bar-data
usr/share/locale/de/LC_MESSAGES/{CORPUS_PACKAGE}.mo    x11/{CORPUS_PACKAGE}
usr/share/locale/de/LC_MESSAGES/{RESERVED}.mo          admin/{RESERVED}
usr/share/locale/de/LC_MESSAGES/qux.qm                 x11/qux
usr/share/locale/fr/LC_MESSAGES/frob.mo                x11/frob
usr/share/doc/foo-common/copyright                     gnome/foo-common
"""


def test_catalog_owners_are_read_off_the_index():
    found = german_catalogs.catalog_packages(CONTENTS.splitlines(keepends=True))
    assert found == {"foo-common", "bar-l10n", "bar-data", CORPUS_PACKAGE, RESERVED}


def test_the_corpus_and_reserved_packages_are_left_out_and_the_heldout_listed():
    found = german_catalogs.catalog_packages(CONTENTS.splitlines())
    names = german_catalogs.packages_to_read(found, {"held-valid"})
    assert names == ["bar-data", "bar-l10n", "foo-common", "held-valid"]


def test_heldout_packages_come_from_a_model_settings_file(tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"gettext_heldout": {"valid": ["a"], "test": ["b", "c"]}}))
    assert german_catalogs.heldout_packages(settings) == {"a", "b", "c"}
    assert german_catalogs.heldout_packages(None) == set()
    with pytest.raises(RecipeError, match="--heldout-from"):
        german_catalogs.heldout_packages(tmp_path / "missing.json")
