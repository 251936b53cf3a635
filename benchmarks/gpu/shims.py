"""Console scripts for the GPU machine, where the wheels go to ``--target /tmp/site``
and the project itself is not installed.

A few tests run ``Path(sys.executable).with_name("nmt-specdec-translate")`` (also
``fairseq-interactive``, ``nmt-specdec-distill``, ``nmt-specdec-prepare-wmt14``), so
each of fairseq's and the project's console scripts is written next to the
interpreter as a small Python launcher. Every launcher puts the repository and
the ``PYTHONPATH`` entries it was made with on ``sys.path`` first, so it works in
a subprocess that was given another environment.

Usage (from the repository root, after the README's pip prefix):
``python3 benchmarks/gpu/shims.py [--bin DIR]``; prints what it wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LAUNCHER = """#!{python}
import sys
for path in reversed({paths!r}):
    if path not in sys.path:
        sys.path.insert(0, path)
from {module} import {func}
sys.argv[0] = {name!r}
sys.exit({func}())
"""


def entry_points() -> dict[str, str]:
    """name -> "module:function" for fairseq's and this project's console scripts."""
    scripts = {}
    for dist in ("fairseq-fixed", "fairseq"):
        try:
            found = metadata.distribution(dist).entry_points
        except metadata.PackageNotFoundError:
            continue
        scripts.update({ep.name: ep.value for ep in found if ep.group == "console_scripts"})
        break
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    scripts.update(project["project"]["scripts"])
    return scripts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", type=Path, default=Path(sys.executable).parent,
                        help="where to write them (default: beside python3)")
    args = parser.parse_args(argv)
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = list(dict.fromkeys(paths))
    if not os.access(args.bin, os.W_OK):
        print(f"shims: {args.bin} is not writable; the tests that run console scripts "
              "beside sys.executable will fail", file=sys.stderr)
        return 1
    written = []
    for name, target in sorted(entry_points().items()):
        module, _, func = target.partition(":")
        path = args.bin / name
        ours = f"#!{sys.executable}\nimport sys\nfor path"
        if path.exists() and not path.read_text(errors="replace").startswith(ours):
            continue  # a real console script is already there: keep it
        path.write_text(LAUNCHER.format(python=sys.executable, paths=paths, module=module,
                                        func=func.strip(), name=name), encoding="utf-8")
        path.chmod(0o755)
        written.append(name)
    print(f"shims in {args.bin}: {' '.join(written) or 'none needed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
