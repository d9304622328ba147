"""sdtk's errors are also the builtin exceptions their meaning names (a caller's `except ValueError`
catches a bad recipe value), the CLI still reports each as one line with its own exit code, and a
missing optional package names the extra that installs it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import cli
from toolkit.client.errors import ConnectionLost, ResponseTimeout, ServerUnreachable
from toolkit.errors import (
    EXTRA_OF,
    CompatError,
    DiskFull,
    GenerationError,
    MissingExtra,
    RecipeError,
    SdtkError,
    ToolNotFound,
    UsageError,
    WorkdirError,
    require_extra,
)
from toolkit.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "recipes/llama-3.1-8b-eagle3.yaml"


def test_a_bad_recipe_value_is_a_value_error():
    with pytest.raises(ValueError, match=r"serving.http_port") as info:
        parse_recipe({"models": {"target": "a/b"}, "serving": {"http_port": "eighty"}})
    assert isinstance(info.value, RecipeError)
    assert info.value.field == "serving.http_port"


def test_an_unknown_recipe_key_is_a_value_error():
    with pytest.raises(ValueError, match="did you mean 'serving'"):
        parse_recipe({"models": {"target": "a/b"}, "servng": {}})


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (UsageError("bad flag"), ValueError),
        (RecipeError("bad", field="x"), ValueError),
        (CompatError("no", mode="medusa", backend="llmapi"), ValueError),
        (GenerationError("empty prompt"), ValueError),
        (ToolNotFound("nvcc"), FileNotFoundError),
        (WorkdirError("read-only", path="/w"), OSError),
        (DiskFull("/w/x", free=0), OSError),
        (MissingExtra("modelopt", "train"), ModuleNotFoundError),
        (ResponseTimeout("slow", url="http://h:8000"), TimeoutError),
        (ServerUnreachable("down", url="http://h:8000"), ConnectionError),
        (ConnectionLost("cut", url="http://h:8000"), ConnectionError),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
def test_errors_subclass_their_builtin(error, builtin):
    assert isinstance(error, builtin)
    assert isinstance(error, SdtkError)
    with pytest.raises(builtin):
        raise error


def test_os_errors_keep_message_and_hint_and_have_no_errno():
    # OSError's constructor reads (errno, strerror, filename) from several arguments: sdtk passes
    # only the message, so str() is the message and errno stays None.
    e = WorkdirError("cannot write /w", path="/w", holder_pid=12, hint="pass another --workdir")
    assert (str(e), e.hint, e.path, e.holder_pid, e.errno, e.args) == (
        "cannot write /w",
        "pass another --workdir",
        Path("/w"),
        12,
        None,
        ("cannot write /w",),
    )
    t = ToolNotFound("tritonserver", hint="pass --tritonserver")
    assert (str(t), t.tool, t.errno, t.filename) == (
        "'tritonserver' was not found",
        "tritonserver",
        None,
        None,
    )
    r = ResponseTimeout("no response in 5s", url="http://h:8000", status=504, hint="raise --timeout")
    assert (str(r), r.url, r.status, r.hint, r.errno) == (
        "no response in 5s",
        "http://h:8000",
        504,
        "raise --timeout",
        None,
    )


def _invoke_train_draft(monkeypatch, tmp_path) -> object:
    monkeypatch.chdir(ROOT)
    return CliRunner().invoke(cli, ["train-draft", RECIPE, "--data", "chat", "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UsageError("bad flag", hint="see --help"), 2),
        (RecipeError("serving.http_port: not an integer", path="r.yaml"), 1),
        (ResponseTimeout("no response in 5s", hint="raise --timeout"), 1),
        (ServerUnreachable("nothing at http://h:8000"), 1),
        (WorkdirError("/w is read-only", path="/w"), 1),
        (ToolNotFound("torchrun", hint="install torch"), 1),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_cli_reports_builtin_based_errors_with_their_exit_code(monkeypatch, tmp_path, error, code):
    """Patched at the CLI's import site: the command's library call raises `error`."""

    def fail(*_a, **_k):
        raise error

    monkeypatch.setattr("toolkit.train.api.train_draft", fail)
    r = _invoke_train_draft(monkeypatch, tmp_path)
    assert r.exit_code == code, r.output
    assert f"error: {error}" in r.output
    assert "internal error" not in r.output
    if error.hint:
        assert f"hint: {error.hint}" in r.output


def test_train_draft_without_the_train_extra_names_it(monkeypatch, tmp_path):
    """The real train_draft, with ModelOpt made unimportable (None in sys.modules makes `import
    modelopt` raise ModuleNotFoundError): it stops before any work and names the extra."""
    monkeypatch.setitem(sys.modules, "modelopt", None)
    r = _invoke_train_draft(monkeypatch, tmp_path)
    assert r.exit_code == 1, r.output
    assert "error: the `train` extra is not installed (no module named 'modelopt')" in r.output
    assert "hint: pip install 'sdtk[train]', or scripts/setup_env.sh" in r.output
    assert "internal error" not in r.output
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.parametrize(
    ("module", "extra"), [("modelopt", "train"), ("torch", "reference"), ("matplotlib", "bench")]
)
def test_cli_names_the_extra_of_a_lazy_import_that_fails(monkeypatch, tmp_path, module, extra):
    """Any command whose lazy import of an optional package fails (patched at the CLI's import
    site: the library call imports `module.sub`) is reported with the extra, not as a bug."""
    monkeypatch.setitem(sys.modules, module, None)

    def lazy(*_a, **_k):
        __import__(f"{module}.sub")

    monkeypatch.setattr("toolkit.train.api.train_draft", lazy)
    r = _invoke_train_draft(monkeypatch, tmp_path)
    assert r.exit_code == 1, r.output
    assert f"error: the `{extra}` extra is not installed (no module named '{module}')" in r.output
    assert f"hint: pip install 'sdtk[{extra}]'" in r.output


def test_a_missing_module_of_no_extra_is_still_an_internal_error(monkeypatch, tmp_path):
    def lazy(*_a, **_k):
        __import__("sdtk_no_such_module_anywhere")

    monkeypatch.setattr("toolkit.train.api.train_draft", lazy)
    r = _invoke_train_draft(monkeypatch, tmp_path)
    assert r.exit_code == 70, r.output
    assert "internal error: ModuleNotFoundError" in r.output


def test_every_extra_of_the_table_is_declared_in_pyproject():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(declared)


def test_require_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "accelerate", None)
    with pytest.raises(MissingExtra) as info:
        require_extra("train")
    assert (info.value.module, info.value.extra, info.value.name) == ("accelerate", "train", "accelerate")
    assert isinstance(info.value, ImportError)
