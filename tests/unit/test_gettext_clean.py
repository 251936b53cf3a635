"""Cleaning rules that turn catalog entries into (German, English) pairs.

Strings are made up for the test; none comes from a real catalog.
"""

from __future__ import annotations

from collections import Counter

import pytest

from nmt_specdec.data import gettext_clean as gc
from nmt_specdec.data.mo import Message

CFG = gc.CleanConfig(max_words=8)


def clean(msgid: str, msgstr: str, context: str | None = None) -> tuple:
    """(pair or None, the rejection reason or "pairs")."""
    stats: Counter = Counter()
    pair = gc.clean_message(Message(context, msgid, msgstr, False), CFG, stats)
    reasons = [k for k in stats if k != "messages"]
    assert len(reasons) == 1 and stats["messages"] == 1
    return pair, reasons[0]


@pytest.mark.parametrize("msgid, msgstr, expected", [
    # Accelerators of GTK, Qt/KDE and LibreOffice, on both sides.
    ("_Open the box", "Die Kiste ö_ffnen", ("Die Kiste öffnen", "Open the box")),
    ("E&xit the hall", "Den Saal &verlassen",
     ("Den Saal verlassen", "Exit the hall")),
    ("~Paint the fence", "Den Zaun ~streichen",
     ("Den Zaun streichen", "Paint the fence")),
    # Marker on one side only: the same rule still removes it.
    ("_Feed the cat", "Die Katze füttern", ("Die Katze füttern", "Feed the cat")),
    # An identifier copied into the translation is not an accelerator.
    ("Set max_size first", "Zuerst max_size setzen",
     ("Zuerst max_size setzen", "Set max_size first")),
    # Entities, doubled markers and markers before non-letters stay.
    ("Salt &amp; pepper", "Salz &amp; Pfeffer",
     ("Salz &amp; Pfeffer", "Salt &amp; pepper")),
    ("Save to ~/notes", "In ~/notes speichern",
     ("In ~/notes speichern", "Save to ~/notes")),
    # Placeholders and inline markup are kept as written, reordering allowed.
    ("Copy %s to %s", "%2$s nach %1$s kopieren",
     ("%2$s nach %1$s kopieren", "Copy %s to %s")),
    ("Hello {name}", "Hallo {name}", ("Hallo {name}", "Hello {name}")),
    ("<b>Warm</b> soup", "<b>Warme</b> Suppe",
     ("<b>Warme</b> Suppe", "<b>Warm</b> soup")),
    # Freeciv's "?qualifier:" disambiguation is not part of the text.
    ("?female:Chief Baker %s", "Oberbäckerin %s",
     ("Oberbäckerin %s", "Chief Baker %s")),
    ("Why? Because:now", "Warum? Weil:jetzt",
     ("Warum? Weil:jetzt", "Why? Because:now")),
    # Whitespace runs (help texts) become single spaces.
    ("Line one\n  line two", "Zeile eins\n\tZeile zwei",
     ("Zeile eins Zeile zwei", "Line one line two")),
])
def test_kept_pairs(msgid: str, msgstr: str, expected: tuple) -> None:
    assert clean(msgid, msgstr) == (expected, "pairs")


@pytest.mark.parametrize("msgid, msgstr, context, reason", [
    ("Blue door", "", None, "untranslated"),
    ("Blue door", "   ", None, "untranslated"),
    ("translator-credits", "Erika Muster", None, "translator_credits"),
    ("Your names", "Erika Muster", "NAME OF TRANSLATORS", "translator_credits"),
    ("%s: %d", "%s: %d", None, "format_or_markup_only"),
    ("<br/>", "<br/>", None, "format_or_markup_only"),
    ("%s", "Datei %s", None, "format_or_markup_only"),
    ("Copy %s files", "%d Dateien kopieren", None, "placeholder_mismatch"),
    ("Open {0}", "Öffnen", None, "placeholder_mismatch"),
    ("one two three four five six seven eight nine", "eins zwei", None, "too_long"),
    ("Stop", "Bitte halten Sie den Vorgang jetzt sofort an", None, "length_ratio"),
    ("Radio", "Radio", None, "same_text"),
    ("_Radio", "_Radio", None, "same_text"),  # equal once accelerators are gone
])
def test_rejected_entries(msgid: str, msgstr: str, context: str | None,
                          reason: str) -> None:
    assert clean(msgid, msgstr, context) == (None, reason)


def test_placeholders_ignore_positions_and_percent_signs() -> None:
    assert gc.placeholders("%1$s of %2$d") == gc.placeholders("%d von %s")
    # "100% sure" has no placeholder: "% s" with a space is not one.
    assert not gc.placeholders("100% sure") and not gc.placeholders("100 % sicher")
    assert gc.placeholders("%PRODUCTNAME opens $(ARG1)") == \
        Counter({"%PRODUCTNAME": 1, "$(ARG1)": 1})


def test_clean_catalog_counts_every_entry() -> None:
    messages = (Message(None, "Red wine", "Rotwein", False),
                Message(None, "Red wine", "Rotwein", False),  # duplicates kept here
                Message(None, "Empty", "", False),
                Message("ctx", "%d apple", "%d Apfel", True))
    stats: Counter = Counter()
    pairs = gc.clean_catalog(messages, CFG, stats)
    assert pairs == [("Rotwein", "Red wine"), ("Rotwein", "Red wine"),
                     ("%d Apfel", "%d apple")]
    assert stats == Counter(messages=4, pairs=3, untranslated=1)
    assert set(stats) <= set(gc.CLEAN_KEYS)
