"""fairseq ``--user-dir`` for nmt-specdec: registration glue only.

Importing this package runs the ``@register_*`` decorators and installs the
safe checkpoint loader. The algorithm lives in :mod:`nmt_specdec`.
"""

from fairseq_plugins import checkpoint_safety  # noqa: F401  (first: guards every load)
from fairseq_plugins import keep_all_batches  # noqa: F401  (fairseq drops left-over sentences)
from fairseq_plugins import specdec_criterion, specdec_model, specdec_task  # noqa: F401
