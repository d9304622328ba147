"""sdtk reference tensorrt_llm model: the official `tensorrt_llm` tensor contract, served by
sdtk's PyTorch reference runtime (toolkit.reference) in Triton's Python backend.

A thin adapter: the logic is sdtk's toolkit/serving/reference.py (the parameters and requests it
reads, in-flight batching), generator.py (a request's generation) and responder.py (the Triton
calls after execute()), rendered next to this file as the package `sdtk_serving`. Needs sdtk
(toolkit.reference) in the Python that runs Triton's Python backend.
"""

from sdtk_serving.reference import ReferenceModel


class TritonPythonModel(ReferenceModel):
    """Triton's entry point: initialize, execute, finalize (see ReferenceModel)."""
