"""sdtk: deploy LLMs with speculative decoding on TensorRT-LLM and Triton Inference Server."""

__version__ = "0.1.0"
