"""Scripts that measure the decoder and print tables; see ``benchmarks/README.md``.

Not installed with the package: run each file from the repository root
(``python benchmarks/NAME.py --help``). This file only lets the tests import them
as ``benchmarks.NAME`` (tests/conftest.py puts the repository root on the path).
"""
