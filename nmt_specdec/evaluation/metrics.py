"""Detokenization, sacreBLEU and chrF, and agreement with greedy output."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence

import torch
from fairseq.data import data_utils
from torch import Tensor


class Scores(NamedTuple):
    """Corpus scores with their sacreBLEU signatures."""

    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str


class Detokenizer:
    """Token ids -> raw text: SentencePiece decoding, or fairseq's ``--post-process``.

    Args:
        dictionary: the fairseq dictionary of the ids (EOS, pad are dropped).
        spm_model: SentencePiece model path (preferred when given).
        post_process: fairseq post-process symbol used without ``spm_model``
            (``sentencepiece`` removes ``▁`` exactly like fairseq-generate).
    """

    def __init__(self, dictionary, spm_model: Optional[str], post_process: str):
        self.dictionary = dictionary
        self.post_process = post_process
        self.spm = None
        if spm_model is not None:
            import sentencepiece  # only needed with --spm-model

            self.spm = sentencepiece.SentencePieceProcessor(model_file=spm_model)

    def __call__(self, tokens) -> str:
        if not isinstance(tokens, Tensor):
            tokens = torch.tensor(tokens, dtype=torch.long)
        pieces = self.dictionary.string(tokens)
        if self.spm is not None:
            return self.spm.decode_pieces(pieces.split())
        return data_utils.post_process(pieces, self.post_process)

    def encoder(self, source_dictionary):
        """Raw source line -> (S,) ids, EOS-terminated (as fairseq-interactive)."""
        if self.spm is None:
            raise ValueError("encoding raw text needs a SentencePiece model")

        def encode(line: str) -> Tensor:
            pieces = " ".join(self.spm.encode(line, out_type=str))
            return source_dictionary.encode_line(
                pieces, add_if_not_exist=False, append_eos=True
            ).long()

        return encode


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Detokenized sacreBLEU and chrF of hypotheses against one reference each."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    refs = [list(references)]
    bleu_score = bleu.corpus_score(list(hypotheses), refs)
    chrf_score = chrf.corpus_score(list(hypotheses), refs)
    return Scores(
        float(bleu_score.score),
        str(bleu.get_signature()),
        float(chrf_score.score),
        str(chrf.get_signature()),
    )


def in_order(outputs: Dict[int, List[int]], count: int) -> List[List[int]]:
    """Output token lists in test-set order."""
    return [outputs[i] for i in range(count)]


def count_differences(
    outputs: Dict[int, List[int]], reference: Dict[int, List[int]]
) -> int:
    """Sentences whose token ids differ from ``reference`` (e.g. stock greedy)."""
    return sum(outputs[i] != reference.get(i) for i in outputs)
