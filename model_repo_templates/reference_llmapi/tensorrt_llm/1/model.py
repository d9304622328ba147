"""sdtk reference llmapi model: the tensor contract and behaviour of TensorRT-LLM's LLM-API Triton
model (`triton_backend/all_models/llmapi/tensorrt_llm/1/model.py`), served by sdtk's PyTorch reference
runtime (toolkit.reference) instead of `tensorrt_llm.LLM()`.

A thin adapter: the logic is sdtk's toolkit/serving/llmapi.py, rendered next to this file as the
package `sdtk_serving`; it reads `model.yaml` from this directory, as upstream's model.py does.
Needs sdtk (toolkit.reference) in the Python that runs Triton's Python backend.
"""

from sdtk_serving.llmapi import LlmapiModel


class TritonPythonModel(LlmapiModel):
    """Triton's entry point: auto_complete_config, initialize, execute, finalize (see LlmapiModel)."""
