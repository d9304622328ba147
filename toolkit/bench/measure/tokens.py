"""Counting output tokens with the deployment's tokenizer, when the server does not count them.

The tokenizer comes from the recipe (`models.tokenizer`, else the target), from the recipe
`sdtk deploy` saved next to state.json, or from `--tokenizer PATH_OR_ID` for a bare URL.
transformers is imported only when a count is actually needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import UsageError

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


class TokenizerUnavailable(UsageError):
    """The tokenizer named for counting cannot be loaded."""


def recipe_tokenizer(recipe: Recipe | None) -> str | None:
    """The tokenizer a recipe serves with: a local directory, or a hub id[@revision]."""
    if recipe is None:
        return None
    src = recipe.models.tokenizer or recipe.models.target
    path = recipe.local_path(src)
    if path is not None:
        return str(path)
    return f"{src.repo}@{src.revision}" if src.revision else src.repo


class TokenCounter:
    """`count(text)`: tokens of `text` without special tokens (BOS is the prompt's, not output)."""

    def __init__(self, ref: str | Path):
        self.ref = str(ref)
        self._tok: Any = None

    def load(self) -> TokenCounter:
        if self._tok is not None:
            return self
        ref, revision = self.ref, None
        if not Path(ref).expanduser().exists() and "@" in ref:
            ref, revision = ref.rsplit("@", 1)
        try:
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            self._tok = AutoTokenizer.from_pretrained(
                str(Path(ref).expanduser()) if Path(ref).expanduser().exists() else ref, revision=revision
            )
        except Exception as e:  # noqa: BLE001 - any loading failure is the same user error
            raise TokenizerUnavailable(
                f"cannot load the tokenizer '{self.ref}' to count output tokens: {type(e).__name__}: {e}",
                hint="pass --tokenizer with a local tokenizer directory (or a cached hub id), "
                "or --allow-inexact",
            ) from None
        return self

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        self.load()
        return len(self._tok(text, add_special_tokens=False)["input_ids"])

    def __repr__(self) -> str:
        return f"TokenCounter({self.ref!r})"
