"""Models that InfiniPipe's executor runs in pipeline stages: the LLaMA decoder in Python
(models.llama) and in C++ (models.cpp)."""
