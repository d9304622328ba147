"""Reloading one model of a running deployment through Triton's model-control API and the
deployment's repository key: `sdtk restart MODEL` (and the `restart-model` policy)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from toolkit.errors import ServerError
from toolkit.server.record import REPO_KEY_HEADER
from toolkit.server.state import (
    ServerState,
    _alive_and_ours,
    python_stubs,
    read_state,
    state_path,
    write_state,
)


@dataclass
class RestartResult:
    workdir: str
    model: str
    seconds: float
    stubs: list[int]  # the model's new stub pids
    restarts: int  # of this model, this one included
    message: str


def _repository(st: ServerState, action: str, timeout: float) -> tuple[int, str]:
    """POST /v2/repository/<action> with the deployment's key: (HTTP status, body)."""
    req = urllib.request.Request(
        f"{st.http_url}/v2/repository/{action}",
        data=b"{}",
        method="POST",
        headers={REPO_KEY_HEADER: st.repo_key, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - our own server
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        raise ServerError(f"no answer from {st.http_url}: {e}", hint="check `sdtk status`") from None


def restart_model(workdir: Path | str, model: str, timeout: float = 600.0) -> RestartResult:
    """Reload one model of a running deployment through Triton's model-control API (unload,
    then load: a fresh stub; its dependents, e.g. the ensemble, follow), without touching the
    others. Recorded in state.json (its new stubs, `model_restarts`)."""
    from toolkit.errors import UsageError, did_you_mean

    st = read_state(workdir)
    if st is None or not _alive_and_ours(st):
        raise ServerError(
            f"no running server recorded in {state_path(workdir)}", hint="start it with `sdtk deploy`"
        )
    if not st.repo_key:
        raise ServerError(
            f"the server in {workdir} was launched without model control, so one model cannot be reloaded",
            hint="redeploy (`sdtk stop`, then `sdtk deploy`); new deploys support `sdtk restart`",
        )
    models = sorted(p.parent.name for p in Path(st.model_repo).glob("*/config.pbtxt"))
    if model not in models:
        guess = did_you_mean(model, models)
        raise UsageError(
            f"no model '{model}' in {st.model_repo}" + (f"; did you mean '{guess}'?" if guess else ""),
            hint="models: " + ", ".join(models),
        )
    t0 = time.monotonic()
    for action in ("unload", "load"):
        code, body = _repository(st, f"models/{model}/{action}", timeout)
        if code != 200:
            raise ServerError(
                f"Triton refused to {action} '{model}' (HTTP {code}): {body[:300]}",
                hint=f"see `sdtk logs --workdir {workdir}`",
            )
    stubs = python_stubs(st.pgid)
    st = read_state(workdir) or st
    counts = dict(st.model_restarts)
    counts[model] = counts.get(model, 0) + 1
    write_state(workdir, replace(st, stubs=stubs, model_restarts=counts))
    seconds = time.monotonic() - t0
    return RestartResult(
        str(workdir),
        model,
        round(seconds, 2),
        stubs.get(model, []),
        counts[model],
        f"restarted '{model}' in {seconds:.1f}s (restart {counts[model]})",
    )
