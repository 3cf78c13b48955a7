"""HFStage: one pipeline stage of a transformers CausalLM, driven by InfiniPipe's executor.

It holds only its own pieces of the model, under transformers' names (so its state_dict is a
part of the model's): `model.embed_tokens` on the first stage, `model.layers.{i}` for its global
layers i, `model.norm` and `lm_head` on the last, and `model.rotary_emb` (no weights). The
decoder layers are transformers' own modules, called unchanged: rows packed as a batch of one,
`attention_mask=None`, the rotary (cos, sin) of each row's position in its sequence from the
model's own rotary module, and attention routed to the chunk's (attention.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import attention


class HFStage(nn.Module):
    """Stage `stage_index` of `num_stages`: global decoder layers `layer_range`.

    The executor's protocol: num_layers, has_embedding, has_head, embed(tokens [T], ctx),
    layer(local_index, hidden [T, hidden], ctx), head(hidden, ctx) -> logits [T, vocab],
    parameters(); and tied_parameters() for a tie_word_embeddings model split over stages.
    Build it with build.build_stage (or stage_factory), not directly.
    """

    def __init__(
        self,
        config: Any,
        class_name: str,
        stage_index: int,
        num_stages: int,
        layer_range: range,
        layers: list[nn.Module],
        rotary_emb: nn.Module,
        embed_tokens: nn.Module | None = None,
        norm: nn.Module | None = None,
        lm_head: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.config, self.class_name = config, class_name
        self.stage_index, self.num_stages = int(stage_index), int(num_stages)
        self.layer_range = layer_range
        self.num_layers = len(layer_range)
        self.has_embedding, self.has_head = embed_tokens is not None, lm_head is not None
        self.model = nn.Module()
        self.model.embed_tokens = embed_tokens
        self.model.layers = nn.ModuleDict({str(i): m for i, m in zip(layer_range, layers)})
        self.model.norm = norm
        self.model.rotary_emb = rotary_emb
        self.lm_head = lm_head
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        if self.tied and self.has_embedding and self.has_head:
            self.lm_head.weight = self.model.embed_tokens.weight  # one stage: one Parameter
        for module in self.modules():
            if hasattr(module, "gradient_checkpointing"):
                module.gradient_checkpointing = False  # the executor plans recompute itself
            module_config = getattr(module, "config", None)
            if module_config is not None and hasattr(module_config, "_attn_implementation"):
                module_config._attn_implementation = attention.NAME

    def extra_repr(self) -> str:
        return (
            f"{self.class_name} stage {self.stage_index} of {self.num_stages}, layers "
            f"[{self.layer_range.start}, {self.layer_range.stop})"
        )

    def _position_embeddings(self, ctx: Any, hidden: torch.Tensor) -> tuple:
        """(cos, sin) [1, T, head_dim] of the chunk's positions, made once per chunk."""
        cache = getattr(ctx, "hf_position_embeddings", None)
        if cache is None:
            cache = ctx.hf_position_embeddings = {}
        key = (hidden.dtype, hidden.device)
        if key not in cache:
            positions = ctx.positions.to(hidden.device)[None]
            cache[key] = self.model.rotary_emb(hidden[None], positions)
        return cache[key]

    def embed(self, tokens: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        return self.model.embed_tokens(tokens)

    def layer(self, local_index: int, hidden: torch.Tensor, ctx: Any) -> torch.Tensor:
        decoder_layer = self.model.layers[str(self.layer_range[local_index])]
        out = decoder_layer(
            hidden[None],
            attention_mask=None,
            past_key_values=None,
            use_cache=False,
            position_embeddings=self._position_embeddings(ctx, hidden),
            **{attention.CONTEXT_KWARG: ctx, attention.LAYER_KWARG: local_index},
        )
        return (out[0] if isinstance(out, tuple) else out)[0]

    def head(self, hidden: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        return self.lm_head(self.model.norm(hidden))

    @property
    def head_replica(self) -> bool:
        """A spread head's replica of the final norm and the LM head on a stage other than the
        last (docs/design.md, "Spread head")."""
        return self.has_head and self.stage_index != self.num_stages - 1

    def head_parameters(self) -> list[nn.Parameter]:
        """The final norm's and the LM head's parameters (empty without the head)."""
        if not self.has_head:
            return []
        return [*self.model.norm.parameters(), *self.lm_head.parameters()]

    def tied_parameters(self) -> list[tuple[nn.Parameter, int]]:
        """(parameter, stage holding its twin) of the input/output embedding tied across
        stages: stage 0's embedding weight and the last stage's LM head weight. Empty when the
        model does not tie them or one stage holds both (the same Parameter)."""
        if not self.tied or self.num_stages == 1:
            return []
        if self.has_embedding:
            return [(self.model.embed_tokens.weight, self.num_stages - 1)]
        if self.has_head:
            return [(self.lm_head.weight, 0)]
        return []

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """This stage's tensors under transformers' names, as save_pretrained writes them (a
        tied LM head is left out: transformers ties it to the embedding on loading)."""
        state = self.state_dict()
        if self.tied:
            state.pop("lm_head.weight", None)
        if self.head_replica:  # the last stage's copy is the one saved
            state = {
                n: t for n, t in state.items() if not n.startswith(("model.norm.", "lm_head."))
            }
        return state
