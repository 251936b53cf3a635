"""fairseq ``--user-dir`` for nmt-specdec: registration glue only.

Importing this package runs the ``@register_*`` decorators and installs the
safe checkpoint loader; under fairseq-generate and fairseq-interactive it makes
their logging quiet (:func:`nmt_specdec.logs.quiet_fairseq_generation`). The
algorithm lives in :mod:`nmt_specdec`.
"""

import os
import sys

from nmt_specdec import logs

from fairseq_plugins import checkpoint_safety  # noqa: F401  (first: guards every load)
from fairseq_plugins import keep_all_batches  # noqa: F401  (fairseq drops left-over sentences)
from fairseq_plugins import specdec_criterion, specdec_model, specdec_task  # noqa: F401

# fairseq-generate / -interactive, as console scripts or ``python -m fairseq_cli.X``.
_GENERATION_CLIS = {"fairseq-generate", "fairseq-interactive", "generate.py", "interactive.py"}
if os.path.basename(sys.argv[0] if sys.argv else "") in _GENERATION_CLIS:
    logs.quiet_fairseq_generation()
