"""What a render produced (`RenderResult`), and the names of the files it always writes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from toolkit.server.plan import LaunchPlan

MANIFEST = "sdtk-repository.json"
RUNBOOK = "RUNBOOK.md"


@dataclass
class RenderResult:
    """What was rendered, and how to use it."""

    path: Path
    backend: str
    mode: str
    entry_model: str  # the model clients call
    entry_kind: str  # "ensemble" | "bls" | "llmapi": which inputs it takes
    models: list[str]
    decoupled: bool
    files: list[str]  # relative to `path`
    tensorrt_llm_models: list[str]  # the LLM models (launch_triton_server.py --tensorrt_llm_model_name)
    launch: LaunchPlan  # how to launch it: ranks, orchestrator mode, GPUs, pools, env, argv
    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # files to add before launching

    @property
    def runbook(self) -> Path:
        return self.path / RUNBOOK

    @property
    def world_size(self) -> int:
        """tritonserver ranks to launch (1 unless engine leader mode spans GPUs)."""
        return self.launch.ranks

    @property
    def multi_model(self) -> bool:
        """Draft-target on the engine path: orchestrator mode (--multi-model)."""
        return self.launch.multi_model

    @property
    def num_gpus(self) -> int:
        """GPUs the deployment uses (a CUDA memory pool each in orchestrator mode)."""
        return self.launch.num_gpus

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "warnings":  # the launch facts where the manifest has always had them
                d.update(world_size=self.world_size, multi_model=self.multi_model, num_gpus=self.num_gpus)
            if f.name != "launch":
                d[f.name] = copy.deepcopy(getattr(self, f.name))
        d["path"] = str(self.path)
        d["runbook"] = str(self.runbook)
        return d
