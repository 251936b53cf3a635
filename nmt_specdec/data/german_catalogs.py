"""More source text for a draft head: every Debian package with German catalogs.

A draft head learns from source sentences alone (the verifier writes their
targets: ``nmt-specdec-add-draft-head --extra-source``), and the head of a
gettext model drafts best on text like the corpus's: interface messages. The
corpus reads 276 chosen packages (:mod:`.gettext_packages`); Debian ships German
``.mo`` catalogs in about 1,700. This lists the others from the archive's
``Contents`` indices (which name every file of every package): those with a
file under ``usr/share/locale/de/LC_MESSAGES/``, less the corpus's packages and
the reserved ones. The model's held-out valid and test packages are listed too,
so that ``nmt-specdec-prepare-gettext --packages ... --heldout-from`` rebuilds
the same valid and test splits and drops every training message that shares a
text with them::

    nmt-specdec-list-german-packages --heldout-from models/gettext-de-en-base/settings.json \\
        --out work/more/packages.txt
    nmt-specdec-prepare-gettext --out work/more --packages $(cat work/more/packages.txt) \\
        --model-dir models/gettext-de-en-base \\
        --heldout-from models/gettext-de-en-base/settings.json

``work/more/raw/train.de`` is then the extra source (each package keeps its own
licence, as in the corpus; its data card lists them).
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import urllib.request
from pathlib import Path
from typing import Iterable, List, Optional, Set

from nmt_specdec import logs
from nmt_specdec.data.gettext_packages import PACKAGE_GROUPS, RESERVED_PACKAGES
from nmt_specdec.data.steps import LOG, OneLineParser, RecipeError, atomic_text, run_command

MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"  # the release the corpus's package list was checked on
INDICES = ("Contents-all.gz", "Contents-amd64.gz")  # architecture-independent files first
CATALOG_DIR = "usr/share/locale/de/LC_MESSAGES/"


def catalog_packages(lines: Iterable[str]) -> Set[str]:
    """Packages that ship a ``.mo`` file in :data:`CATALOG_DIR`, from the lines
    of a ``Contents`` index (``PATH  SECTION/PACKAGE[,SECTION/PACKAGE...]``)."""
    found: Set[str] = set()
    for line in lines:
        if not line.startswith(CATALOG_DIR):
            continue
        path, _, owners = line.rstrip("\n").rpartition(" ")
        if path.rstrip().endswith(".mo"):
            found.update(owner.rsplit("/", 1)[-1] for owner in owners.split(",") if owner)
    return found


def packages_to_read(found: Set[str], heldout: Set[str]) -> List[str]:
    """The packages beyond the corpus's (none reserved) and the held-out ones, sorted."""
    corpus = {name for group in PACKAGE_GROUPS for name in group.packages}
    return sorted((found - corpus - RESERVED_PACKAGES) | heldout)


def read_index(url: str) -> Iterable[str]:
    """The lines of one gzipped ``Contents`` index at ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            payload = response.read()
    except OSError as err:
        raise RecipeError(f"cannot download {url} ({err})") from None
    with gzip.open(io.BytesIO(payload), "rt", encoding="utf-8", errors="replace") as lines:
        yield from lines


def heldout_packages(path: Optional[Path]) -> Set[str]:
    """The valid and test packages of a model's ``settings.json`` (none without one)."""
    if path is None:
        return set()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RecipeError(f"--heldout-from {path}: {err}") from None
    lists = data.get("gettext_heldout", data)
    return {name for names in lists.values() for name in names}


def run(out: Path, mirror: str, suite: str, heldout_from: Optional[Path]) -> List[str]:
    heldout = heldout_packages(heldout_from)
    found: Set[str] = set()
    for index in INDICES:
        url = f"{mirror.rstrip('/')}/dists/{suite}/main/{index}"
        LOG.info("reading %s", url)
        found |= catalog_packages(read_index(url))
    names = packages_to_read(found, heldout)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_text(out) as handle:
        handle.write("".join(name + "\n" for name in names))
    LOG.info("%d packages with German catalogs; %d beyond the corpus's, %d held out -> %s",
             len(found), len(names) - len(heldout), len(heldout), out)
    return names


def main(argv: Optional[List[str]] = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the package list, one per line")
    p.add_argument("--mirror", default=MIRROR, help="Debian archive to read the indices from")
    p.add_argument("--suite", default=SUITE)
    p.add_argument("--heldout-from", type=Path, default=None,
                   help="a model's settings.json: its valid and test packages are listed too")
    logs.add_verbose_flag(p)
    return run_command(p, lambda args: run(**args), argv)


if __name__ == "__main__":
    sys.exit(main())
