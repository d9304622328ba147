"""The checks every rendered repository passes before anything is written: each config.pbtxt
parses as a Triton ModelConfig (tritonclient's model_config_pb2) named as its directory, the models
agree on their transaction policy, ensemble steps exist, and no template syntax is left."""

from __future__ import annotations

from typing import Any

from toolkit.repo.errors import RenderError
from toolkit.repo.templates import RepoFile


def parse_configs(files: list[RepoFile]) -> dict[str, Any]:
    """Parse every config.pbtxt as a Triton ModelConfig (before anything is written)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    configs = {}
    for f in files:
        if not f.rel.endswith("/config.pbtxt"):
            continue
        cfg = model_config_pb2.ModelConfig()
        try:
            text_format.Parse(f.text, cfg)
        except text_format.ParseError as e:
            raise RenderError(
                f"rendered config.pbtxt is not a valid ModelConfig: {e}",
                model=f.model,
                file=f.rel,
                line=e.GetLine() if hasattr(e, "GetLine") else None,
                hint=f"rendered from {f.source}; this is a bug in sdtk's templates",
            ) from None
        directory = f.rel.split("/", 1)[0]
        if cfg.name != directory:
            raise RenderError(
                f"config name '{cfg.name}' differs from its directory '{directory}'",
                model=f.model,
                file=f.rel,
            )
        configs[directory] = cfg
    return configs


def check_configs(
    configs: dict[str, Any], *, decoupled: bool, llm_models: list[str], bls: str | None
) -> None:
    """The models must agree on the transaction policy; ensemble steps must exist."""
    for name in [*llm_models, *([bls] if bls else [])]:
        cfg = configs[name]
        if cfg.model_transaction_policy.decoupled != decoupled:
            raise RenderError(
                f"decoupled is {cfg.model_transaction_policy.decoupled} but serving.decoupled is {decoupled}: "
                "the BLS calls the LLM models with its own transaction policy, so they must agree",
                model=name,
                file=f"{name}/config.pbtxt",
            )
    for name, cfg in configs.items():
        if cfg.platform != "ensemble":
            continue
        for step in cfg.ensemble_scheduling.step:
            if step.model_name not in configs:
                raise RenderError(
                    f"ensemble step calls model '{step.model_name}', which the repository does not have",
                    model=name,
                    file=f"{name}/config.pbtxt",
                )


def scan(files: list[RepoFile]) -> None:
    """No template syntax may be left in anything sdtk rendered or wrote."""
    for f in files:
        if not f.scan:
            continue
        for number, line in enumerate(f.text.splitlines(), 1):
            for token in ("${", "{{", "{%"):
                if token in line:
                    raise RenderError(
                        f"'{token}' left in the output: {line.strip()[:120]}",
                        model=f.model,
                        file=f.rel,
                        line=number,
                        # A path holding the token (a directory named `${HOME}x`) lands here too:
                        # the file could not be told apart from an unfilled template.
                        hint=f"from {f.source}; every value must be filled, and no path sdtk writes "
                        f"into it (output directory, engines, checkpoints) may contain {token!r}",
                    )
