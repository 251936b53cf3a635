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
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from nmt_specdec.decoding.positions import embed_positions_at

FORMAT_VERSION = 2


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
    """

    def __init__(self, verifier: nn.Module, num_layers: int, untie_output: bool = False,
                 vocab_size: int = 0):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"--draft-layers must be >= 1, got {num_layers}")
        full_vocab = verifier.output_projection.out_features
        if vocab_size < 0 or vocab_size > full_vocab:
            raise ValueError(f"--draft-vocab-size must be in 0..{full_vocab}, got {vocab_size}")
        if verifier.project_in_dim is not None or verifier.project_out_dim is not None:
            raise ValueError("the draft head needs decoder_input_dim == decoder_embed_dim")
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

    def forward(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                encoder_out: Dict[str, List[Tensor]], num_slots: int,
                rows: Optional[Tensor] = None) -> Tensor:
        """Scores K draft slots (training and reference path; decoding uses
        :mod:`nmt_specdec.decoding.backends.torch.draft_pass` on the same weights).

        Args:
            states, last_tokens, positions: see :meth:`block_inputs`, (B', ...).
            encoder_out: fairseq encoder output.
            num_slots: K.
            rows: (B',) encoder row of each block (several blocks may share a
                sentence); None when blocks and encoder rows coincide.

        Returns:
            (B', K, V) logits over the draft vocabulary.
        """
        x = self.block_inputs(states, last_tokens, positions, num_slots)
        x = self.dropout(x).transpose(0, 1)  # (K+1, B', C)
        enc = encoder_out["encoder_out"][0]  # (S, B, C)
        pad = encoder_out["encoder_padding_mask"]
        enc_pad = pad[0] if pad else None
        if rows is not None:
            enc = enc.index_select(1, rows)
            enc_pad = None if enc_pad is None else enc_pad.index_select(0, rows)
        for layer in self.layers:
            # No self-attention mask: the block is bidirectional.
            x, _, _ = layer(x, enc, enc_pad)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        slots = x[1:].transpose(0, 1)  # (B', K, C)
        return F.linear(slots, self.output_weight())
