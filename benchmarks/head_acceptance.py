"""Tokens per iteration and acceptance per slot of a draft head at beta=1.

The measurement is :func:`nmt_specdec.workflows.head_report.main` (the same report
``nmt-specdec-add-draft-head`` ends with); ``--help`` lists its options.
"""
import sys

from nmt_specdec import logs

logs.setup()  # before fairseq is imported: it logs INFO lines as it loads

from nmt_specdec.workflows.head_report import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
