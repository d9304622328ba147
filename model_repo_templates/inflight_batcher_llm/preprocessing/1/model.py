"""sdtk preprocessing model: text → token ids, the first step of the ensemble and of the BLS.

A thin adapter: the logic is sdtk's toolkit/serving/preprocessing.py, rendered next to this file as
the package `sdtk_serving`.
"""

from sdtk_serving.preprocessing import PreprocessingModel


class TritonPythonModel(PreprocessingModel):
    """Triton's entry point: initialize, execute (see PreprocessingModel)."""
