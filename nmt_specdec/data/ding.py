"""Parse the Ding German-English dictionary into (German, English) pairs.

Ding lines look like ``DE-sub | DE-sub ... :: EN-sub | EN-sub ...``. Sub-entry
*i* on the left translates sub-entry *i* on the right; inside a sub-entry
``;`` separates synonyms. Choices made here (also written to the data card):

* Lines whose sides have a different number of ``|`` sub-entries cannot be
  aligned reliably and are skipped (counted as ``misaligned``).
* Synonyms: equal counts on both sides are paired by position; otherwise only
  the first German synonym is paired with the first English one, because the
  first alternative is the main headword and later ones are often variants
  without a counterpart (counted as ``unpaired_alternatives``).
* Annotations are removed: ``{m}`` grammar tags, ``[Am.]`` usage labels,
  ``<...>`` search keys, ``( ... )`` glosses, ``/ABC/`` abbreviations and
  ``~word`` cross-references.
* ``a/b`` slash alternatives (``sheer/pure``) are left as written: picking
  one option needs to know how far each option reaches (``It's not / It
  isn't over``), which the format does not say.
* Entries containing an ellipsis (``Abbau…``) are word fragments, not
  translations, and are dropped (counted as ``fragment``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator

from nmt_specdec.data.steps import LOG, RecipeError, SourceUnavailable

Pair = tuple[str, str]

SYSTEM_DING_PATH = Path("/usr/share/trans/de-en")
DEBIAN_PACKAGE = "trans-de-en"

# Non-nesting annotation kinds; each regex matches one innermost group so that
# repeated application also removes nested groups.
_BRACKETS = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>|\([^()]*\)")
# /ABBR/ must be a separate token: this keeps "sheer/pure" and "km/h" intact.
_ABBREV = re.compile(r"(?<!\S)/[^\s/](?:[^/]*[^\s/])?/(?!\w)")
_XREF = re.compile(r"(?<!\S)~\S+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
_WHITESPACE = re.compile(r"\s+")
_LEFTOVER_BRACKETS = re.compile(r"[{}\[\]<>()]")
_ELLIPSIS = re.compile(r"…|\.\.\.")


def clean_text(text: str) -> str:
    """Remove Ding annotations and normalise whitespace.

    Args:
        text: One sub-entry or alternative, e.g. ``"Aal {m} (Speise) [cook.]"``.

    Returns:
        The cleaned text, e.g. ``"Aal"``; may be empty.
    """
    text = unicodedata.normalize("NFC", text)
    previous = None
    while previous != text:  # peel nested groups from the inside out
        previous = text
        text = _BRACKETS.sub(" ", text)
    if "/" in text:  # cheap guards: most entries have neither
        text = _ABBREV.sub(" ", text)
    if "~" in text:
        text = _XREF.sub(" ", text)
    text = _WHITESPACE.sub(" ", text).strip()
    # Removing "(gloss)" before a full stop leaves "word ." behind.
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def split_alternatives(sub_entry: str) -> list[str]:
    """Clean a sub-entry and split it into its ``;`` alternatives.

    Cleaning happens first so that a ``;`` inside a gloss such as
    ``(Tier; Pflanze)`` does not create a spurious alternative.

    Args:
        sub_entry: Raw text between ``|`` separators.

    Returns:
        Stripped alternatives, empty strings kept so positions still line up.
    """
    return [alt.strip() for alt in clean_text(sub_entry).split(";")]


def pair_alternatives(de_alts: list[str], en_alts: list[str]) -> tuple[list[Pair], int]:
    """Pair German and English synonyms of one aligned sub-entry.

    Args:
        de_alts: German alternatives.
        en_alts: English alternatives.

    Returns:
        The pairs and the number of alternatives left unpaired.
    """
    if len(de_alts) == len(en_alts):
        return list(zip(de_alts, en_alts)), 0
    unpaired = len(de_alts) + len(en_alts) - 2
    return [(de_alts[0], en_alts[0])], unpaired


def _usable(text: str, stats: Counter) -> bool:
    """Check one side of a pair, counting the reason when it is rejected."""
    if not text:
        stats["empty_after_cleaning"] += 1
        return False
    if _ELLIPSIS.search(text):
        stats["fragment"] += 1
        return False
    if _LEFTOVER_BRACKETS.search(text):
        stats["unbalanced_brackets"] += 1
        return False
    return True


def parse_line(line: str, stats: Counter | None = None) -> list[Pair]:
    """Turn one Ding line into (German, English) pairs.

    Args:
        line: A raw line of the dictionary file.
        stats: Optional counter updated with what happened to the line.

    Returns:
        Zero or more cleaned pairs.
    """
    stats = stats if stats is not None else Counter()
    stats["lines"] += 1
    line = line.strip()
    if not line or line.startswith("#"):
        stats["comment_or_blank"] += 1
        return []
    sides = line.split("::")
    if len(sides) != 2:
        stats["malformed"] += 1
        return []
    de_subs, en_subs = sides[0].split("|"), sides[1].split("|")
    if len(de_subs) != len(en_subs):
        stats["misaligned"] += 1
        return []
    pairs: list[Pair] = []
    for de_sub, en_sub in zip(de_subs, en_subs):
        stats["sub_entries"] += 1
        candidates, unpaired = pair_alternatives(
            split_alternatives(de_sub), split_alternatives(en_sub)
        )
        stats["unpaired_alternatives"] += unpaired
        for de, en in candidates:
            # Short-circuit: a pair rejected for its German side is counted once.
            if _usable(de, stats) and _usable(en, stats):
                pairs.append((de, en))
    stats["pairs"] += len(pairs)
    return pairs


def parse_lines(lines: Iterable[str], stats: Counter | None = None) -> Iterator[Pair]:
    """Parse many Ding lines, yielding pairs in file order.

    Args:
        lines: Raw lines (with or without newlines).
        stats: Optional counter shared across all lines.

    Yields:
        Cleaned (German, English) pairs.
    """
    for line in lines:
        yield from parse_line(line, stats)


def read_ding(path: Path, stats: Counter | None = None) -> list[Pair]:
    """Read and parse a whole Ding file.

    Args:
        path: The ``de-en`` dictionary file (UTF-8).
        stats: Optional counter for parse statistics.

    Returns:
        All pairs in file order (duplicates kept).
    """
    with open(path, encoding="utf-8", errors="replace") as handle:
        return list(parse_lines(handle, stats))


def locate_ding(
    ding_file: Path | None,
    cache_dir: Path,
    system_path: Path = SYSTEM_DING_PATH,
    fetch: Callable[[Path], Path] | None = None,
) -> Path:
    """Find the Ding dictionary file, downloading the Debian package if needed.

    Order: an explicit ``ding_file``; the installed ``system_path``; a copy
    already extracted into ``cache_dir``; finally ``fetch(cache_dir)``.

    Args:
        ding_file: Path given with ``--ding-file``; never falls back if set.
        cache_dir: Where the Debian package is downloaded and extracted.
        system_path: Location used by the installed ``trans-de-en`` package.
        fetch: Downloader, ``fetch_debian_package`` by default.

    Returns:
        Path of a readable dictionary file.

    Raises:
        RecipeError: Nothing found and the download failed.
    """
    if ding_file is not None:
        if not ding_file.is_file():
            raise RecipeError(
                f"--ding-file {ding_file} does not exist or is not a file")
        return ding_file
    if system_path.is_file():
        return system_path
    cached = cache_dir / "x" / "usr/share/trans/de-en"
    if cached.is_file():
        return cached
    return (fetch or fetch_debian_package)(cache_dir)


# apt-get's messages when the archive cannot be reached, or when apt has no
# package lists at all (a container where `apt-get update` never ran).
_UNREACHABLE = ("Temporary failure resolving", "Could not resolve", "Failed to fetch",
                "Could not connect", "Connection failed", "Connection timed out",
                "Network is unreachable", "Unable to locate package")


def download_error(hint: str, exc: Exception) -> RecipeError:
    """:class:`SourceUnavailable` when ``apt-get download`` failed for want of a
    reachable archive (network, mirror, package lists, timeout); a plain
    :class:`RecipeError` for any other failure, which is not the network's fault."""
    stderr = getattr(exc, "stderr", None) or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    last = (stderr.strip().splitlines() or [type(exc).__name__])[-1]
    unreachable = isinstance(exc, subprocess.TimeoutExpired) or any(
        marker in stderr for marker in _UNREACHABLE)
    kind = SourceUnavailable if unreachable else RecipeError
    return kind(f"{hint} (apt-get download: {last})")


def fetch_debian_package(cache_dir: Path) -> Path:
    """Download ``trans-de-en`` with apt-get and unpack it with dpkg.

    No root is needed: ``apt-get download`` only fetches the .deb into the
    current directory and ``dpkg -x`` just unpacks files.

    Args:
        cache_dir: Directory for the .deb and the extracted tree.

    Returns:
        Path of the extracted dictionary file.

    Raises:
        RecipeError: apt-get/dpkg missing or failing.
    """
    hint = (
        "could not find the Ding dictionary: pass --ding-file PATH, install the "
        f"Debian package {DEBIAN_PACKAGE}, or make 'apt-get download' work"
    )
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        raise SourceUnavailable(hint + " (apt-get/dpkg not available)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    LOG.info("downloading %s into %s", DEBIAN_PACKAGE, cache_dir)
    try:
        subprocess.run(["apt-get", "download", DEBIAN_PACKAGE], cwd=cache_dir,
                       check=True, capture_output=True, text=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise download_error(hint, exc) from None
    debs = sorted(cache_dir.glob(f"{DEBIAN_PACKAGE}_*.deb"))
    if not debs:
        raise RecipeError(hint + " (apt-get produced no .deb)")
    try:
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(cache_dir / "x")],
                       check=True, capture_output=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise RecipeError(f"{hint} (dpkg -x: {type(exc).__name__})") from None
    extracted = cache_dir / "x" / "usr/share/trans/de-en"
    if not extracted.is_file():
        raise RecipeError(hint + " (package did not contain usr/share/trans/de-en)")
    return extracted


def read_header(path: Path, max_lines: int = 20) -> dict[str, str]:
    """Read the ``# Key :: value`` comment header (version, licence, URL).

    Args:
        path: Dictionary file.
        max_lines: Stop after this many leading lines.

    Returns:
        Header keys mapped to values, e.g. ``{"Version": "devel 2023-01-30"}``.
    """
    header: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for _, line in zip(range(max_lines), handle):
            if not line.startswith("#"):
                break
            key, sep, value = line[1:].partition("::")
            if sep:
                header[key.strip()] = value.strip()
    return header
