"""Reading engine directories: the `config.json` every backend's build writes (docs/contracts.md).

TensorRT-LLM engines, llmapi option directories and reference "engines" are all read here, the
same way, so that the repository's values (max batch size, dtype, parallelism, speculative mode)
come from what was actually built, not from what the recipe says now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.modes import ENGINE_MODE_FLAGS
from toolkit.repo.errors import RenderError

TRITON_DTYPES = {"float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "float32": "TYPE_FP32"}


@dataclass(frozen=True)
class EngineInfo:
    """One engine directory and its config.json."""

    role: str  # "target" | "draft"
    path: Path  # absolute
    config: dict[str, Any]

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    def _section(self, name: str) -> dict[str, Any]:
        value = self.config.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def build(self) -> dict[str, Any]:
        return self._section("build_config")

    @property
    def pretrained(self) -> dict[str, Any]:
        return self._section("pretrained_config")

    @property
    def reference(self) -> dict[str, Any] | None:
        return self.config.get("reference") if isinstance(self.config.get("reference"), dict) else None

    @property
    def llmapi(self) -> dict[str, Any] | None:
        return self.config.get("llmapi") if isinstance(self.config.get("llmapi"), dict) else None

    def number(self, key: str, default: int | None = None) -> int:
        """An integer of build_config; RenderError when it is missing or not a positive integer."""
        value = self.build.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RenderError(
                f"build_config.{key} is {value!r}, not a non-negative integer",
                file=self.config_path,
                hint=f"rebuild the {self.role} engine (`sdtk build`)",
            )
        return value

    @property
    def max_batch_size(self) -> int:
        value = self.number("max_batch_size")
        if value < 1:
            raise RenderError(
                "build_config.max_batch_size must be at least 1",
                file=self.config_path,
                hint=f"rebuild the {self.role} engine",
            )
        return value

    @property
    def max_draft_len(self) -> int:
        """build_config.max_draft_len (trtllm-build's engines, the llmapi build); a reference
        directory states the draft length once, in its recipe section (`reference.speculative`,
        by the mode's draft_len rule), and a draft model there takes no draft tokens (0)."""
        ref = self.reference
        if ref is None or "max_draft_len" in self.build:
            return self.number("max_draft_len", 0)
        if self.role != "target":
            return 0
        return int(_speculative(ref.get("speculative"), self.config_path).draft_len)

    @property
    def max_beam_width(self) -> int:
        return self.number("max_beam_width", 1) or 1

    @property
    def speculative_decoding_mode(self) -> str | None:
        """trtllm-build's name of the mode (None: plain). trtllm-build itself stores the
        SpeculativeDecodingMode IntFlag value; sdtk's builds store the name."""
        value = self.build.get("speculative_decoding_mode")
        if isinstance(value, int) and not isinstance(value, bool):
            value = ENGINE_MODE_FLAGS.get(value, str(value))
        elif isinstance(value, str) and value.startswith("SpeculativeDecodingMode."):
            value = value.removeprefix("SpeculativeDecodingMode.").lower()
        return None if value in (None, "", "none") else str(value)

    @property
    def dtype(self) -> str:
        return str(self.pretrained.get("dtype") or "float16")

    @property
    def world_size(self) -> int:
        mapping = self.pretrained.get("mapping") or {}
        tp, pp = int(mapping.get("tp_size", 1) or 1), int(mapping.get("pp_size", 1) or 1)
        return int(mapping.get("world_size", tp * pp) or tp * pp)


def _speculative(data: Any, config_path: Path) -> Any:
    """A reference directory's `speculative` section as its recipe class; RenderError if invalid."""
    from pydantic import TypeAdapter, ValidationError

    from toolkit.recipe import Speculative

    try:
        return TypeAdapter(Speculative).validate_python(data or {"mode": "none"})
    except ValidationError as e:
        raise RenderError(
            f"reference.speculative is invalid: {e.errors()[0]['msg']}",
            file=config_path,
            hint="rebuild the engine directory (`sdtk build`)",
        ) from None


def read_engine(path: Path | str, role: str) -> EngineInfo:
    """The engine directory `path` for `role`; RenderError when config.json is missing or bad."""
    path = Path(path).expanduser().absolute()
    cfg_path = path / "config.json"
    try:
        text = cfg_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RenderError(
            f"the {role} engine directory has no config.json",
            file=cfg_path,
            hint="run `sdtk build` for this recipe first",
        ) from None
    except OSError as e:
        raise RenderError(f"cannot read the {role} engine config: {e.strerror}", file=cfg_path) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise RenderError(
            f"invalid JSON (column {e.colno}): {e.msg}",
            file=cfg_path,
            line=e.lineno,
            hint=f"rebuild the {role} engine",
        ) from None
    if not isinstance(config, dict):
        raise RenderError("the engine config is not a JSON object", file=cfg_path)
    if not isinstance(config.get("build_config"), dict):
        raise RenderError(
            "the engine config has no build_config section",
            file=cfg_path,
            hint="point at an engine directory written by trtllm-build or `sdtk build`",
        )
    return EngineInfo(role=role, path=path, config=config)
