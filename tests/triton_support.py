"""Shared Triton test support: one availability check, one config builder, live deployments.

tests/conftest.py puts the tests directory on sys.path, so any test or conftest can say
(the name is not `triton`: that is OpenAI Triton, which torch imports):

    from triton_support import config_pbtxt, live_deployment, requires_tritonserver, tritonserver_missing

- `tritonserver_missing()`: why no tritonserver can run here (None when one can). The only
  reason is the missing `server` extra (nvidia-pytriton); never a project module.
- `requires_tritonserver`: the matching skipif marker.
- `config_pbtxt(name, inputs=..., outputs=..., ...)`: a config.pbtxt for a Python-backend model.
- `serving(server)`: a hand-built TritonServer, started and stopped (with the same short grace).
- `live_deployment(recipe, workdir)`: `sdtk deploy --detach` of a recipe (name, path or Recipe),
  stopped on exit; the pytest fixture of the same name is a factory that stops what it started.
  The stop gives Triton STOP_GRACE_S before killing the group: a graceful shutdown costs ~4 s
  (Triton waits out client connections and unloads one model per 1-s poll), ~3 min over the
  suite, and is what tests/server/test_server_lifecycle.py and `sdtk stop` in the integration
  tests check; here the deployment is only the stage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

EXTRA_HINT = "no tritonserver (install the `server` extra: nvidia-pytriton)"
STOP_GRACE_S = 0.5


def tritonserver_missing() -> str | None:
    from toolkit.server.discover import find_tritonserver_candidates

    return None if any(c.exists for c in find_tritonserver_candidates()) else EXTRA_HINT


requires_tritonserver = pytest.mark.skipif(tritonserver_missing() is not None, reason=EXTRA_HINT)


def config_pbtxt(
    name: str,
    *,
    inputs: Sequence[tuple[str, str, str, bool]],
    outputs: Sequence[tuple[str, str, str]],
    decoupled: bool = False,
    max_batch_size: int = 0,
    instance_count: int = 1,
    parameters: dict[str, str] | None = None,
) -> str:
    """inputs: (name, TYPE_*, dims such as "1" or "-1", optional); outputs: (name, TYPE_*, dims)."""
    lines = [f'name: "{name}"', 'backend: "python"', f"max_batch_size: {max_batch_size}"]
    lines.append(f"model_transaction_policy {{ decoupled: {'true' if decoupled else 'false'} }}")
    for n, t, dims, optional in inputs:
        opt = " optional: true" if optional else ""
        lines.append(f'input [{{ name: "{n}" data_type: {t} dims: [ {dims} ]{opt} }}]')
    for n, t, dims in outputs:
        lines.append(f'output [{{ name: "{n}" data_type: {t} dims: [ {dims} ] }}]')
    lines.append(f"instance_group [{{ count: {instance_count} kind: KIND_CPU }}]")
    for k, v in (parameters or {}).items():
        lines.append(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}')
    text = "\n".join(lines) + "\n"
    _parse(text)  # a typo in a test's config fails here, not as a server that never loads
    return text


def _parse(text: str) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


@contextlib.contextmanager
def live_deployment(
    recipe: Any, workdir: Path, *, validate: bool = False, **deploy_kwargs: Any
) -> Iterator[Any]:
    """Deploy `recipe` detached on free ports under `workdir`; yield the DeployResult; stop it."""
    from toolkit.deploy import DeployOptions, deploy
    from toolkit.progress import quiet
    from toolkit.recipe import Recipe, load_recipe
    from toolkit.server.state import stop_server

    if tritonserver_missing():
        pytest.skip(EXTRA_HINT)
    rec = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    result = None
    try:
        options = DeployOptions(
            workdir=workdir, detach=True, auto_ports=True, validate=validate, **deploy_kwargs
        )
        result = deploy(rec, options, progress=quiet)
        yield result
    finally:
        if result is not None:
            stop_server(result.workdir, grace=STOP_GRACE_S)


@contextlib.contextmanager
def serving(server: Any) -> Iterator[Any]:
    """Start a hand-built TritonServer; stop it with STOP_GRACE_S (see live_deployment)."""
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=STOP_GRACE_S)


@pytest.fixture
def live_deployment_factory(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """`live_deployment_factory("tiny-ngram")` deploys and returns the DeployResult; all stop at teardown."""
    with contextlib.ExitStack() as stack:

        def start(recipe: Any, **kwargs: Any) -> Any:
            return stack.enter_context(live_deployment(recipe, tmp_path / "work", **kwargs))

        yield start
