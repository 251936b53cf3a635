"""Helpers shared by the data recipes: errors, atomic files, reusable steps.

A recipe is a chain of steps (parse, split, train SentencePiece, encode,
binarize). Each step records a small JSON "stamp" of its parameters once its
outputs are complete. A rerun skips a step only when its outputs exist *and*
its stamp matches the current parameters *and* every earlier step was reused,
so changing e.g. ``--vocab-size`` rebuilds that step and everything after it
but never the expensive steps before it. The chain also folds in a digest of
each step's output *content*: a rebuilt step whose files changed invalidates
every later step even when its parameters did not (a stale binarization of
an older ``raw`` split is never reused).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, TextIO

from nmt_specdec import logs
from nmt_specdec.errors import UserError
from nmt_specdec.logs import CurrentStderrHandler

LOG = logging.getLogger("nmt_specdec.data")


class RecipeError(UserError):
    """A problem the user can fix (bad path, bad flag); shown as one line, exit 2."""


class SourceUnavailable(RecipeError):
    """Raw data could not be fetched: no network, no apt-get, mirror unreachable.

    Kept apart from other recipe errors so that tests can skip for a missing
    network but fail for anything else (a parsing bug is not a missing network).
    """


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are a single ``error: ...`` line (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message} (see --help)\n")


def report_user_errors(work: Callable[[], object]) -> int:
    """Call ``work``; print a user mistake as one ``error:`` line.

    Returns:
        0 on success, 2 when ``work`` raised a UserError (incl. RecipeError).
    """
    try:
        work()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_command(parser: argparse.ArgumentParser, work: Callable[[dict], object],
                argv: Optional[List[str]] = None) -> int:
    """A workflow command's ``main``: parse ``argv``, set logging up (quiet unless
    ``--verbose``, before fairseq's import configures it; recipe progress lines
    on), then ``work(flags)`` with the flags as a dict, a user mistake printed
    as one line. Returns the exit status."""
    args = vars(parser.parse_args(argv))
    logs.setup(args.pop("verbose"))
    setup_logging()
    return report_user_errors(lambda: work(args))


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """Open ``path`` for writing text so that it appears only when complete.

    An interrupted run must not leave a half-written file that a later run
    would mistake for a finished output, so we write a sibling temp file and
    rename it over the target on success.

    Args:
        path: Final file path; parent directories are created.

    Yields:
        A UTF-8 text handle with ``\\n`` newlines.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Atomically write one string per line.

    Args:
        path: Output file.
        lines: Strings without trailing newlines.

    Returns:
        The number of lines written.
    """
    count = 0
    with atomic_text(path) as handle:
        for line in lines:
            handle.write(line + "\n")
            count += 1
    return count


def count_lines(path: Path) -> int:
    """Count newline-terminated lines of a file without decoding it."""
    with open(path, "rb") as handle:
        chunks = iter(lambda: handle.read(1 << 20), b"")
        return sum(chunk.count(b"\n") for chunk in chunks)


@contextlib.contextmanager
def ticker(desc: str) -> Iterator[None]:
    """Show ``desc: <elapsed>`` on a terminal while a silent step runs.

    SentencePiece training and fairseq-preprocess print nothing for minutes;
    both release the GIL, so a thread can refresh the line once a second.
    """
    from tqdm import tqdm

    bar = tqdm(desc=desc, bar_format="{desc}: {elapsed}", disable=None, leave=False)
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(1.0):
            bar.refresh()

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()


def setup_logging(verbose: bool = True) -> None:
    """Send recipe progress lines to stderr (idempotent)."""
    if LOG.handlers:
        LOG.setLevel(logging.INFO if verbose else logging.WARNING)
        return
    handler = CurrentStderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s | %(message)s", "%H:%M:%S"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO if verbose else logging.WARNING)
    LOG.propagate = False


class StepChain:
    """Run recipe steps in order, reusing those whose outputs are current.

    Args:
        out_dir: Recipe output directory; stamps go to ``out_dir/.stamps``.

    Attributes:
        status: Step name -> ``"built"`` or ``"reused"``, in run order.
    """

    def __init__(self, out_dir: Path) -> None:
        self.stamp_dir = out_dir / ".stamps"
        self.status: dict[str, str] = {}
        self._chain = ""

    def run(
        self,
        name: str,
        params: dict,
        outputs: list[Path],
        action: Callable[[], None],
    ) -> bool:
        """Run ``action`` unless the step's outputs are already current.

        Args:
            name: Step name (also the stamp file name).
            params: JSON-serialisable parameters that determine the outputs.
            outputs: Files (or directories) the step must produce.
            action: Does the work; must create every path in ``outputs``.

        Returns:
            True when the step was (re)built, False when it was reused.

        Raises:
            RuntimeError: ``action`` returned without creating its outputs.
        """
        # Chaining the previous digest into this one invalidates every later
        # step as soon as an earlier one is rebuilt.
        record = json.dumps({"params": params, "after": self._chain}, sort_keys=True)
        digest = hashlib.sha256(record.encode()).hexdigest()
        stamp = self.stamp_dir / f"{name}.json"
        if all(p.exists() for p in outputs) and _read_digest(stamp) == digest:
            LOG.info("[%s] outputs up to date, reusing", name)
            self.status[name] = "reused"
            self._chain = _chain_after(digest, outputs)
            return False
        stamp.unlink(missing_ok=True)
        LOG.info("[%s] building ...", name)
        with ticker(f"[{name}] building"):
            action()
        missing = [str(p) for p in outputs if not p.exists()]
        if missing:
            raise RuntimeError(f"step {name} did not produce: {', '.join(missing)}")
        with atomic_text(stamp) as handle:
            json.dump({"digest": digest, "params": params}, handle, indent=1,
                      sort_keys=True)
        self.status[name] = "built"
        self._chain = _chain_after(digest, outputs)
        LOG.info("[%s] done", name)
        return True


def content_digest(paths: Iterable[Path]) -> str:
    """sha256 over the bytes of files (directories: every file below, sorted)."""
    sha = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() \
            else [path]
        for file in files:
            sha.update(str(file.relative_to(path.parent)).encode() + b"\0")
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(block)
    return sha.hexdigest()


def _chain_after(digest: str, outputs: list[Path]) -> str:
    """The chain value a step hands on: its stamp digest and its outputs' content."""
    return hashlib.sha256((digest + content_digest(outputs)).encode()).hexdigest()


def _read_digest(stamp: Path) -> str | None:
    """Return the digest stored in a stamp file, or None if unreadable."""
    try:
        return json.loads(stamp.read_text(encoding="utf-8"))["digest"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
