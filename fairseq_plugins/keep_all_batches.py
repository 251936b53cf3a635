"""Every sentence gets a batch: fairseq's batch_by_size drops some of them.

fairseq 0.12 (and fairseq-fixed 0.12.3.1) rounds each batch down to a multiple
of ``--required-batch-size-multiple`` (default 8) and silently discards the
sentences left over at the end: 50 test sentences with ``--batch-size 64`` give
48 hypotheses from ``fairseq-generate``, and validation skips a few sentences.
Loading the plugin wraps ``data_utils.batch_by_size`` so that the left-over
sentences form extra batches (under the same token/sentence limits). Batches
fairseq already builds are unchanged.
"""

import numpy as np
from fairseq.data import data_utils

_fairseq_batch_by_size = data_utils.batch_by_size


def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                  max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
    batches = _fairseq_batch_by_size(
        indices, num_tokens_fn, num_tokens_vec=num_tokens_vec, max_tokens=max_tokens,
        max_sentences=max_sentences, required_batch_size_multiple=required_batch_size_multiple,
        fixed_shapes=fixed_shapes,
    )
    if fixed_shapes is not None:  # fixed shapes drop sentences on purpose
        return batches
    indices = np.asarray(indices, dtype=np.int64)
    batched = sum(len(batch) for batch in batches)
    if batched == len(indices):
        return batches
    left = ~np.isin(indices, np.concatenate(batches) if batches else indices[:0])
    vec = None if num_tokens_vec is None else np.asarray(num_tokens_vec)[left]
    extra = _fairseq_batch_by_size(
        indices[left], num_tokens_fn, num_tokens_vec=vec, max_tokens=max_tokens,
        max_sentences=max_sentences, required_batch_size_multiple=1,
    )
    return list(batches) + list(extra)


data_utils.batch_by_size = batch_by_size
