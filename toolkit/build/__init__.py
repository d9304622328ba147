"""`sdtk build`: Hugging Face checkpoints → TensorRT-LLM artifacts (engine, llmapi) or reference dirs.

The CLI calls `build(recipe, backend=..., workdir=..., dry_run=...)` and prints
`result.to_dict()` (--json) or `result.script` (--dry-run).
"""

from toolkit.build.core import BuildResult, build, stderr_progress
from toolkit.build.preflight import CheckResult, PreflightFailed

__all__ = ["BuildResult", "CheckResult", "PreflightFailed", "build", "stderr_progress"]
