"""What every build stage shares: the recipe, the resolved backend and sources, and the paths."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from toolkit import compat, containers, modes
from toolkit.hub import Resolved
from toolkit.recipe import Recipe

# Where the convert_checkpoint.py scripts are: the container's facts (toolkit/data/containers/; NGC
# `tritonserver:<yy.mm>-trtllm-python-py3` has them at /app/examples: tensorrtllm_backend
# dockerfile/Dockerfile.triton.trt_llm_backend, `WORKDIR /app … COPY …/examples examples`). Pip installs
# ship no examples: there, clone the matching TensorRT-LLM tag and set TRTLLM_EXAMPLES_DIR to its examples/.
EXAMPLES_ENV = "TRTLLM_EXAMPLES_DIR"

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# trtllm-build's --speculative_decoding_mode names; sdtk's own for modes trtllm-build lacks
# (docs/contracts.md).
SPEC_MODE_NAMES = modes.SPEC_MODE_NAMES


@dataclass(frozen=True)
class Examples:
    """TensorRT-LLM's examples dir: as commands name it, where it is on this machine, and why."""

    path: Path  # in the commands (inside the container)
    host: Path  # where its files are checked (under --container-root when one is given)
    why: str


def examples_dir(layout: containers.Layout | None = None) -> Examples:
    """Where TensorRT-LLM's examples (the convert_checkpoint.py scripts) live: $TRTLLM_EXAMPLES_DIR,
    else the container's facts."""
    env = os.environ.get(EXAMPLES_ENV)
    if env:
        p = Path(env).expanduser()
        return Examples(p, p, f"${EXAMPLES_ENV}")
    lay = layout or containers.layout()
    return Examples(
        Path(lay.examples_dir),
        lay.host(lay.examples_dir),
        f"{lay.describe()}: {lay.facts.cite('examples_dir')}; set ${EXAMPLES_ENV} to override",
    )


@dataclass
class ScriptVar:
    """A shell variable the runbook defines before the steps (e.g. a checkpoint fetched at run time)."""

    name: str
    expr: str  # shell expression, e.g. "$(fetch lmsys/vicuna-7b-v1.3)"
    comment: str
    needs_fetch: bool = False


@dataclass
class BuildContext:
    recipe: Recipe
    name: str
    dry_run: bool
    # The support matrix applied once (toolkit.compat): the backend, the TensorRT-LLM version planned
    # for (installed wins over the recipe) and why; the preflight reads it, it does not ask again.
    resolution: compat.Resolution
    installed_version: str | None
    root: Path  # workdir/<recipe name>
    # where scripts and binaries are (toolkit/data/containers/)
    container: containers.Layout = field(default_factory=lambda: containers.layout())
    sources: dict[str, Resolved] = field(default_factory=dict)
    dtype: str = "float16"
    dtype_source: str = "default"
    script_vars: dict[str, ScriptVar] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def examples(self) -> Examples:
        return examples_dir(self.container)

    @property
    def backend(self) -> str:
        return self.resolution.backend

    @property
    def why(self) -> str:
        return self.resolution.why

    @property
    def version(self) -> str | None:
        """The TensorRT-LLM version planned for."""
        return self.resolution.version

    @property
    def version_source(self) -> str:
        """installed | recipe | none"""
        return self.resolution.version_source

    @property
    def mode(self) -> str:
        return self.recipe.mode

    @property
    def engines(self) -> Path:
        return self.root / "engines"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def world_size(self) -> int:
        return self.recipe.parallel.tp * self.recipe.parallel.pp

    def tokenizer_source(self) -> Resolved:
        """The tokenizer the deployment serves with: models.tokenizer, else the target's."""
        return self.sources.get("tokenizer") or self.sources["target"]

    def source_arg(self, role: str) -> str:
        """The local directory of a source for a command line; in a dry run of an unresolved hub
        source, a shell variable that the runbook fills by downloading it."""
        r = self.sources[role]
        if r.path is not None:
            return str(r.path)
        if r.convert_to is not None:  # a GGUF file: where `sdtk build` converts it
            return str(r.convert_to)
        var = re.sub(r"[^A-Z0-9]", "_", role.upper()) + "_DIR"
        if var not in self.script_vars:
            args = " ".join(shlex.quote(x) for x in (r.repo or r.ref, r.revision or "") if x)
            self.script_vars[var] = ScriptVar(
                var, f'"$(fetch {args})"', f"{role}: {r.ref} ({r.reason or 'not resolved'})", needs_fetch=True
            )
        return "${" + var + "}"
