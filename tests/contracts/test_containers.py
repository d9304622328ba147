"""Container layout facts (`containers/<yy.mm>.json`, the same folder as toolkit/data/containers/).

Each file records, per NGC `tritonserver:<yy.mm>-trtllm-python-py3`, where the Python interpreter,
the converter scripts, the Triton models, the llmapi `model.py`, `tritonserver` and the backends are,
each fact cited from triton-inference-server/tensorrtllm_backend
`dockerfile/Dockerfile.triton.trt_llm_backend` at the `r<yy.mm>` branch, triton-inference-server/server
`build.py` at the container's release tag, or the server's `docs/introduction/compatibility.md` at
r26.07 (819ee37). No container is available here: the tests check the files against themselves,
against sdtk's other tables, and (where the mirrored upstream repositories exist) against the upstream
text at the commit. A container without a facts file is probed: the stand-in for its filesystem is a
directory tree (`--container-root`), since no 26.08+ image can be pulled here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from toolkit import containers
from toolkit.build import engine
from toolkit.containers import images, probe, release
from toolkit.errors import UsageError

HERE = Path(__file__).parent
MIRRORS = {
    "triton-inference-server/tensorrtllm_backend": Path(
        "/work/.mirror/triton-inference-server+tensorrtllm_backend/repo"
    ),
    "triton-inference-server/server": Path("/work/.mirror/triton-inference-server+server/repo"),
}
FACTS = containers.all_facts()


def test_one_home_for_the_facts():
    """tests/contracts/containers is the package data itself, not a copy."""
    assert (HERE / "containers").resolve() == containers.DATA_DIR.resolve()
    assert sorted(p.name for p in (HERE / "containers").glob("*.json")) == [f"{c}.json" for c in FACTS]


def test_every_container_from_25_06_to_26_07():
    assert list(FACTS) == ["25.06", "25.07", "25.08", "25.09", "25.10", "25.11", "25.12",
                           "26.01", "26.02", "26.03", "26.04", "26.05", "26.06", "26.07"]  # fmt: skip


@pytest.mark.parametrize("tag", list(FACTS))
def test_layout_of_each_container(tag):
    """The finding-2 fact: scripts at /app/examples (`WORKDIR /app … COPY tensorrt_llm/examples examples`),
    not /app/tensorrt_llm/examples (the TensorRT-LLM release image's layout)."""
    c = FACTS[tag]
    assert c.image == f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
    assert c.examples_dir.value == "/app/examples" and c.examples_dir.verified
    assert c.all_models_dir.value == "/app/all_models" and c.all_models_dir.verified
    assert c.llmapi_model_py.value == "/app/all_models/llmapi/tensorrt_llm/1/model.py"
    assert c.tritonserver.value == "/opt/tritonserver/bin/tritonserver" and c.tritonserver.verified
    assert c.backends_dir.value == "/opt/tritonserver/backends" and c.backends_dir.verified
    # server docs/introduction/compatibility.md @r26.07 (819ee37): "Python 3.12.3" in every row 25.06-26.07
    assert c.python_version.value == "3.12.3" and c.python_version.verified
    assert c.sources["compat_matrix"].commit == "819ee37770df2fcd6d799d2a5d1dacf812f7d62c"
    # tensorrtllm_backend Dockerfile from r26.03: `python3.12 -m venv /opt/venv-tritonserver`,
    # `ENV PATH="/opt/venv-tritonserver/bin:${PATH}"`; before, Python comes from apt (python3-dev)
    if tag >= "26.03":
        assert c.python.value == "/opt/venv-tritonserver/bin/python3" and c.python.verified
    else:
        assert c.python.value == "/usr/bin/python3" and not c.python.verified
    # server build.py at the tag still builds libtriton_tensorrtllm: the engine path ships (deprecated
    # from TensorRT-LLM 1.2 on, toolkit.modes.core ENGINE_DEPRECATED)
    assert c.engine_path.value == "yes" and c.engine_path.verified
    assert c.sources["backend_dockerfile"].ref == f"r{tag}"
    # every converter the engine path can run is recorded
    assert set(engine.HEAD_CONVERTERS) == {"medusa", "eagle"}
    assert set(engine.CONVERTERS.values()) | set(engine.HEAD_CONVERTERS) <= set(c.converters)
    for name, f in c.facts().items():
        assert f.quote, name
        assert f.verified or len(f.unverified or "") > 20, f"{name}: say why it is unverified"


@pytest.mark.parametrize("tag", list(FACTS))
def test_trtllm_version_agrees_with_the_compatibility_matrix(tag):
    """toolkit/containers/images.py holds Triton's release compatibility matrix, and every facts file
    agrees with it on the release tuple. Where the Dockerfile pins another version (25.11:
    `ARG TENSORRTLLM_VER=1.2.0rc2` vs the matrix's 1.0.3.2510; 26.03: 1.2.0rc8 vs 1.2.0) the fact is the
    matrix row, unverified, and names the Dockerfile's pin."""
    c = FACTS[tag]
    assert release.release(c.trtllm_version.value) == release.release(images.CONTAINER_TO_TRTLLM[tag])
    pins = {"25.11": "1.2.0rc2", "26.03": "1.2.0rc8"}
    if tag in pins:
        f = c.trtllm_version
        assert f.source == "compat_matrix" and not f.verified and pins[tag] in (f.unverified or "")
    elif tag >= "25.09":  # the Dockerfile pins it (25.06-25.08 build TensorRT-LLM from a branch)
        assert c.trtllm_version.verified and c.trtllm_version.source == "backend_dockerfile"


def test_newest_container_per_version():
    """The newest container carrying each release (compared on the release tuple)."""
    assert containers.for_version("1.2.1").container == "26.07"
    assert containers.for_version("1.2.0").container == "26.03"
    assert containers.for_version("1.2.0rc8").container == "26.03"
    assert containers.for_version("1.1.0").container == "26.02"
    assert containers.for_version("1.0.3").container == "25.11"
    assert containers.for_version("1.0.0").container == "25.10"
    assert containers.for_version("1.3.0") is None
    # images.py agrees: 1.2.1 is the newest verified version, and the default (server issue #8945:
    # 26.07 = Triton 2.71.0 / TensorRT-LLM 1.2.1)
    assert images.DEFAULT_TRTLLM == "1.2.1"
    assert images.image_for() == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    assert containers.newest().container == "26.07"


def test_tables_that_name_the_tritonserver_read_the_facts():
    from toolkit.repo import versions
    from toolkit.server import discover

    path = containers.newest().tritonserver.value
    assert containers.ngc_tritonserver() == str(discover.NGC_TRITONSERVER) == path
    assert {c.tritonserver.value for c in FACTS.values()} == {path}
    assert versions.LLMAPI_MODEL_DIRS[0] == "/app/all_models/llmapi/tensorrt_llm/1"


def test_layout_choice(monkeypatch):
    monkeypatch.delenv(containers.CONTAINER_ENV, raising=False)
    assert containers.layout().container == "26.07"
    assert containers.layout(trtllm_version="1.2.1").container == "26.07"
    assert containers.layout(trtllm_version="1.0.0").container == "25.10"
    assert containers.layout(trtllm_version="1.0.0", container="25.09").container == "25.09"
    monkeypatch.setenv(containers.CONTAINER_ENV, "25.08")  # set inside every Triton container
    assert containers.layout(trtllm_version="1.1.0").container == "25.08"
    lay = containers.layout(root="/tmp/ct")
    assert lay.host("/app/examples") == Path("/tmp/ct/app/examples")


def _upstream(repo: str, commit: str, path: str) -> str | None:
    mirror = MIRRORS.get(repo)
    if mirror is None or not mirror.is_dir():
        return None
    r = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return r.stdout if r.returncode == 0 else None


@pytest.mark.parametrize("tag", list(FACTS))
def test_quotes_are_upstream_text_at_the_commit(tag):
    """Every `quote` of a fact read at a commit occurs (each `; `-separated part) in that file there."""
    c = FACTS[tag]
    checked = 0
    for name, f in c.facts().items():
        src = c.sources[f.source]
        if src.commit is None:
            continue
        text = _upstream(src.repository, src.commit, src.path)
        if text is None:
            pytest.skip(f"{src.repository} is not mirrored here")
        for part in f.quote.split("; "):
            assert part in text, f"{tag} {name}: {part!r} not in {src.repository} {src.path}@{src.commit[:7]}"
        checked += 1
    assert checked >= 8


# --------------------------------------------------------------------------- versions and probing


def test_prerelease_versions_compare_on_the_release_tuple():
    """packaging orders a pre-release before its release (`Version("1.2.0rc2") < Version("1.2")`), so a
    1.2.0rc2 wheel (tensorrtllm_backend r25.11 pins `tensorrt_llm==1.2.0rc2`, r26.03 `1.2.0rc8`) was treated
    as a 1.1. sdtk compares (major, minor, patch)."""
    from packaging.version import Version

    assert Version("1.2.0rc2") < Version("1.2")  # the trap
    assert release.release("1.2.0rc2") == (1, 2, 0) and release.at_least("1.2.0rc2", "1.2")
    assert release.release("1.0.3.2510") == (1, 0, 3)  # the matrix's 25.11 row
    assert release.at_least("1.3.0rc24", "1.3") and not release.below("1.3.0rc24", "1.3")
    assert release.below("1.1.0", "1.2") and release.minor("1.2.0rc8") == "1.2"
    assert images.image_for("1.2.0rc8") == "nvcr.io/nvidia/tritonserver:26.03-trtllm-python-py3"


def test_an_unknown_container_never_gets_another_containers_facts_silently(monkeypatch):
    """Inside a container sdtk has no facts for ($NVIDIA_TRITON_SERVER_VERSION=26.11), the layout is
    26.11's: every fact unverified, the paths assumed from the newest known container (and said so),
    the TensorRT-LLM version read from the installed package (a stand-in: no 26.11 image exists here)."""
    monkeypatch.setenv(containers.CONTAINER_ENV, "26.11")
    monkeypatch.setattr(probe, "installed_trtllm_version", lambda: "1.3.0rc24")
    lay = containers.layout(trtllm_version="1.1.0")
    assert lay.container == "26.11" and not lay.known and lay.probed
    assert lay.facts.image == "nvcr.io/nvidia/tritonserver:26.11-trtllm-python-py3"
    assert lay.facts.trtllm_version.value == "1.3.0rc24"
    assert set(lay.unverified()) == set(lay.facts.facts())  # every fact, none silently taken
    assert "NO FACTS" in lay.describe() and "26.11" in lay.describe()
    assert all("26.11" in why for why in lay.unverified().values())


def test_an_unknown_container_outside_says_what_it_will_probe(monkeypatch):
    monkeypatch.delenv(containers.CONTAINER_ENV, raising=False)
    lay = containers.layout(container="26.10")
    assert not lay.known and not lay.probed and lay.container == "26.10"
    why = lay.unverified()
    assert "assumed 1.2.1, as in 26.07" in why["trtllm_version"]
    assert "reads the installed tensorrt_llm version" in why["trtllm_version"]
    assert "probes /opt/venv-tritonserver/bin/python3, /usr/bin/python3" in why["python"]
    assert "libtriton_tensorrtllm" in why["engine_path"]


def test_probing_a_container_tree(monkeypatch, tmp_path):
    """Under --container-root, each path is probed (the assumed one, then the older layouts) and the
    version read from the wheel's metadata; an engine path without libtriton_tensorrtllm is "no"."""
    monkeypatch.delenv(containers.CONTAINER_ENV, raising=False)
    root = tmp_path / "ct"
    for d in ("usr/bin", "app/tensorrt_llm/examples", "opt/tritonserver/backends/tensorrtllm",
              "opt/venv-tritonserver/lib/python3.12/site-packages/tensorrt_llm-1.3.0rc29.dist-info"):  # fmt: skip
        (root / d).mkdir(parents=True)
    (root / "usr/bin/python3").write_text("")
    lay = containers.layout(container="26.12", root=root)
    f = lay.facts
    assert lay.probed and not lay.known
    assert f.python.value == "/usr/bin/python3" and "found /usr/bin/python3" in (f.python.unverified or "")
    assert f.examples_dir.value == "/app/tensorrt_llm/examples"
    assert f.trtllm_version.value == "1.3.0rc29"
    assert f.engine_path.value == "no"
    assert "none found" in (f.tritonserver.unverified or "")
    with pytest.raises(UsageError, match="yy.mm"):
        containers.layout(container="latest")


def test_the_1_1_fixture_cites_the_triton_release_of_container_25_12():
    """Triton 2.64.0 is container 25.12 and 2.65.0 is 26.01 (server build.py DEFAULT_TRITON_VERSION_MAP at
    v2.64.0 / v2.65.0); the 1.1 fixture once cited "Triton 2.65.0 (25.12 …)". Its llmapi perf-metric
    facts now cite tensorrtllm_backend docs/llmapi.md at r25.12, lines 37-40 and the sample response."""
    text = (HERE / "trtllm-1.1.json").read_text(encoding="utf-8")
    assert "2.65.0 (25.12" not in text and "triton-inference-server-2650" not in text
    assert "docs/llmapi.md at r25.12 (5419275; container 25.12 = Triton 2.64.0" in text
    for tag, container in (("v2.64.0", "25.12"), ("v2.65.0", "26.01")):
        commit = {"v2.64.0": FACTS["25.12"].sources["server_build"].commit,
                  "v2.65.0": FACTS["26.01"].sources["server_build"].commit}[tag]  # fmt: skip
        build_py = _upstream("triton-inference-server/server", commit or "", "build.py")
        if build_py is None:
            pytest.skip("triton-inference-server/server is not mirrored here")
        assert f'"release_version": "{tag[1:]}",\n    "triton_container_version": "{container}"' in build_py
    doc = _upstream("triton-inference-server/tensorrtllm_backend", "5419275f0e9830ca7083ddab1651eaa10c66636f", "docs/llmapi.md")
    if doc is not None:
        lines = doc.splitlines()
        assert "sampling_param_return_perf_metrics" in lines[36] and "sampling_param_return_perf_metrics" in lines[39]
        assert '"acceptance_rate"' in lines[45] and '"total_draft_tokens"' in lines[59]


def test_a_version_newer_than_every_verified_container_names_the_dynamo_container_and_the_other_ways():
    """TensorRT-LLM 1.3 ships only in NVIDIA's Dynamo container so far (triton-inference-server/server
    issue #8805): the fix-it names `--target dynamo`, `--image` with a Triton image the user built with
    that version, and the newest verified version; it does not suggest a tritonserver:<yy.mm> tag,
    since no verified one carries 1.3."""
    from toolkit.containers import images
    from toolkit.errors import UsageError

    with pytest.raises(UsageError) as e:
        images.image_for("1.3.0")
    hint = e.value.hint or ""
    assert "--target dynamo" in hint and "--image" in hint and "trtllm_version=1.2.1" in hint
    assert "tritonserver:<yy.mm>" not in hint
    # an unknown older version keeps the plain --image fix-it
    with pytest.raises(UsageError) as old:
        images.image_for("0.18.0")
    assert "--target dynamo" not in (old.value.hint or "") and "--image" in (old.value.hint or "")
