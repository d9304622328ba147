"""Fixtures for the reference runtime: the trained tiny models in models/tiny, loaded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from toolkit.modes.sa import SuffixAutomatonSpec  # noqa: E402
from toolkit.recipe import DraftTarget, Eagle3, Lookahead, Medusa, NGram, NoSpeculation  # noqa: E402
from toolkit.reference.prompts import PROMPTS  # noqa: E402
from toolkit.trees import EAGLE_MC_SIM_7B_63, MEDUSA_MC_SIM_7B_63  # noqa: E402

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
NEW_TOKENS = 64


@pytest.fixture(scope="package", autouse=True)
def _one_thread() -> Any:
    """Batch-1 forwards of these tiny models are ~15x faster on one thread than on two busy cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny() -> Path:
    assert (TINY / "target" / "config.json").is_file(), (
        f"{TINY / 'target'} is missing (models/tiny is committed)"
    )
    return TINY


@pytest.fixture(scope="session")
def runtime(tiny: Path) -> Any:
    from toolkit.reference import ReferenceRuntime

    return ReferenceRuntime.load(
        tiny / "target",
        {"draft": tiny / "draft", "medusa_heads": tiny / "medusa", "eagle_head": tiny / "eagle3"},
    )


@pytest.fixture(scope="session")
def hf_target(tiny: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny / "target", dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def end_id(hf_target: Any) -> int:
    """The EOS that HF generate stops at, so both sides stop alike (-1: none)."""
    eos = hf_target.generation_config.eos_token_id
    if isinstance(eos, list):
        assert len(eos) <= 1, "the tests assume one EOS id"
        eos = eos[0] if eos else None
    return -1 if eos is None else int(eos)


@pytest.fixture(scope="session")
def prompt_ids(runtime: Any) -> list[list[int]]:
    return [runtime.tokenizer(p)["input_ids"] for p in PROMPTS]


@pytest.fixture(scope="session")
def greedy_reference(hf_target: Any, prompt_ids: list[list[int]]) -> list[list[int]]:
    """HF transformers greedy continuations, the ground truth for losslessness."""
    out = []
    with torch.inference_mode():
        for ids in prompt_ids:
            seq = hf_target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=NEW_TOKENS)
            out.append(seq[0, len(ids) :].tolist())
    return out


@pytest.fixture(scope="session")
def specs(runtime: Any) -> dict[str, Any]:
    """One configuration per mode (trees included), as recipes would give them."""
    heads = len(runtime.weights["medusa_heads"])
    return {
        "none": NoSpeculation(),
        "draft_target": DraftTarget(mode="draft_target", max_draft_len=4),
        "ngram": NGram(mode="ngram", max_draft_len=4, max_matching_ngram_size=3),
        "sa": SuffixAutomatonSpec(mode="sa", max_draft_len=4),
        "lookahead": Lookahead(mode="lookahead", window=4, ngram=3, verification_set=4),
        "medusa": Medusa(mode="medusa", medusa_choices=[c for c in MEDUSA_MC_SIM_7B_63 if len(c) <= heads]),
        "eagle3_chain": Eagle3(mode="eagle3", max_draft_len=3),
        "eagle3_tree": Eagle3(mode="eagle3", max_draft_len=5, eagle_choices=EAGLE_MC_SIM_7B_63),
    }


MODES = ["none", "draft_target", "ngram", "sa", "lookahead", "medusa", "eagle3_chain", "eagle3_tree"]
