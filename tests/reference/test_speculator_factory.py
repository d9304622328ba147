"""One home per mode: the reference runtime asks the mode's home for its speculator
(toolkit/modes/<mode>.py `reference_speculator`); an unknown mode is an error, not EAGLE-3."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolkit.errors import CompatError, GenerationError
from toolkit.recipe import parse_recipe


def test_the_reference_factory_raises_on_an_unknown_mode_instead_of_running_eagle3():
    from toolkit.reference.runtime import PlainSpeculator, ReferenceRuntime
    from toolkit.reference.sampling import SamplingParams

    rt = SimpleNamespace(draft=None, medusa=None, eagle3=None)
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

    rt = SimpleNamespace(draft=None, medusa=None, eagle3=None)
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
    with pytest.raises(CompatError, match="EAGLE-1/2 is not implemented"):
        ReferenceRuntime._speculator(rt, eagle.speculative, SamplingParams())
