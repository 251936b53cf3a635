"""``specdec_transformer``: a fairseq Transformer with a SpecDec draft head.

The model's ordinary forward and incremental decoding are the AR path (the
verifier), so stock ``fairseq-generate --beam N`` works on these checkpoints.
The draft head (:class:`nmt_specdec.model.draft_head.DraftHead`, format 2) reads the
shared encoder output and the verifier's top-layer states. A checkpoint with a
format-1 head (which re-encoded the prefix) is refused with a one-line error.
"""

from __future__ import annotations

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from nmt_specdec.checkpoints import specdec_task_for
from nmt_specdec.decoding.options import DecodingOptions, flag_names
from nmt_specdec.model.draft_head import FORMAT_VERSION, DraftHead
from nmt_specdec.errors import CheckpointError, UserError


@register_model("specdec_transformer")
class SpecDecTransformerModel(TransformerModel):
    """Shared encoder + AR verifier decoder + NAR draft head."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--draft-layers", type=int, metavar="N",
                            help="number of draft-head (NAR) decoder layers")
        parser.add_argument("--draft-block-size", type=int, metavar="K",
                            help="K: [MASK] slots the draft head fills per iteration")
        parser.add_argument("--untie-draft-output", action="store_true",
                            help="give the draft head its own output projection "
                                 "(initialised from the verifier's)")
        parser.add_argument("--draft-vocab-size", type=int, metavar="N",
                            help="draft only the N most frequent tokens (the first N "
                                 "dictionary ids; 0 = all); the verifier still checks "
                                 "against the full vocabulary, so output is unchanged")
        parser.add_argument("--draft-refine-layers", type=int, metavar="N",
                            help="layers of a causal refinement pass in which each slot "
                                 "reads the draft before it (0 = none)")
        parser.add_argument("--draft-refine-steps", type=int, metavar="R",
                            help="times decoding runs the refinement pass (K makes the "
                                 "drafts those of an autoregressive drafter)")

    @classmethod
    def build_model(cls, args, task):
        specdec_base_architecture(args)
        if args.draft_block_size < 1:
            raise UserError(f"--draft-block-size must be >= 1, got {args.draft_block_size}")
        model = super().build_model(args, task)
        model.draft_head = DraftHead(model.decoder, args.draft_layers, args.untie_draft_output,
                                     args.draft_vocab_size, args.draft_refine_layers,
                                     args.draft_refine_steps)
        model.draft_block_size = args.draft_block_size
        return model

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt",
                        data_name_or_path=".", **kwargs):
        """fairseq's hub loader; the decoding flags (``spec_decoding=``, ``spec_k=``,
        ``backend=``, ``draft_head=``...) are set on the task config after loading, because
        fairseq applies keyword overrides only to options the checkpoint saved, and
        checkpoints older than an option lack it. A stock transformer's ``translation``
        task becomes ``translation_specdec`` for them."""
        late = {name: kwargs.pop(name) for name in flag_names() if name in kwargs}
        hub = super().from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path,
                                      **kwargs)
        if not late:
            return hub
        hub.task = specdec_task_for(hub.task)  # a stock translation task decodes through ours
        for name, value in late.items():
            setattr(hub.task.cfg, name, value)
        DecodingOptions.from_flags(hub.task.cfg)  # a bad value fails here, in one line
        return hub

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        draft_keys = [key for key in state_dict if key.startswith("draft_head.")]
        if draft_keys and "draft_head.format_version" not in state_dict:
            raise CheckpointError(
                "this checkpoint's draft head is format 1 (it re-encoded the prefix every "
                f"iteration); nmt-specdec now needs format {FORMAT_VERSION}: train a new head "
                "onto its verifier (nmt-specdec-add-draft-head, or "
                "--init-from-ar-checkpoint with the exported verifier)")
        return super().load_state_dict(state_dict, strict, model_cfg, args)

    def verifier_parameters(self):
        """Every parameter except the draft head's own."""
        own = {id(p) for p in self.draft_head.parameters()}
        return [p for p in self.parameters() if id(p) not in own]

    def freeze_verifier(self) -> None:
        """Trains only the draft head: encoder, verifier and embeddings stay fixed."""
        for param in self.verifier_parameters():
            param.requires_grad_(False)


def _draft_defaults(args, block_size: int) -> None:
    args.draft_layers = getattr(args, "draft_layers", 2)
    args.draft_block_size = getattr(args, "draft_block_size", block_size)
    args.untie_draft_output = getattr(args, "untie_draft_output", False)
    args.draft_vocab_size = getattr(args, "draft_vocab_size", 0)
    args.draft_refine_layers = getattr(args, "draft_refine_layers", 0)
    args.draft_refine_steps = getattr(args, "draft_refine_steps", 1)


@register_model_architecture("specdec_transformer", "specdec_transformer")
def specdec_base_architecture(args):
    _draft_defaults(args, block_size=25)
    base_architecture(args)


@register_model_architecture("specdec_transformer", "specdec_transformer_wmt_en_de")
def specdec_transformer_wmt_en_de(args):
    """Transformer-base (6+6, d=512) verifier with a 2-layer draft head, K=25."""
    _draft_defaults(args, block_size=25)
    transformer_wmt_en_de(args)


@register_model_architecture("specdec_transformer", "specdec_transformer_tiny")
def specdec_transformer_tiny(args):
    """CPU-sized: 3+3 layers, d=256, 2-layer draft head, K=10."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 256)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    _draft_defaults(args, block_size=10)
    base_architecture(args)
