"""The error of this package: a repository that cannot be rendered."""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import SdtkError


class RenderError(SdtkError):
    """A model repository that cannot be rendered; names the model, the file and the line."""

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        file: Path | str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ):
        self.model = model
        self.file = Path(file) if file is not None else None
        self.line = line
        where = []
        if model:
            where.append(f"model '{model}'")
        if self.file is not None:
            where.append(f"{self.file}:{line}" if line else str(self.file))
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message, hint=hint)
