"""The Spec-Verify generator (Xia et al., 2023, Alg. 1): fairseq's generator interface.

The implementation is the lean engine in :mod:`nmt_specdec.decoding`; this module
keeps the names callers import. With ``beta=1`` the output equals fairseq's greedy
``SequenceGenerator`` (beam 1) token for token, up to float rounding; with K=0 it
is greedy decoding itself.
"""

from nmt_specdec.decoding.loop import SpecDecGenerator
from nmt_specdec.decoding.options import LengthRules, SpecDecOptions

__all__ = ["LengthRules", "SpecDecGenerator", "SpecDecOptions"]
