"""The reference runtime's proposers: one per method, in toolkit/reference/<mode>.py, chosen by
the consumer (ReferenceRuntime) by the mode's name through the registry (toolkit.modes), as
vLLM's `create_proposer` (vllm/v1/spec_decode/) and TensorRT-LLM's speculative factory
(tensorrt_llm/_torch/speculative/) choose one per method and refuse an unsupported one.

A proposer module defines
- `speculator(spec, runtime, sampling, draft)`: the Speculator of a recipe `speculative` section
  (raises GenerationError where the runtime lacks what the mode needs);
- `load_weights(path, target, dtype, spec)`, for a mode whose ModeInfo names a `source`: that
  source's weights, loaded for the target model `target` and kept in `ReferenceRuntime.weights`
  under the source's name (the recipe's `models.<source>` key).

A mode whose `ModeInfo.reference` is unsupported has no proposer: asking for it raises the
CompatError that Support states, with its fix. Nothing here names a mode.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import torch

from toolkit import modes
from toolkit.errors import CompatError, ModelError
from toolkit.reference.core import Speculator
from toolkit.reference.sampling import SamplingParams


class Proposer(Protocol):
    """What a toolkit/reference/<mode>.py module offers the runtime."""

    def speculator(self, spec: Any, runtime: Any, sampling: SamplingParams, draft: Any) -> Speculator:
        """The mode's Speculator for `spec`; `draft`: the batch's own draft LM (None: the runtime's)."""
        ...

    def load_weights(self, path: Path, target: Any, dtype: torch.dtype, spec: Any) -> Any:
        """The mode's source checkpoint at `path`, fit to the target model `target`, in `dtype`."""
        ...


def proposer(name: str) -> ModuleType:
    """The proposer module of mode `name`; a CompatError for an unknown mode or one the reference
    runtime does not implement (never another mode's proposer)."""
    info = modes.mode(name, backend="reference").info
    if not info.reference.supported:
        raise CompatError(
            f"the reference runtime does not run mode {name}: {info.reference.reason}",
            mode=name,
            backend="reference",
            hint=info.reference.fix,
        )
    module = importlib.import_module(f"{__package__}.{name}")
    hooks = ("speculator", "load_weights") if info.source is not None else ("speculator",)
    missing = [h for h in hooks if not callable(getattr(module, h, None))]
    if missing:
        raise TypeError(f"{module.__name__} (mode {name!r}) lacks {', '.join(missing)} (a Proposer's)")
    return module


def loader(source: str, mode: str) -> ModuleType:
    """The proposer that loads the `source` weights: mode `mode`'s own when it reads that source,
    else the first mode in the registry's order that reads it and runs on the reference runtime
    (a runtime may hold every source, each mode's requests picking theirs)."""
    if source not in modes.SOURCES:
        raise ModelError(
            f"unknown weights {source!r} for the reference runtime",
            hint="the weights are: " + ", ".join(modes.SOURCES),
        )
    if modes.info(mode).source == source:
        return proposer(mode)
    found = next(m.name for m in modes.REGISTRY if m.source == source and m.reference.supported)
    return proposer(found)


def speculator(spec: Any, runtime: Any, sampling: SamplingParams, draft: Any = None) -> Speculator:
    """The Speculator of recipe section `spec`, from its mode's proposer."""
    made: Speculator = proposer(spec.mode).speculator(spec, runtime, sampling, draft)
    return made
