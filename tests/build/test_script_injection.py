"""Generated build runbooks cannot be injected.

Each hostile string names the directory that holds the checkpoints, the recipe and the workdir,
so it runs through every model path, output path and comment of each backend's runbook. The
runbook then runs under bash with stand-in `python3`/`trtllm-build`/`trtllm-serve` on PATH
(TensorRT-LLM cannot be installed here; they only record their argv). It must create nothing
outside its workdir, and every command must receive exactly the argv sdtk planned, so each
hostile path arrives as one argument, unchanged. Files the runbook writes must equal what
sdtk writes itself.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _hostile import CONTROL_FREE, CORPUS, calls, created_outside, make_stubs, run_script, tree  # noqa: E402

from toolkit.build import build  # noqa: E402
from toolkit.errors import RecipeError  # noqa: E402
from toolkit.recipe import load_recipe  # noqa: E402

# case -> backend, speculative, extra model roles (role -> tiny model), trtllm_version
CASES = {
    "engine-draft_target": ("engine", {"mode": "draft_target", "max_draft_len": 4}, {"draft": "draft"}, "1.1.0"),
    "engine-medusa": ("engine", {"mode": "medusa", "num_medusa_heads": 4}, {"medusa_heads": "medusa"}, "1.1.0"),
    "engine-eagle": ("engine", {"mode": "eagle", "max_draft_len": 63, "num_eagle_layers": 4,
                                "max_non_leaves_per_layer": 10}, {"eagle_head": "eagle1"}, "1.1.0"),
    "llmapi-eagle3": ("llmapi", {"mode": "eagle3", "max_draft_len": 3},
                      {"eagle_head": "eagle3", "tokenizer": "target"}, "1.2.0"),
    "llmapi-draft_target-1.1": ("llmapi", {"mode": "draft_target", "max_draft_len": 4}, {"draft": "draft"}, "1.1.0"),
    "reference-eagle3": ("reference", {"mode": "eagle3", "max_draft_len": 3}, {"eagle_head": "eagle3"}, None),
}  # fmt: skip


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def hostile_dirs(tmp_path_factory, models):
    """hostile string -> a directory named by it, holding copies of the tiny checkpoints."""
    made: dict[str, Path] = {}

    def get(hostile: str) -> Path:
        if hostile not in made:
            d = tmp_path_factory.mktemp("sb") / hostile
            for name in ("target", "draft", "medusa", "eagle3", "eagle1"):
                shutil.copytree(models[name], d / name)
            made[hostile] = d
        return made[hostile]

    return get


def _recipe(hdir: Path, case: str, stem: str | None = None) -> Path:
    """The recipe in the hostile directory; named `hostile`, or (stem given) by its file name."""
    backend, spec, roles, version = CASES[case]
    data = {
        "name": None if stem else "hostile",
        "backend": backend,
        "models": {"target": "./target", **{role: f"./{m}" for role, m in roles.items()}},
        "speculative": spec,
        "dtype": "float16",
        "build": {"max_batch_size": 2, "max_input_len": 64, "max_seq_len": 128, "max_num_tokens": 256},
        "serving": {"decoupled": False},
    }
    if version:
        data["trtllm_version"] = version
    if stem:
        del data["name"]
    path = hdir / f"{stem or case}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("label", sorted(CORPUS))
def test_runbook_is_injection_safe(label, case, hostile_dirs, tmp_path):
    hostile = CORPUS[label]
    hdir = hostile_dirs(hostile)
    sandbox = hdir.parent
    wd = hdir / f"wd-{case}"
    r = build(_recipe(hdir, case), dry_run=True, workdir=wd, progress=quiet)
    assert r.script is not None
    script = tmp_path / "runbook.sh"
    script.write_text(r.script, encoding="utf-8")
    stubs = make_stubs(tmp_path / "bin", tmp_path / "calls", ["python3", "trtllm-build", "trtllm-serve"])
    cwd = sandbox / "cwd"
    cwd.mkdir(exist_ok=True)

    before = tree(sandbox)
    res = run_script(script, cwd=cwd, stub_bin=stubs)
    after = tree(sandbox)

    assert res.returncode == 0, res.stderr[-2000:]
    assert created_outside(before, after, [wd]) == []
    assert not [p for p in tree(tmp_path) | after if Path(p).name.startswith("PWNED")]

    # Every planned command ran with exactly its planned argv: each path is one argument.
    ran = calls(tmp_path / "calls")
    planned = [c for c in r.commands if c[0] != "trtllm-serve"]  # serve is only printed
    assert [(c["cmd"], c["argv"]) for c in ran] == [(Path(p[0]).name, p[1:]) for p in planned]
    backend = CASES[case][0]
    if backend == "engine":
        assert ran[0]["argv"][ran[0]["argv"].index("--model_dir") + 1] == str(hdir / "target")
        for flag, folder in (("--medusa_model_dir", "medusa"), ("--eagle_model_dir", "eagle1")):
            if flag in ran[0]["argv"]:
                assert ran[0]["argv"][ran[0]["argv"].index(flag) + 1] == str(hdir / folder)
        assert "--eagle_model_dir" in ran[0]["argv"] or case != "engine-eagle"
        assert any(c["argv"][c["argv"].index("--model_dir") + 1] == str(hdir / "draft") for c in ran
                   if "--model_dir" in c["argv"]) or case != "engine-draft_target"  # fmt: skip

    root = wd / "hostile" / "engines" / "target"
    if backend == "llmapi":
        for name, key in (
            ("extra_llm_api_options.yaml", "extra_llm_api_options"),
            ("model.yaml", "model_yaml"),
        ):
            text = (root / name).read_text(encoding="utf-8")
            assert text == r.llmapi[key]  # byte for byte what sdtk itself writes
            data = yaml.safe_load(text)
            spec = data["speculative_config"]
            head = spec.get("speculative_model") or spec.get("speculative_model_dir")
            assert head == str(hdir / ("eagle3" if "eagle3" in case else "draft"))
        assert yaml.safe_load((root / "model.yaml").read_text(encoding="utf-8"))["model"] == str(
            hdir / "target"
        )
        cfg = json.loads((root / "config.json").read_text(encoding="utf-8"))
        assert cfg["llmapi"]["model"] == str(hdir / "target")
    if backend == "reference":
        cfg = json.loads((root / "config.json").read_text(encoding="utf-8"))
        assert cfg["reference"]["checkpoint"] == str(hdir / "target")


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "ok\nname"),
        ("serving.model_name", "ens\nemble"),
        ("serving.model_name", "../escape"),
        ("models.target", "./tar\nget"),
        ("models.target", "org/name\n"),
        ("models.target.revision", "main\x1b[31m"),
    ],
)
def test_control_characters_in_names_are_refused_at_load(field, value, tmp_path):
    data: dict = {"models": {"target": "org/model"}}
    if field == "models.target.revision":
        data["models"]["target"] = {"repo": "org/model", "revision": value}
    elif field == "models.target":
        data["models"]["target"] = value
    else:
        section, _, key = field.rpartition(".")
        (data.setdefault(section, {}) if section else data)[key] = value
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert (e.value.field or "").startswith(field.rsplit(".revision", 1)[0])
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value)


def test_file_name_with_a_newline_cannot_name_a_deployment(tmp_path):
    path = tmp_path / "evil\nname.yaml"
    path.write_text("models: {target: org/model}\n", encoding="utf-8")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert e.value.field == "name" and "control character" in str(e.value)
    path.write_text("name: fine\nmodels: {target: org/model}\n", encoding="utf-8")
    assert load_recipe(path).display_name == "fine"


@pytest.mark.parametrize("label", sorted(CONTROL_FREE))
def test_runbook_of_a_recipe_named_by_a_hostile_file_name(label, hostile_dirs, tmp_path):
    """Without `name:`, the file name names the deployment: its workdir, comments and outputs."""
    stem = CORPUS[label]
    hdir = hostile_dirs(stem)
    wd = hdir / "wd-stem"
    r = build(_recipe(hdir, "llmapi-eagle3", stem=stem), dry_run=True, workdir=wd, progress=quiet)
    assert r.recipe == stem and r.script is not None
    script = tmp_path / "runbook.sh"
    script.write_text(r.script, encoding="utf-8")
    stubs = make_stubs(tmp_path / "bin", tmp_path / "calls", ["python3", "trtllm-build", "trtllm-serve"])
    before = tree(hdir.parent)
    res = run_script(script, cwd=tmp_path, stub_bin=stubs)
    assert res.returncode == 0, res.stderr[-2000:]
    assert created_outside(before, tree(hdir.parent), [wd]) == []
    text = (wd / stem / "engines" / "target" / "extra_llm_api_options.yaml").read_text(encoding="utf-8")
    assert text == r.llmapi["extra_llm_api_options"]
    assert not [p for p in tree(tmp_path) if Path(p).name.startswith("PWNED")]
