"""Every malformed recipe gets exit != 0, one line naming the field, and no traceback."""

from __future__ import annotations

import copy
import string
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.cli import cli
from toolkit.errors import RecipeError
from toolkit.recipe import load_recipe, parse_recipe

_CORPUS = yaml.safe_load((Path(__file__).parents[1] / "data" / "malformed_recipes.yaml").read_text())
CASES = [(c["id"], c["text"], c["expect"]) for c in _CORPUS]



def test_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "text", "expect"), CASES, ids=[c[0] for c in CASES])
def test_validate_rejects(tmp_path, name, text, expect):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["recipes", "validate", str(path)])
    assert result.exit_code != 0
    out = result.stdout.strip().splitlines()
    assert len(out) == 1, out
    assert out[0].startswith("FAIL") and str(path) in out[0]
    assert expect in out[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("name", "text", "expect"), CASES[:12], ids=[c[0] for c in CASES[:12]])
def test_show_reports_one_line_error(tmp_path, name, text, expect):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["recipes", "show", str(path)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and expect in lines[0]
    assert all(line.startswith(("error: ", "hint: ")) for line in lines)
    assert "Traceback" not in result.output


def test_validate_mixed_exits_nonzero(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("models:\n  target: a/b\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  target: a/b\nbackend: nope\n")
    result = CliRunner().invoke(cli, ["recipes", "validate", str(good), str(bad), "--json"])
    assert result.exit_code == 1
    import json

    data = json.loads(result.stdout)
    assert [d["ok"] for d in data] == [True, False]
    assert data[1]["field"] == "backend"


# -- hypothesis: mutations of valid recipes never crash and always name a field

VALID = {
    "models": {"target": "org/target", "draft": "org/draft"},
    "backend": "reference",
    "speculative": {"mode": "draft_target", "max_draft_len": 4},
    "build": {"max_batch_size": 4, "max_input_len": 512, "max_seq_len": 1024},
    "serving": {"http_port": 9000, "grpc_port": 9001, "metrics_port": 9002},
}


def _paths(d, prefix=()):
    for k, v in d.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _paths(v, (*prefix, k))


PATHS = list(_paths(VALID))
junk = st.one_of(
    st.integers(-5, 100000), st.text(string.ascii_letters, max_size=6), st.lists(st.integers(), max_size=2),
    st.none(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=junk, kind=st.sampled_from(["set", "rename", "add"]))
def test_mutations_fail_cleanly_or_validate(path, value, kind):
    data = copy.deepcopy(VALID)
    node = data
    for k in path[:-1]:
        node = node[k]
    key = path[-1]
    if kind == "set":
        node[key] = value
    elif kind == "rename":
        node[key + "x"] = node.pop(key)
    else:
        node[key + "_extra"] = value
    try:
        parse_recipe(data)
    except RecipeError as e:
        assert e.field is not None or "mapping" in str(e)
        assert "\n" not in str(e)
    else:
        assert kind == "set"  # only a value that happens to be valid may pass


def test_yaml_file_round_trip(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(VALID))
    assert load_recipe(p).speculative.max_draft_len == 4
