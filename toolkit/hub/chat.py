"""Chat templates: an instruct model's prompts go through its tokenizer's chat template wherever a
served client's would (an OpenAI-style chat frontend renders the conversation with the template
before tokenizing), so that sdtk measures and checks the text such a client sends.

`serving.chat_template` in the recipe: `auto` (the default) applies the template when the
tokenizer has one, `on` requires one, `off` sends prompts as written. Each prompt becomes one user
turn, rendered with `add_generation_prompt=True` as text; the deployment's preprocessing then
tokenizes that text as it tokenizes any other. Tokenizers without a template (the tiny family's)
change nothing. transformers is imported only when a tokenizer is at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import ModelError

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

SETTINGS = ("auto", "on", "off")


@dataclass(frozen=True)
class ChatFormat:
    """How prompts are sent: through a chat template or as written, and why."""

    applied: bool
    why: str
    tokenizer: Any = field(default=None, repr=False, compare=False)
    # Text the template writes that tokenizing adds again: a template that starts with the BOS
    # token's text (Llama 3's `<|begin_of_text|>`) for a tokenizer that adds BOS itself. Chat
    # frontends tokenize rendered text without special tokens; the deployment's preprocessing adds
    # them (serving.add_special_tokens), so the rendered text leaves the BOS out.
    drop_prefix: str = ""

    def render(self, prompt: str) -> str:
        """The text a chat client sends for `prompt` as one user turn (unchanged when not applied)."""
        if not self.applied:
            return prompt
        text = str(
            self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        )
        if self.drop_prefix and text.startswith(self.drop_prefix):
            text = text[len(self.drop_prefix) :]
        return text

    def render_all(self, prompts: list[str] | tuple[str, ...]) -> list[str]:
        return [self.render(p) for p in prompts]

    @property
    def label(self) -> str:
        """One line for reports: `chat template: applied (...)` / `chat template: not applied (...)`."""
        return f"chat template: {'applied' if self.applied else 'not applied'} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "why": self.why}


NOT_APPLIED = ChatFormat(False, "no recipe at hand")


def for_tokenizer(tokenizer: Any, setting: str = "auto", *, where: str = "the tokenizer") -> ChatFormat:
    """The format for a loaded tokenizer under `setting` (auto | on | off)."""
    if setting not in SETTINGS:
        raise ValueError(f"chat_template must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting == "off":
        return ChatFormat(False, "serving.chat_template: off")
    has = bool(getattr(tokenizer, "chat_template", None))
    if has:
        return ChatFormat(
            True, f"{where}'s template, serving.chat_template: {setting}", tokenizer, _added_bos(tokenizer)
        )
    if setting == "on":
        raise ModelError(
            f"serving.chat_template is 'on' but {where} has no chat template",
            hint="set serving.chat_template: auto or off, or use a tokenizer that ships a template",
        )
    return ChatFormat(False, f"auto: {where} has no chat template")


def _added_bos(tokenizer: Any) -> str:
    """The BOS token's text when tokenizing adds it by itself, else ""."""
    bos, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    if not bos or bos_id is None:
        return ""
    ids = tokenizer("a")["input_ids"]
    return str(bos) if ids and ids[0] == bos_id else ""


def tokenizer_dir(recipe: Recipe) -> Path | None:
    """The local directory of the recipe's tokenizer (models.tokenizer, else the target's), if it
    is on this machine (a GGUF source's conversion, made now unless cached)."""
    source = recipe.models.tokenizer or recipe.models.target
    if source.gguf is not None:  # converted now if need be, as `sdtk build` would (nothing is downloaded)
        from toolkit.hub import gguf

        try:
            return gguf.ensure_converted(source.gguf, recipe.base_dir)
        except ModelError:
            return None
    if source.repo is not None:
        from toolkit.hub.resolution import resolve

        r = resolve(source, role="tokenizer", recipe=recipe, fetch="none")
        return r.path
    path = recipe.local_path(source)
    return path if path is not None and path.is_dir() else None


def for_recipe(recipe: Recipe | None) -> ChatFormat:
    """The recipe's chat format (serving.chat_template, its tokenizer); raises ModelError for `on`
    without a template, or without the tokenizer on this machine."""
    if recipe is None:
        return NOT_APPLIED
    setting = recipe.serving.chat_template
    if setting == "off":
        return ChatFormat(False, "serving.chat_template: off")
    d = tokenizer_dir(recipe)
    if d is None:
        if setting == "on":
            raise ModelError(
                "serving.chat_template is 'on' but the recipe's tokenizer is not on this machine",
                hint="run `sdtk build` first (it fetches or converts the checkpoint)",
            )
        return ChatFormat(False, "auto: the tokenizer is not on this machine")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load the tokenizer at {d}: {e}") from None
    return for_tokenizer(tok, setting)
