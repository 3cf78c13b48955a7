"""Models that InfiniPipe's executor runs in pipeline stages.

llama/             the LLaMA decoder in Python (LlamaConfig, LlamaStage)
cpp.py             the same decoder as a C++ stage module (cpp.stage_factory)
hf/                unmodified transformers decoders (hf.stage_factory)
stage_protocol.py  what the executor runs of a stage, and StageFactory: how a rank builds its own
"""
