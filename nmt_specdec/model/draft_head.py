"""The non-autoregressive draft head (Xia et al., 2023, Sec. 3.1), read off the verifier.

Format 2. The head fills K ``[MASK]`` slots in one bidirectional pass, but its
input no longer re-encodes the accepted prefix (format 1 did, so its cost grew
with the hypothesis every iteration). Like the heads of blockwise parallel
decoding (Stern et al., 2018) it reads the verifier's own top-layer state, which
already summarises the prefix:

    anchor  = embed(c) + pos(p) + W_s h      (c: last committed token at position p,
                                              h: the verifier state that predicted c)
    slot j  = [MASK] + pos(p + j),  j = 1..K

The K+1 vectors attend to each other (no causal mask) and to the source through
``--draft-layers`` decoder layers; slot j predicts the token at position p + j.
Before the verifier has run (c = BOS) a learned ``start_state`` stands for h.
The work per iteration is K+1 positions, whatever the prefix length.

Slots that see each other (``--draft-refine-layers``): the pass above gives
slot j no token between the anchor and itself, so every slot after the first
guesses blind (acceptance per slot on gettext: 0.65, 0.28, 0.08, 0.01). A
refinement pass, mask-predict's own idea in causal form, re-reads the first
pass's K+1 output states with the token each slot follows added in:

    row j  = x_j + embed(t_{j-1}),  t_0 = c,  t_j = slot j's current best draft

through ``--draft-refine-layers`` layers whose self-attention is causal over the
block, then the same output projection. Training feeds the true tokens
(teacher forcing), so the pass learns P(y_j | y_<j) - exactly the condition
under which slot j can be accepted. Decoding runs it ``refine_steps`` times
with the same weights, each time on the previous run's drafts: slot 1 reads
only c, so after r runs the drafts of the first r slots no longer change, and
r = K makes them exactly those of an autoregressive 2-layer drafter (r = K - 1
nearly: its last slot reads a draft the last run rarely changes), computed in
one call of the draft graph. A refinement run scores only
each slot's ``refine_shortlist`` best first-pass candidates (the full
projection onto the draft vocabulary costs as much as the layer itself on a
CPU, and it is paid once, in the first pass): drafts are proposals, so this
changes acceptance a little, never the output.

Drafts may be restricted to the ``--draft-vocab-size`` most frequent tokens
(fairseq dictionaries are sorted by frequency, so these are the first ids): the
projection onto the vocabulary is the CPU's largest cost, and the verifier still
checks every draft against the full vocabulary, so the output stays exact
(FR-Spec, Zhao et al., 2025).

``[MASK]`` and ``start_state`` are learned vectors owned by this module, not
dictionary symbols: the verifier's vocabulary and output layer never change.

Shapes: B rows, K draft slots, C model dim, V draft vocabulary, S source.
"""

from __future__ import annotations

import copy
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from nmt_specdec.model import train_layers
from nmt_specdec.model.positions import embed_positions_at
from nmt_specdec.errors import UserError

FORMAT_VERSION = 2
REFINE_SHORTLIST = 16  # first-pass candidates per slot that a refinement run scores


def shortlist_logits(slots: Tensor, weight: Tensor, shortlist: Tensor,
                     like: Tensor) -> Tensor:
    """(B, K, V) logits of ``slots`` (B, K, C) against only the ``shortlist``
    (B, K, M) rows of ``weight`` (V, C), ``-inf`` elsewhere (``like``: a (B, K, V)
    tensor of the right shape)."""
    rows = F.embedding(shortlist, weight)  # (B, K, M, C): a gather, not a projection
    short = torch.matmul(rows, slots.unsqueeze(-1)).squeeze(-1)  # (B, K, M)
    return torch.full_like(like, float("-inf")).scatter(2, shortlist, short)


def project_slots(slots: Tensor, weight: Tensor) -> Tensor:
    """(B', K, V) logits of the (K, B', C) slot states against ``weight`` (V, C).

    The states are made batch-first rows of one matrix before the projection: a
    transposed view, or a block of one slot (whose (B', 1, C) view counts as
    contiguous with any stride), would make ``F.linear`` a batched product with
    the weight broadcast to every row, several times slower on a CPU and, under
    bfloat16 autocast, copied whole for every row."""
    length, rows, dim = slots.shape
    flat = slots.transpose(0, 1).reshape(rows * length, dim)
    return F.linear(flat, weight).view(rows, length, -1)


class DraftHead(nn.Module):
    """Predicts K tokens after the last committed token in one bidirectional pass.

    Args:
        verifier: the AR decoder (a fairseq ``TransformerDecoderBase``); the head
            shares its token embeddings, positional embeddings and (unless
            ``untie_output``) output layer.
        num_layers: number of draft layers (the paper uses a shallow decoder).
        untie_output: give the head its own output projection, initialised from
            the verifier's (which stays untouched either way).
        vocab_size: draft only the first ``vocab_size`` ids (0: the whole vocabulary).
        refine_layers: layers of the causal refinement pass (0: none).
        refine_steps: how many times decoding runs the refinement pass.
    """

    def __init__(self, verifier: nn.Module, num_layers: int, untie_output: bool = False,
                 vocab_size: int = 0, refine_layers: int = 0, refine_steps: int = 1):
        super().__init__()
        if num_layers < 1:
            raise UserError(f"--draft-layers must be >= 1, got {num_layers}")
        full_vocab = verifier.output_projection.out_features
        if vocab_size < 0 or vocab_size > full_vocab:
            raise UserError(f"--draft-vocab-size must be in 0..{full_vocab}, got {vocab_size}")
        if refine_layers < 0 or (refine_layers and refine_steps < 1):
            raise UserError(f"--draft-refine-layers must be >= 0 and --draft-refine-steps >= 1 "
                            f"(got {refine_layers} and {refine_steps})")
        if verifier.project_in_dim is not None or verifier.project_out_dim is not None:
            raise UserError("the draft head needs decoder_input_dim == decoder_embed_dim")
        cfg = copy.deepcopy(verifier.cfg)
        dim = verifier.embed_tokens.embedding_dim
        self.padding_idx = verifier.padding_idx
        self.embed_scale = verifier.embed_scale
        self.vocab_size = vocab_size or full_vocab
        # Held in a list so that these shared modules are not registered twice
        # (their parameters belong to the verifier; state dicts stay stock-compatible).
        self._shared: List[nn.Module] = [verifier]
        # Saved with the weights: a format-1 checkpoint lacks it and is refused.
        self.register_buffer("format_version", torch.tensor(FORMAT_VERSION))
        self.mask_embedding = nn.Parameter(torch.empty(dim).normal_(0, dim**-0.5))
        self.start_state = nn.Parameter(torch.zeros(dim))
        self.state_proj = nn.Linear(dim, dim)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayerBase(cfg, no_encoder_attn=False) for _ in range(num_layers)]
        )
        self.layer_norm = LayerNorm(dim) if cfg.decoder.normalize_before else None
        self.refine_layers = nn.ModuleList(
            [TransformerDecoderLayerBase(cfg, no_encoder_attn=False) for _ in range(refine_layers)]
        )
        self.refine_norm = (LayerNorm(dim) if refine_layers and cfg.decoder.normalize_before
                            else None)
        self.refine_steps = refine_steps if refine_layers else 0
        self.refine_shortlist = REFINE_SHORTLIST  # 0: score the whole draft vocabulary
        self.dropout = nn.Dropout(cfg.dropout)
        self.output_projection: Optional[nn.Linear] = None
        if untie_output:
            self.output_projection = nn.Linear(dim, self.vocab_size, bias=False)
            self.output_projection.weight.data.copy_(self.verifier_output_weight())

    @property
    def verifier(self) -> nn.Module:
        return self._shared[0]

    def verifier_output_weight(self) -> Tensor:
        return self.verifier.output_projection.weight[: self.vocab_size]

    def output_weight(self) -> Tensor:
        """(V, C) weight of the draft projection (V = the draft vocabulary); the
        verifier's (tied) weight is read, never trained, by the draft loss."""
        if self.output_projection is not None:
            return self.output_projection.weight
        return self.verifier_output_weight().detach()

    def block_inputs(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                     num_slots: int, position_table: Optional[Callable] = None) -> Tensor:
        """The anchor and K mask slots, (B, K+1, C).

        Args:
            states: (B, C) verifier state that predicted each row's last token
                (``start_state`` where there is none yet).
            last_tokens: (B,) last committed token c.
            positions: (B,) its 0-based position p.
            num_slots: K.
            position_table: looks positions up (decoding passes a precomputed
                table; default: the verifier's positional module).
        """
        verifier = self.verifier
        offsets = torch.arange(num_slots + 1, device=positions.device)
        block_positions = positions.unsqueeze(1) + offsets  # (B, K+1)
        # The verifier's weights are read, never trained, by the draft loss.
        embedded = F.embedding(last_tokens, verifier.embed_tokens.weight.detach(),
                               padding_idx=self.padding_idx)
        anchor = self.embed_scale * embedded + self.state_proj(states)
        masks = self.mask_embedding.to(anchor.dtype).expand(anchor.size(0), num_slots, -1)
        x = torch.cat([anchor.unsqueeze(1), masks], dim=1)  # (B, K+1, C)
        if position_table is not None:
            x = x + position_table(block_positions)
        elif verifier.embed_positions is not None:
            x = x + embed_positions_at(verifier.embed_positions, block_positions)
        if verifier.layernorm_embedding is not None:
            x = verifier.layernorm_embedding(x)
        return x

    def refine_inputs(self, hidden: Tensor, last_tokens: Tensor, slot_tokens: Tensor) -> Tensor:
        """(B, K+1, C) rows of the refinement pass: the first pass's output states
        ``hidden`` with, at slot j, the embedding of the token slot j follows
        (``last_tokens`` (B,) for slot 1, ``slot_tokens`` (B, K) [j-1] after it)."""
        follows = torch.cat([last_tokens.unsqueeze(1), slot_tokens[:, :-1]], dim=1)  # (B, K)
        embedded = self.embed_scale * F.embedding(
            follows, self.verifier.embed_tokens.weight.detach(), padding_idx=self.padding_idx)
        return hidden + F.pad(embedded, (0, 0, 1, 0))  # the anchor row is unchanged

    def forward(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                encoder_out: Dict[str, List[Tensor]], num_slots: int,
                rows: Optional[Tensor] = None) -> Tensor:
        """Scores K draft slots with the first pass alone (training and reference
        path; decoding uses :mod:`nmt_specdec.decoding.passes.draft_pass`
        on the same weights).

        Args:
            states, last_tokens, positions: see :meth:`block_inputs`, (B', ...).
            encoder_out: fairseq encoder output.
            num_slots: K.
            rows: (B',) encoder row of each block (several blocks may share a
                sentence); None when blocks and encoder rows coincide.

        Returns:
            (B', K, V) logits over the draft vocabulary.
        """
        return self.forward_refined(states, last_tokens, positions, encoder_out, num_slots,
                                    rows)[0]

    def forward_refined(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                        encoder_out: Dict[str, List[Tensor]], num_slots: int,
                        rows: Optional[Tensor] = None, slot_tokens: Optional[Tensor] = None
                        ) -> Tuple[Tensor, Optional[Tensor]]:
        """(first-pass logits, refined logits) (B', K, V); the second is None
        without refinement layers or ``slot_tokens`` (B', K), the tokens the
        refinement conditions on (training: the targets)."""
        x = self.block_inputs(states, last_tokens, positions, num_slots)
        x = self._dropout(x).transpose(0, 1)  # (K+1, B', C)
        run = self._layer_runner(encoder_out, rows)
        for layer in self.layers:
            x = run(layer, x, None)  # no self-attention mask: the block is bidirectional
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        first = project_slots(x[1:], self.output_weight())  # (B', K, V)
        if not len(self.refine_layers) or slot_tokens is None:
            return first, None
        y = self.refine_inputs(x.transpose(0, 1), last_tokens, slot_tokens)
        y = self._dropout(y).transpose(0, 1)
        causal = torch.triu(y.new_full((y.size(0), y.size(0)), float("-inf")), 1)
        for layer in self.refine_layers:
            y = run(layer, y, causal)
        if self.refine_norm is not None:
            y = self.refine_norm(y)
        return first, project_slots(y[1:], self.output_weight())

    def _layer_runner(self, encoder_out: Dict[str, List[Tensor]], rows: Optional[Tensor]
                      ) -> Callable[[nn.Module, Tensor, Optional[Tensor]], Tensor]:
        """``run(layer, x, self_attn_mask)`` for the head's layers over (T, B', C) blocks.

        Blocks that share a sentence (``rows``) read the source's keys and values
        projected once per sentence (:mod:`.train_layers`); otherwise, or for a
        layer option that module does not implement, the fairseq layer runs on
        each block's own copy of the source."""
        enc = encoder_out["encoder_out"][0]  # (S, B, C)
        pad = encoder_out["encoder_padding_mask"]
        enc_pad = pad[0] if pad else None
        if rows is not None and all(map(train_layers.supports, self.all_layers())):
            def shared(layer, x, mask):
                return train_layers.decoder_layer(
                    layer, x, train_layers.source_rows(layer, enc, enc_pad, rows), mask)
            return shared
        if rows is not None:
            enc = enc.index_select(1, rows)
            enc_pad = None if enc_pad is None else enc_pad.index_select(0, rows)
        return lambda layer, x, mask: layer(x, enc, enc_pad, self_attn_mask=mask)[0]

    def _dropout(self, x: Tensor) -> Tensor:
        return train_layers.dropout(x, self.dropout.p, self.dropout.training)

    def all_layers(self) -> List[nn.Module]:
        return [*self.layers, *self.refine_layers]
