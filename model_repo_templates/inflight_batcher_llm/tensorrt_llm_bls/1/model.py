"""sdtk tensorrt_llm_bls model: preprocessing → tensorrt_llm → postprocessing in Python, and the
draft-target loop.

A thin adapter: the logic is sdtk's toolkit/serving/bls.py, rendered next to this file as the
package `sdtk_serving`.
"""

from sdtk_serving.bls import BlsModel


class TritonPythonModel(BlsModel):
    """Triton's entry point: initialize, execute, finalize (see BlsModel)."""
