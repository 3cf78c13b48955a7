"""Models that InfiniPipe's executor runs in pipeline stages."""

from .llama import (  # noqa: F401
    IGNORE_INDEX,
    ChunkContext,
    LlamaConfig,
    LlamaStage,
    Segment,
    build_full_model,
    build_stage,
    chunk_loss,
    chunk_targets,
    count_targets,
    even_layer_split,
    from_hf_state_dict,
    pack_sequences,
    reference_chunk_attention,
    reference_loss,
    split_stages,
    stage_state_dict,
    to_hf_state_dict,
    varlen_causal_attention,
)
