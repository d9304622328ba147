"""The reference runtime: lossless speculative decoding in PyTorch on CPU (float32, batch 1).

Imports torch and transformers; nothing on the CLI's import path imports this package.
"""

from toolkit.reference.runtime import PLAIN, GenerationResult, ReferenceRuntime, VerifyResult
from toolkit.reference.sampling import SamplingParams
from toolkit.reference.stats import SpecStats

__all__ = ["PLAIN", "GenerationResult", "ReferenceRuntime", "SamplingParams", "SpecStats", "VerifyResult"]
