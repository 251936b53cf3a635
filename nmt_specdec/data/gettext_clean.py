"""Turn gettext catalog entries into clean (German, English) sentence pairs.

A ``.mo`` entry maps the program's English ``msgid`` to the German
``msgstr``. Rules (each rejection is counted under the key in brackets and
listed in the data card):

* translator-credit entries carry names, not translations [translator_credits];
* an empty ``msgstr`` is untranslated [untranslated];
* whitespace runs (newlines of long help texts, tabs) become one space, so
  every pair fits on one line; text is NFC-normalised;
* a leading ``?qualifier:`` (Freeciv's ``Q_()`` disambiguation, which the
  program strips before display) is removed from both sides;
* accelerator markers (GTK ``_``, Qt/KDE ``&``, LibreOffice ``~``) are removed
  by the same rule on both sides (:func:`strip_accelerators`);
* a side without a letter once placeholders and markup are removed is a
  format string or markup only [format_or_markup_only];
* different placeholders on the two sides, or a length ratio far beyond what
  translation gives, mean a stale ("fuzzy") or wrong translation
  [placeholder_mismatch, length_ratio];
* more than ``max_words`` words on a side [too_long];
* German equal to English (names, commands, untranslated copies) [same_text].

Placeholders (``%s``, ``%1$d``, ``{0}``, ``%1``, ``%PRODUCTNAME``) and inline
markup are kept as written: a model trained on UI text must copy them.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from nmt_specdec.data.mo import Message

Pair = tuple[str, str]
CLEAN_KEYS = ("messages", "translator_credits", "untranslated",
              "format_or_markup_only", "placeholder_mismatch", "length_ratio",
              "too_long", "same_text", "pairs")

_CREDIT_IDS = frozenset({"translator-credits", "translator_credits",
                         "translators", "your names", "your emails"})
_CREDIT_CONTEXTS = frozenset({"NAME OF TRANSLATORS", "EMAIL OF TRANSLATORS"})
_WHITESPACE = re.compile(r"\s+")
_QUALIFIER = re.compile(r"^\?[\w ]+:(?=\S)")
# Order matters: named and LibreOffice forms before the generic printf form.
_PLACEHOLDER = re.compile(
    r"%\(\w+\)[-+#0]*\d*(?:\.\d+)?[diouxXeEfFgGcrs]"  # Python %(name)s
    r"|%[A-Z][A-Z0-9_]{2,}%?"  # LibreOffice %PRODUCTNAME
    r"|\$\(\w+\)|\$\[\w+\]"  # LibreOffice $(ARG1), $[officename]
    r"|%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32|I)?[diouxXeEfFgGaAcspnCS]"  # printf
    r"|%<PRI\w+>"  # C99 <inttypes.h> macros as gettext writes them
    r"|%\d+"  # Qt/KDE %1
    r"|\{[^{}\s]*\}"  # Python/C# {0}, {name}, {}
)
_POSITION = re.compile(r"^%\d+\$")
_MARKUP = re.compile(r"<[^<>]*>|&(?:#\d+|#x[0-9a-fA-F]+|\w+);")
_LETTER = re.compile(r"[^\W\d_]")
# A marker directly before a letter or digit, not doubled ("__init__", "&&"),
# and for "&" not the start of an entity ("&amp;").
_ACCELERATORS = {
    "_": re.compile(r"(?<!_)_(?=[^\W_])"),
    "&": re.compile(r"(?<!&)&(?=[^\W_])(?!(?:\w+|#\d+);)"),
    "~": re.compile(r"(?<!~)~(?=[^\W_])"),
}


@dataclass(frozen=True)
class CleanConfig:
    """Cleaning thresholds.

    Attributes:
        max_words: Longest message kept, in whitespace words per side.
        max_ratio: Largest character-length ratio between the sides ...
        ratio_min_chars: ... checked only when the longer side has at least
            this many characters (short labels vary a lot: "Del"/"Entfernen").
    """

    max_words: int = 50
    max_ratio: float = 3.0
    ratio_min_chars: int = 20


def normalize(text: str) -> str:
    """NFC, one space for every whitespace run, no outer spaces or qualifier."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()
    return _QUALIFIER.sub("", text)


def _strip_one(text: str, other: str, pattern: re.Pattern) -> str:
    """Remove the single accelerator match of ``text``, if it is one.

    The token holding the marker must not occur verbatim in ``other``: an
    identifier such as ``file_name`` is copied into the translation, while an
    accelerator sits in a translated word (``_Open`` / ``Ö_ffnen``).
    """
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        return text
    start = matches[0].start()
    token_start = text.rfind(" ", 0, start) + 1
    token_end = text.find(" ", start)
    token = text[token_start:None if token_end < 0 else token_end]
    if token in other.split(" "):
        return text
    return text[:start] + text[start + 1:]


def strip_accelerators(en: str, de: str) -> Pair:
    """Remove keyboard-accelerator markers from both sides by one rule.

    Each side loses a marker when it has exactly one candidate for that marker
    kind and the token holding it is not copied verbatim on the other side.
    """
    for pattern in _ACCELERATORS.values():
        en, de = _strip_one(en, de, pattern), _strip_one(de, en, pattern)
    return en, de


def placeholders(text: str) -> Counter:
    """Multiset of placeholders, positions dropped (``%2$s`` counts as ``%s``).

    Translators reorder arguments with ``%2$s``; the conversions must match.
    """
    return Counter(_POSITION.sub("%", m.group()) for m in _PLACEHOLDER.finditer(text))


def has_words(text: str) -> bool:
    """Whether a letter is left once placeholders and markup are removed."""
    return bool(_LETTER.search(_MARKUP.sub(" ", _PLACEHOLDER.sub(" ", text))))


def _is_credit(msg: Message) -> bool:
    return (msg.msgid.strip().casefold() in _CREDIT_IDS
            or (msg.context or "") in _CREDIT_CONTEXTS)


def _reject_reason(de: str, en: str, cfg: CleanConfig) -> str | None:
    """The first rule a cleaned pair breaks, or None if it is kept."""
    if not (has_words(de) and has_words(en)):
        return "format_or_markup_only"
    if placeholders(de) != placeholders(en):
        return "placeholder_mismatch"
    if max(len(de.split()), len(en.split())) > cfg.max_words:
        return "too_long"
    short, long_ = sorted((len(de), len(en)))
    if long_ >= cfg.ratio_min_chars and long_ > cfg.max_ratio * short:
        return "length_ratio"
    if de == en:
        return "same_text"
    return None


def clean_message(msg: Message, cfg: CleanConfig, stats: Counter) -> Pair | None:
    """Clean one entry into a (German, English) pair.

    Args:
        msg: A catalog entry (``msgid`` English, ``msgstr`` German).
        cfg: Thresholds.
        stats: Counter; gets ``messages`` and the rejection reason or ``pairs``.

    Returns:
        ``(de, en)`` or None when a rule rejects the entry.
    """
    stats["messages"] += 1
    if _is_credit(msg):
        stats["translator_credits"] += 1
        return None
    if not msg.msgstr.strip():
        stats["untranslated"] += 1
        return None
    en, de = strip_accelerators(normalize(msg.msgid), normalize(msg.msgstr))
    reason = _reject_reason(de, en, cfg)
    if reason:
        stats[reason] += 1
        return None
    stats["pairs"] += 1
    return de, en


def clean_catalog(messages: tuple[Message, ...], cfg: CleanConfig,
                  stats: Counter) -> list[Pair]:
    """Clean every entry of a catalog; duplicates inside it are kept."""
    pairs = (clean_message(msg, cfg, stats) for msg in messages)
    return [pair for pair in pairs if pair is not None]
