"""Get German gettext catalogs out of Debian packages (or a local directory).

Each package's German ``.mo`` files, version and licence are stored under
``OUT/catalogs/<package>/`` with a ``package.json`` written last; a package
whose ``package.json`` exists is done, so an interrupted run continues with
the next package. ``.deb`` files are read with ``dpkg-deb --fsys-tarfile``
streamed into :mod:`tarfile`: nothing else of a package touches the disk, and
the ``.deb`` is deleted once read unless ``--keep-debs`` is given.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from nmt_specdec.data.gettext_packages import RESERVED_DOMAINS, RESERVED_PACKAGES
from nmt_specdec.data.steps import LOG, RecipeError, atomic_text

# usr/share/locale/de/LC_MESSAGES/x.mo, LibreOffice's program/resource/de/
# LC_MESSAGES/x.mo, games' own translation trees: only plain "de" (de_AT,
# de_CH spell differently).
GERMAN_MO = re.compile(r"(?:^|/)de/LC_MESSAGES/[^/]+\.mo$")
META_FILE = "package.json"
APT_BATCH = 20
_TIMEOUT = 1800


@dataclass
class PackageInfo:
    """What is recorded about one package.

    Attributes:
        name: Debian binary package name (or directory name for .mo dirs).
        version: Package version, ``unknown`` for .mo directories.
        licence: From ``usr/share/doc/<name>/copyright`` (see ``licence_of``).
        origin: Where the catalogs came from (a ``.deb`` name or a directory).
        catalogs: Stored file name -> path inside the package.
        refused_catalogs: Catalogs of reserved programs that were left out.
    """

    name: str
    version: str
    licence: str
    origin: str
    catalogs: dict[str, str] = field(default_factory=dict)
    refused_catalogs: list[str] = field(default_factory=list)


def refuse_reserved(names: Iterable[str], where: str) -> None:
    """Raise RecipeError if any package is reserved for evaluation."""
    bad = sorted(set(names) & RESERVED_PACKAGES)
    if bad:
        raise RecipeError(f"{where} names package(s) reserved for evaluation: "
                          f"{', '.join(bad)}")


def licence_of(copyright_text: str | None) -> str:
    """The licence a Debian ``copyright`` file states for the package.

    Machine-readable files (DEP-5) give it in the ``License:`` field of the
    ``Files: *`` paragraph (else of the first paragraph that has one);
    free-form files are recognised by the usual licence names.
    """
    if copyright_text is None:
        return "unknown (no copyright file in the package)"
    paragraphs = re.split(r"\n\s*\n", copyright_text)
    first = None
    for para in paragraphs:
        match = re.search(r"^License:[ \t]*(\S.*)$", para, re.MULTILINE)
        if not match:
            continue
        if re.search(r"^Files:\s*\*\s*$", para, re.MULTILINE):
            return match.group(1).strip()
        first = first or match.group(1).strip()
    if first:
        return first
    # Free-form: the licence named first is the main one; later names are
    # usually exceptions for bundled files.
    found = [(m.start(), name) for pattern, name in _FREE_FORM
             for m in [re.search(pattern, copyright_text)] if m]
    if found:
        return f"{min(found)[1]} (free-form copyright file)"
    return "unknown (free-form copyright file)"


_FREE_FORM = (
    (r"(?<!Lesser )(?<!Library )General Public License|\bGPL", "GPL"),
    (r"Lesser General Public|Library General Public|\bLGPL", "LGPL"),
    (r"Mozilla Public License", "MPL"),
    (r"Apache License", "Apache"),
    (r"Permission is hereby granted", "MIT/X11"),
)


def _control(deb: Path) -> dict[str, str]:
    """``Package`` and ``Version`` from a .deb's control file."""
    proc = _run(["dpkg-deb", "--field", str(deb), "Package", "Version"], deb)
    fields = dict(line.split(": ", 1) for line in proc.stdout.splitlines()
                  if ": " in line)
    if "Package" not in fields:
        raise RecipeError(f"{deb} has no Package field (not a .deb?)")
    return fields


def _run(cmd: list[str], what: Path | str, **kwargs) -> subprocess.CompletedProcess:
    """Run a tool; its failure is the user's problem (bad file, no network)."""
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True,
                              timeout=_TIMEOUT, **kwargs)
    except FileNotFoundError:
        raise RecipeError(f"{cmd[0]} is not installed; it is needed for "
                          f"{what}") from None
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        tail = (getattr(exc, "stderr", "") or "").strip().splitlines() or ["failed"]
        raise RecipeError(f"{cmd[0]} failed on {what}: {tail[-1]}") from None


def _scan_tar(stream, copyright_path: str) -> tuple[dict[str, bytes], str | None]:
    """German ``.mo`` files and the copyright text from a streamed tar.

    A package whose ``usr/share/doc/<name>`` is a link to another package's
    directory has no copyright file of its own; the text then says where it is.
    """
    mo_files: dict[str, bytes] = {}
    copyright_text = None
    doc_dir = copyright_path.rsplit("/", 1)[0]
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            path = member.name.removeprefix("./")
            if path == doc_dir and member.issym() and copyright_text is None:
                copyright_text = f"License: see package {member.linkname}"
            wanted = GERMAN_MO.search(path) or path == copyright_path
            handle = tar.extractfile(member) if wanted and member.isfile() else None
            if handle is None:  # links: a -data package often links its doc dir
                continue
            if path == copyright_path:
                copyright_text = handle.read().decode("utf-8", errors="replace")
            else:
                mo_files[path] = handle.read()
    return mo_files, copyright_text


def read_deb(deb: Path) -> tuple[dict[str, str], dict[str, bytes], str | None]:
    """Control fields, German ``.mo`` files and the copyright text of a .deb.

    Returns:
        (control fields, {path in package: bytes}, copyright text or None).
    """
    control = _control(deb)
    copyright_path = f"usr/share/doc/{control['Package']}/copyright"
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            mo_files, copyright_text = _scan_tar(proc.stdout, copyright_path)
        except tarfile.TarError as exc:
            raise RecipeError(f"cannot read {deb}: {exc}") from None
    if proc.returncode:
        raise RecipeError(f"dpkg-deb cannot read {deb}")
    return control, mo_files, copyright_text


def store_package(pkg_dir: Path, info: PackageInfo, mo_files: dict[str, bytes]) -> None:
    """Write a package's catalogs, then its ``package.json`` (the done marker).

    Catalogs are named after their gettext domain (file name); catalogs of
    reserved programs (e.g. a bundled ``coreutils.mo``) are left out.
    """
    shutil.rmtree(pkg_dir, ignore_errors=True)
    pkg_dir.mkdir(parents=True)
    for path in sorted(mo_files):
        domain = Path(path).stem
        if domain in RESERVED_DOMAINS:
            info.refused_catalogs.append(path)
            continue
        name, n = f"{domain}.mo", 1
        while name in info.catalogs:  # one domain under two paths
            n += 1
            name = f"{domain}~{n}.mo"
        (pkg_dir / name).write_bytes(mo_files[path])
        info.catalogs[name] = path
    with atomic_text(pkg_dir / META_FILE) as handle:
        json.dump(asdict(info), handle, indent=1, ensure_ascii=False)


def load_info(pkg_dir: Path) -> PackageInfo | None:
    """The stored PackageInfo, or None when the package is not done."""
    try:
        return PackageInfo(**json.loads((pkg_dir / META_FILE).read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def store_deb(deb: Path, catalogs_dir: Path) -> PackageInfo:
    """Read one .deb and store its German catalogs; returns what was stored."""
    control, mo_files, copyright_text = read_deb(deb)
    name = control["Package"]
    refuse_reserved([name], f"{deb.name}")
    info = PackageInfo(name, control.get("Version", "unknown"),
                       licence_of(copyright_text), deb.name)
    store_package(catalogs_dir / name, info, mo_files)
    return info


def store_mo_dir(src: Path, catalogs_dir: Path) -> PackageInfo:
    """Store a directory of ``.mo`` files as the package named after it.

    German catalogs are those under ``de/LC_MESSAGES/`` or lying directly in
    ``src``; a ``copyright`` file next to them gives the licence.
    """
    refuse_reserved([src.name], f"--deb-dir {src.parent}")
    mo_files = {p.relative_to(src).as_posix(): p.read_bytes()
                for p in sorted(src.rglob("*.mo"))
                if p.parent == src or GERMAN_MO.search(p.relative_to(src).as_posix())}
    copyright_file = src / "copyright"
    text = (copyright_file.read_text("utf-8", errors="replace")
            if copyright_file.is_file() else None)
    info = PackageInfo(src.name, "unknown", licence_of(text), f"{src}/")
    store_package(catalogs_dir / src.name, info, mo_files)
    return info


def apt_download(names: list[str], dest: Path) -> dict[str, Path]:
    """``apt-get download`` one batch of packages into ``dest``.

    One apt-get call per batch keeps a long list fast; a failing batch (one
    unknown name fails it all) is retried one package at a time, and packages
    that still fail are left out with a warning.

    Returns:
        Package name -> downloaded (or already present) .deb.
    """
    dest.mkdir(parents=True, exist_ok=True)
    missing = [n for n in names if _cached(dest, n) is None]
    try:
        if missing:
            _run(["apt-get", "download", *missing], "apt-get download", cwd=dest)
    except RecipeError:
        for name in missing:
            try:
                _run(["apt-get", "download", name], name, cwd=dest)
            except RecipeError as exc:
                LOG.warning("package %s not downloaded: %s", name, exc)
    found = {name: _cached(dest, name) for name in names}
    return {name: deb for name, deb in found.items() if deb is not None}


def _cached(dest: Path, name: str) -> Path | None:
    """A .deb of ``name`` already in ``dest`` (apt names it name_version_arch)."""
    debs = sorted(dest.glob(f"{name}_*.deb"))
    return debs[-1] if debs else None


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="pkg", desc="catalogs", disable=None, leave=False)


def collect_from_apt(names: list[str], catalogs_dir: Path, download_dir: Path,
                     keep_debs: bool) -> list[str]:
    """Download and store every package not stored yet, a batch at a time.

    Downloading a batch, reading it and deleting its .debs before the next
    keeps disk use at one batch (game data packages are hundreds of MB).

    Returns:
        Names of packages that could not be downloaded.
    """
    refuse_reserved(names, "the package list")
    todo = [n for n in names if load_info(catalogs_dir / n) is None]
    LOG.info("%d of %d packages already stored; fetching %d", len(names) - len(todo),
             len(names), len(todo))
    unavailable = []
    with _progress(len(todo)) as bar:
        for start in range(0, len(todo), APT_BATCH):
            batch = todo[start:start + APT_BATCH]
            debs = apt_download(batch, download_dir)
            unavailable += [n for n in batch if n not in debs]
            for name, deb in debs.items():
                info = store_deb(deb, catalogs_dir)
                LOG.info("%s %s: %d German catalog(s)", name, info.version,
                         len(info.catalogs))
                if not keep_debs:
                    deb.unlink()
            bar.update(len(batch))
    return unavailable


def collect_from_dir(deb_dir: Path, catalogs_dir: Path) -> list[str]:
    """Store every ``*.deb`` and every sub-directory of ``.mo`` files in deb_dir.

    Returns:
        The package names, in sorted order.
    """
    if not deb_dir.is_dir():
        raise RecipeError(f"--deb-dir {deb_dir} is not a directory")
    entries = sorted(p for p in deb_dir.iterdir()
                     if p.is_dir() or p.suffix == ".deb")
    if not entries:
        raise RecipeError(f"--deb-dir {deb_dir} holds no .deb files or .mo "
                          "directories")
    names: dict[str, Path] = {}
    with _progress(len(entries)) as bar:
        for entry in entries:
            info = (store_mo_dir(entry, catalogs_dir) if entry.is_dir()
                    else store_deb(entry, catalogs_dir))
            if info.name in names:
                raise RecipeError(f"--deb-dir holds package {info.name} twice: "
                                  f"{names[info.name].name} and {entry.name}")
            names[info.name] = entry
            bar.update(1)
    return sorted(names)
