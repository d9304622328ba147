"""sdtk postprocessing model: token ids → text, the last step of the ensemble and of the BLS.

A thin adapter: the logic is sdtk's toolkit/serving/postprocessing.py, rendered next to this file as
the package `sdtk_serving`.
"""

from sdtk_serving.postprocessing import PostprocessingModel


class TritonPythonModel(PostprocessingModel):
    """Triton's entry point: initialize, execute (see PostprocessingModel)."""
