"""A LLaMA-style decoder that InfiniPipe's executor runs in pipeline stages.

Everything works on *packed* token rows: a chunk is a 1-D tensor of T token ids (or a [T, hidden]
activation) holding its slices back to back, with no padding and no batch dimension. The chunk's
`ChunkContext` (the executor's own type, infinipipe._C.runtime.ChunkContext) says which rows
belong to which sequence and where in it they start, and runs the chunk's attention.

The numerics follow transformers' `LlamaForCausalLM` (RMSNorm and rotary frequencies computed in
at least float32, SwiGLU MLP, grouped-query attention, untied LM head, no biases), so that weights
convert by name (`to_hf_state_dict`, `from_hf_state_dict`) and logits agree.

One concept per module: config (LlamaConfig), context (ChunkContext, Slice), attention (the
attention cores a stage may use instead of the chunk's), layers (norm, rotary, attention and MLP
blocks), stage (LlamaStage and the layer split), weights (initialisation and state dicts), loss
(next-token targets and loss, the unpipelined reference).
"""

from .attention import AttentionFn, reference_chunk_attention, varlen_causal_attention
from .config import LlamaConfig
from .context import ChunkContext, Slice
from .layers import (
    MLP,
    Attention,
    DecoderLayer,
    RMSNorm,
    apply_rotary,
    rotary_cos_sin,
    rotary_inv_freq,
    rotate_half,
)
from .loss import (
    IGNORE_INDEX,
    chunk_loss,
    chunk_targets,
    count_targets,
    pack_sequences,
    reference_loss,
)
from .stage import (
    LlamaStage,
    build_full_model,
    build_stage,
    even_layer_split,
    layer_ranges,
    split_stages,
)
from .weights import from_hf_state_dict, init_weights, stage_state_dict, to_hf_state_dict

__all__ = [
    "IGNORE_INDEX",
    "LlamaConfig",
    "Slice",
    "ChunkContext",
    "AttentionFn",
    "RMSNorm",
    "rotary_inv_freq",
    "rotary_cos_sin",
    "rotate_half",
    "apply_rotary",
    "varlen_causal_attention",
    "reference_chunk_attention",
    "Attention",
    "MLP",
    "DecoderLayer",
    "LlamaStage",
    "even_layer_split",
    "layer_ranges",
    "split_stages",
    "build_stage",
    "build_full_model",
    "init_weights",
    "stage_state_dict",
    "to_hf_state_dict",
    "from_hf_state_dict",
    "pack_sequences",
    "count_targets",
    "chunk_targets",
    "chunk_loss",
    "reference_loss",
]
