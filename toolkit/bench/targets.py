"""What a benchmark runs against: resolving a URL, a deployment workdir or a recipe to an
endpoint, and deploying a recipe for the length of a run (through a deploy function).

`bench`, `compare` and `tune` all resolve their targets here.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.bench.measure.tokens import recipe_tokenizer
from toolkit.bench.proposers import is_chain, varies_per_step
from toolkit.errors import ServerError, UsageError
from toolkit.membound import recipe_label

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

# deploy_fn(recipe_path, overrides=(), workdir=...) -> context manager yielding (url, model), or a
# server handle with grpc_url / http_url / model_name (toolkit.server's TritonServer or ServerState).
DeployFn = Callable[..., Any]

_URL = re.compile(r"^([a-z]+://)?[A-Za-z0-9.\-\[\]:]+:\d+/?$")


def load_recipe_any(recipe: Recipe | str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """A loaded Recipe as is, or a recipe path / bundled name loaded with `overrides`."""
    from toolkit.recipe import Recipe, load_recipe

    if isinstance(recipe, Recipe):
        if overrides:
            raise UsageError("overrides apply to a recipe path or name, not to a loaded Recipe")
        return recipe
    return load_recipe(recipe, list(overrides))


@dataclass
class Side:
    label: str  # baseline | speculative
    ref: str  # as given
    kind: str  # url | workdir | recipe
    url: str | None = None
    model: str | None = None
    recipe_path: Path | None = None
    workdir: Path | None = None
    draft_len: int | None = None  # γ of a chain-mode deployment, when its recipe is known
    tokenizer: str | None = None  # the deployment's tokenizer, when its recipe is known
    # Steps counted from the stream: a reference-backend ensemble streams one chunk per target
    # step, and its mode's draft count varies per step (n-gram), so drafts / γ would undercount.
    steps_from_chunks: bool = False
    twin: str | None = None  # the memory-bound twin's label (toolkit.membound), when the recipe pads
    # The side's recipe, loaded once here (a recipe side's own, a workdir's saved one; None for a
    # URL): its deployment, the replay and tune all use this one.
    recipe: Recipe | None = None
    overrides: list[str] | None = None  # a recipe side deployed with these --set overrides (tune)
    # A side that speaks another protocol than the run's (a Dynamo deployment: openai), and the
    # /metrics of its workers (their sdtk_spec_* counters give each level's acceptance).
    protocol: str | None = None
    metrics_urls: list[str] | None = None

    def describe(self) -> str:
        return f"{self.ref} ({self.kind}{'; ' + self.twin if self.twin else ''})"


def deployment_recipe(side: Side, recipe: str | Path | None) -> tuple[Recipe, Path]:
    """The recipe a side was deployed from (`recipe` when given, else its own recipe file, else
    what `sdtk deploy` saved next to state.json), loaded, and the path to redeploy it from."""
    ref: Recipe | str | Path | None = recipe if recipe is not None else side.recipe
    if ref is None:
        raise UsageError(
            "tune needs the recipe the deployment was made from",
            hint="pass --recipe RECIPE (it defines the mode, the draft lengths and the overlay)",
        )
    rec = load_recipe_any(ref)
    return rec, rec.source_path or Path(str(ref))


def resolve_side(ref: str | Path, *, label: str, protocol: str = "grpc", model: str | None = None) -> Side:
    """A URL, a workdir with state.json, or a recipe (file or bundled name); clear errors otherwise."""
    text = str(ref)
    if protocol == "openai" and ("://" in text or _URL.match(text)):
        return Side(label, text, "url", url=text, model=model, protocol="openai")
    if "://" in text or _URL.match(text):
        url = text
        if "://" in text and protocol == "grpc" and text.startswith(("http://", "https://")):
            raise UsageError(
                f"{label}: '{text}' is an HTTP URL but the protocol is grpc",
                hint="pass --protocol http, or the gRPC address host:8001",
            )
        return Side(label, text, "url", url=url, model=model or "ensemble")
    p = Path(text).expanduser()
    if p.is_dir():
        from toolkit.server.state import find_deployment, read_state, server_status, state_path

        p = find_deployment(p)  # the deploy workdir or the deployment directory under it
        dynamo = dynamo_side(p, label=label, ref=text, model=model)
        if dynamo is not None:
            return dynamo
        if protocol == "openai":
            raise UsageError(
                f"{label}: {p} holds a Triton deployment, which does not speak the OpenAI API",
                hint="benchmark it with --protocol grpc or http",
            )
        st = read_state(p)
        if st is None:
            raise UsageError(
                f"{label}: no running deployment in {p} (no {state_path(p).name} there or in one "
                "directory below it)",
                hint="deploy with `sdtk deploy RECIPE --detach --workdir DIR`, or pass a URL or a recipe",
            )
        status = server_status(p)
        if not status.running:
            raise ServerError(
                f"{label}: the deployment in {p} is not running (pid {st.pid})",
                hint="start it again with `sdtk deploy --detach`; `sdtk status` shows what is up",
            )
        url = st.grpc_url if protocol == "grpc" else st.http_url
        rec = deployed_recipe(p)
        return Side(
            label,
            text,
            "workdir",
            url=url,
            model=model or st.model_name,
            workdir=p,
            draft_len=_chain_draft_len(rec),
            tokenizer=recipe_tokenizer(rec),
            steps_from_chunks=steps_from_chunks(rec),
            twin=recipe_label(rec) if rec is not None else None,
            recipe=rec,
        )
    from toolkit.recipe import resolve_recipe_path

    path = resolve_recipe_path(text)  # RecipeError with a did-you-mean when it is nothing known
    if not path.exists():
        raise UsageError(
            f"{label}: '{text}' is not a URL, a deployment workdir or a recipe file",
            hint="pass host:port (gRPC) / http://host:port, a workdir with state.json, or a recipe",
        )
    from toolkit.recipe import load_recipe

    rec = load_recipe(path)
    return Side(
        label,
        text,
        "recipe",
        recipe_path=path,
        model=model,
        draft_len=_chain_draft_len(rec),
        tokenizer=recipe_tokenizer(rec),
        steps_from_chunks=steps_from_chunks(rec),
        twin=recipe_label(rec),
        recipe=rec,
    )


def dynamo_side(root: Path, *, label: str, ref: str, model: str | None) -> Side | None:
    """A running `sdtk deploy --target dynamo` deployment in `root` as a side: its frontend's
    OpenAI API, its workers' /metrics; None when `root` holds no Dynamo deployment."""
    import json

    from toolkit.dynamo.launch import is_dynamo
    from toolkit.dynamo.plan import PLAN_FILE, SUBDIR, DynamoPlan
    from toolkit.dynamo.status import dynamo_status

    if not is_dynamo(root):
        return None
    status = dynamo_status(root)
    if status.state != "running":
        raise ServerError(
            f"{label}: the Dynamo deployment in {root} is {status.state}: {status.message}",
            hint="`sdtk status --workdir DIR` shows what is up; `sdtk deploy --target dynamo --detach` starts it",
        )
    plan = DynamoPlan.from_dict(json.loads((root / SUBDIR / PLAN_FILE).read_text()))
    rec = deployed_recipe(root)
    return Side(
        label,
        ref,
        "workdir",
        url=plan.http_url,
        model=model or plan.model,
        workdir=root,
        draft_len=_chain_draft_len(rec),
        tokenizer=recipe_tokenizer(rec),
        twin=recipe_label(rec) if rec is not None else None,
        recipe=rec,
        protocol="openai",
        metrics_urls=[w.metrics_url for w in plan.workers if w.metrics_url],
    )


def deployed_recipe(workdir: Path) -> Recipe | None:
    """The recipe `sdtk deploy` saved next to state.json (recipe.json), or None without one."""
    from toolkit.deploy import load_deployed_recipe
    from toolkit.server.state import find_deployment

    return load_deployed_recipe(find_deployment(Path(workdir)))


def _chain_draft_len(recipe: Recipe | None) -> int | None:
    """γ for chain modes (each step proposes γ drafts); None where a step's draft count varies."""
    if recipe is None:
        return None
    spec: Any = recipe.speculative  # any mode's: max_draft_len is read for a chain only
    if is_chain(spec) and not steps_from_chunks(recipe):
        # A proposer without a model proposes up to γ per step: drafts / γ is a lower bound on the steps.
        return int(spec.max_draft_len)
    return None


def steps_from_chunks(recipe: Recipe | None) -> bool:
    """n-gram proposes up to γ tokens per step, often fewer; on the reference backend the
    ensemble streams one chunk per target step, so the chunks count the steps exactly."""
    return recipe is not None and recipe.backend == "reference" and varies_per_step(recipe.speculative.mode)


@contextlib.contextmanager
def deploy(
    deploy_fn: DeployFn | None,
    recipe: Recipe | Path | str,
    overrides: Sequence[str] | None = None,
    *,
    protocol: str,
    workdir: Path | str | None = None,
    what: str = "the target",
) -> Iterator[tuple[str, str]]:
    """Deploy a recipe (loaded, or a path with `overrides`) through `deploy_fn` for the length
    of the block; yields (url, model)."""
    if deploy_fn is None:
        raise UsageError(
            f"{what} is a recipe but no deploy function was given",
            hint="deploy it first (`sdtk deploy RECIPE --detach`) and pass its workdir or URL",
        )
    args: list[Any] = [recipe] if overrides is None else [recipe, list(overrides)]
    kwargs = {"workdir": Path(workdir)} if workdir is not None else {}
    with deploy_fn(*args, **kwargs) as deployed:
        yield deployed_address(deployed, protocol)


@contextlib.contextmanager
def side_address(
    side: Side, *, protocol: str, deploy_fn: DeployFn | None, workdir: Path | str | None = None
) -> Iterator[tuple[str, str]]:
    """(url, model) of one side; a recipe side is deployed (and afterwards stopped) through
    deploy_fn, under `workdir` (`<workdir>/<recipe name>`) when given: its loaded recipe, or its
    recipe file with `side.overrides`."""
    if side.kind != "recipe":
        yield side.url or "", side.model or "ensemble"
        return
    what = f"{side.label}: '{side.ref}'"
    ref: Recipe | Path | None = side.recipe_path if side.overrides is not None else side.recipe
    assert ref is not None
    with deploy(deploy_fn, ref, side.overrides, protocol=protocol, workdir=workdir, what=what) as (
        url,
        model,
    ):
        side.url, side.model = url, side.model or model
        yield url, side.model


def deployed_address(deployed: Any, protocol: str) -> tuple[str, str]:
    """(url, model) from what a deploy function yields: a pair, or a server handle."""
    if isinstance(deployed, tuple) and len(deployed) == 2:
        url, model = deployed
        if protocol == "grpc" and str(url).startswith(("http://", "https://")):
            raise UsageError(
                f"the deploy function gave the HTTP address {url} but the protocol is grpc",
                hint="have it yield the gRPC address (host:port), or benchmark with protocol http",
            )
        return str(url), str(model)
    url = getattr(deployed, "grpc_url" if protocol == "grpc" else "http_url", None)
    model = getattr(deployed, "model_name", None)
    if not url or not model:
        raise UsageError(
            f"the deploy function yielded {type(deployed).__name__}, not (url, model) or a server handle",
            hint="yield (url, model) or an object with grpc_url, http_url and model_name",
        )
    return str(url), str(model)
