"""Scripts that measure the decoder and print markdown tables; ``benchmarks/README.md``
says what each one answers and gives its command.

- ``iteration_cost.py`` and ``runtimes.py``: the cost of an iteration, and of one
  verifier call on each CPU runtime;
- ``head_acceptance.py`` and ``draft_trees.py``: tokens per iteration of a draft
  head, as a chain and as draft trees;
- ``determinism.py``: batch dependence and the cost of ``--deterministic``;
- ``param_report.py``: the parameters a draft head adds;
- ``cost_model.py``: the break-even tokens per iteration per K (its arithmetic and
  outputs in ``cost_model_report.py``).

They are not installed with the package: run each file from the repository root
with the project's environment (``.venv/bin/python benchmarks/NAME.py --help``).
Each prints its table to stdout; some also write JSON (``--out``). This file only
lets the tests import them as ``benchmarks.NAME`` (tests/conftest.py puts the
repository root on the path).
"""
