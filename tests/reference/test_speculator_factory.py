"""One home per mode: the reference runtime asks the mode's proposer (toolkit/reference/<mode>.py,
chosen by the mode's name through the registry, toolkit.reference.proposers) for its speculator and
to load its weights; an unknown mode is an error, not EAGLE-3."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from toolkit import modes
from toolkit.errors import CompatError, GenerationError, ModelError
from toolkit.recipe import parse_recipe
from toolkit.reference import proposers


def test_the_reference_factory_raises_on_an_unknown_mode_instead_of_running_eagle3():
    from toolkit.reference.none import PlainSpeculator
    from toolkit.reference.runtime import ReferenceRuntime
    from toolkit.reference.sampling import SamplingParams

    rt = SimpleNamespace(draft=None, weights={})
    with pytest.raises(CompatError, match="unknown speculative mode 'eagle4'") as e:
        ReferenceRuntime._speculator(rt, SimpleNamespace(mode="eagle4"), SamplingParams())
    assert e.value.backend == "reference"
    none = parse_recipe({"models": {"target": "a/b"}}).speculative
    assert isinstance(ReferenceRuntime._speculator(rt, none, SamplingParams()), PlainSpeculator)
    ng = parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "ngram", "max_draft_len": 3}})
    assert (
        type(ReferenceRuntime._speculator(rt, ng.speculative, SamplingParams())).__name__ == "NGramSpeculator"
    )


def test_each_home_checks_what_its_speculator_needs():
    from toolkit.reference.runtime import ReferenceRuntime
    from toolkit.reference.sampling import SamplingParams

    rt = SimpleNamespace(draft=None, weights={})
    for body, needs in (
        (
            {"models": {"target": "a/b", "draft": "c/d"}, "speculative": {"mode": "draft_target"}},
            "draft model",
        ),
        (
            {"models": {"target": "a/b", "medusa_heads": "c/d"}, "speculative": {"mode": "medusa"}},
            "Medusa heads",
        ),
        (
            {"models": {"target": "a/b", "eagle_head": "c/d"}, "speculative": {"mode": "eagle3"}},
            "EAGLE-3 head",
        ),
    ):
        with pytest.raises(GenerationError, match=needs):
            ReferenceRuntime._speculator(rt, parse_recipe(body).speculative, SamplingParams())
    eagle = parse_recipe({"models": {"target": "a/b", "eagle_head": "c/d"}, "speculative": {"mode": "eagle"}})
    with pytest.raises(CompatError, match="EAGLE-1/2 feature-regression heads are not implemented") as e:
        ReferenceRuntime._speculator(rt, eagle.speculative, SamplingParams())
    assert e.value.hint == modes.info("eagle").reference.fix


def test_every_mode_the_reference_backend_runs_has_a_proposer_in_its_home_and_the_others_none():
    """The registry decides: a supported mode's proposer is toolkit/reference/<mode>.py, with
    `load_weights` exactly where the mode reads a source; an unsupported one raises its Support's
    reason (CompatError), never falling back to another mode's proposer."""
    for m in modes.REGISTRY:
        if not m.reference.supported:
            with pytest.raises(CompatError, match="does not run mode"):
                proposers.proposer(m.name)
            continue
        module = proposers.proposer(m.name)
        assert module.__name__ == f"toolkit.reference.{m.name}"
        assert callable(module.speculator)
        assert callable(getattr(module, "load_weights", None)) == (m.source is not None), m.name
    reference = Path(proposers.__file__).parent
    homes = {p.stem for p in reference.glob("*.py")} & set(modes.MODES)
    assert homes == {m.name for m in modes.REGISTRY if m.reference.supported}


def test_each_source_is_loaded_by_the_served_modes_proposer_else_the_first_that_reads_it():
    for source in modes.SOURCES:
        readers = [m.name for m in modes.REGISTRY if m.source == source and m.reference.supported]
        assert proposers.loader(source, modes.NONE).__name__ == f"toolkit.reference.{readers[0]}"
        for name in readers:
            assert proposers.loader(source, name).__name__ == f"toolkit.reference.{name}"
    with pytest.raises(ModelError, match="unknown weights 'medusa'") as e:
        proposers.loader("medusa", modes.NONE)
    assert e.value.hint == "the weights are: " + ", ".join(modes.SOURCES)


def test_load_takes_the_weights_by_source_name(tiny: Path):
    """ReferenceRuntime.load(target, {source: path}): each source loaded by its mode's proposer, a
    mode without its source refused before any loading, an unknown name refused."""
    from toolkit.reference.runtime import ReferenceRuntime

    medusa = parse_recipe(
        {"models": {"target": "a/b", "medusa_heads": "c/d"}, "speculative": {"mode": "medusa"}}
    ).speculative
    with pytest.raises(ModelError, match="needs a medusa_heads checkpoint"):
        ReferenceRuntime.load(tiny / "target", {"draft": tiny / "draft"}, spec=medusa)
    with pytest.raises(ModelError, match="unknown weights 'heads'"):
        ReferenceRuntime.load(tiny / "target", {"heads": tiny / "medusa"})
    rt = ReferenceRuntime.load(tiny / "target", {"medusa_heads": tiny / "medusa", "draft": None}, spec=medusa)
    assert set(rt.weights) == {"medusa_heads"} and rt.draft is None
    assert type(rt.weights["medusa_heads"]).__name__ == "MedusaHeads"
