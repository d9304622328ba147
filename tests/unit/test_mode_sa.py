"""Mode `sa` (suffix automaton): the automaton's drafts against a brute-force reading of
TensorRT-LLM's rule (the continuation of the FIRST occurrence of the longest suffix that also
ended earlier; min(L, N) with a fixed n-gram size), the global pool's cross-request match, the
recipe's upstream validation rules (NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @0004396,
SADecodingConfig.validate_sa_config), its speculative_config, compat cells and cost shape."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from toolkit import compat, modes
from toolkit.bench import proposers
from toolkit.errors import RecipeError
from toolkit.modes import sa as sa_mode
from toolkit.recipe import parse_recipe
from toolkit.reference.sa import GlobalPool, SuffixAutomaton


def brute_draft(text: list[int], k: int, max_n: int = -1) -> tuple[int, list[int]]:
    """The longest suffix (shorter than the text) that also ends before the last token; with
    max_n > 0 cut to max_n; the k tokens after that suffix's first (leftmost) occurrence."""
    n = len(text)
    for length in range(n - 1, 0, -1):
        suffix = text[n - length :]
        if any(text[e - length + 1 : e + 1] == suffix for e in range(length - 1, n - 1)):
            break
    else:
        return 0, []
    m = length if max_n < 0 else min(length, max_n)
    suffix = text[n - m :]
    first = next(e for e in range(m - 1, n - 1) if text[e - m + 1 : e + 1] == suffix)
    return m, text[first + 1 : first + 1 + k]


def brute_find(other: list[int], pattern: list[int], max_n: int = -1) -> tuple[int, list[int]]:
    """The longest suffix of `pattern` (cut to max_n) that occurs in `other` with a token after
    it, and the 4 tokens after its first such occurrence."""
    m = len(other)
    for length in range(len(pattern), 0, -1):
        cut = length if max_n < 0 else min(length, max_n)
        suffix = pattern[len(pattern) - cut :]
        ends = [e for e in range(cut - 1, m - 1) if other[e - cut + 1 : e + 1] == suffix]
        if ends and any(
            other[e - length + 1 : e + 1] == pattern[len(pattern) - length :]
            for e in range(length - 1, m - 1)
        ):
            return cut, other[ends[0] + 1 : ends[0] + 5]
    return 0, []


@pytest.mark.parametrize("alphabet", [2, 3, 7])
def test_drafts_follow_the_first_occurrence_of_the_longest_repeated_suffix(alphabet):
    rng = random.Random(alphabet)
    checked = 0
    for _ in range(60):
        sa, text = SuffixAutomaton(), []
        for _ in range(rng.randint(1, 50)):
            text.append(rng.randrange(alphabet))
            sa.extend(text[-1])
            for max_n in (-1, 1, 2, 3):
                assert sa.draft(4, max_n) == brute_draft(text, 4, max_n), (text, max_n)
                checked += 1
        # States stay within the automaton's bound (2n - 1 for n >= 2, plus the root).
        assert len(sa.length) <= max(2, 2 * len(text))
    assert checked > 1000


def test_ties_go_to_the_earliest_occurrence_and_drafts_may_overlap_the_suffix():
    sa = SuffixAutomaton([1, 2, 9, 1, 2, 8, 1, 2])
    assert sa.draft(3) == (2, [9, 1, 2])  # [1, 2] first ended at index 1, not at 4
    sa = SuffixAutomaton([5, 5, 5, 5])
    assert sa.draft(8) == (3, [5])  # [5, 5, 5] first ends at 2; the text ends one token later
    assert SuffixAutomaton([1, 2, 3]).draft(4) == (0, [])
    # fixed n-gram size: the first occurrence of the shorter suffix, which may come earlier
    sa = SuffixAutomaton([3, 4, 0, 7, 3, 4, 1, 7, 3, 4])
    assert sa.draft(2) == (3, [1, 7]) and sa.draft(2, 2) == (2, [0, 7])


def test_the_automaton_of_a_hand_built_example():
    """The automaton of "abcbc" (a=1, b=2, c=3), built by hand with the classic construction: the
    clone of "b" (state 5) keeps pos 1 and the clone of "bc" (state 7) pos 2, their originals' first
    occurrence ends (suffixAutomaton.h @b120c7c); the draft continues after that first occurrence."""
    sa = SuffixAutomaton([1, 2, 3, 2, 3])
    assert sa.length == [0, 1, 2, 3, 4, 1, 5, 2]
    assert sa.link == [-1, 0, 5, 7, 5, 0, 7, 0]
    assert sa.pos == [-1, 0, 1, 2, 3, 1, 4, 2]
    assert sa.next == [{1: 1, 2: 5, 3: 7}, {2: 2}, {3: 3}, {2: 4}, {3: 6}, {3: 7}, {}, {2: 4}]
    # link(last) = state 7 ("bc", and "c"): first ends at 2, so the draft is text[3:], cut at the end.
    assert sa.match() == (2, 2) and sa.draft(5) == (2, [2, 3])
    assert sa.draft(5, 1) == (1, [2, 3])  # "c" is in state 7 too: the same first occurrence


def test_in_a_loop_the_longest_match_drafts_one_period():
    """Why standalone SA trails n-gram on the tiny model's looping text (docs/methods.md, "SA against
    n-gram"): upstream's rule, not a reference shortcut. In `9 8 (1 2 3) x 3` the longest repeated
    suffix is (1 2 3) x 2, whose first occurrence ends one period before the text does; the last 3
    tokens first end at the loop's first period, with the whole loop after them."""
    text = [9, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3]
    sa = SuffixAutomaton(text)
    assert sa.match() == (6, 7) and sa.draft(5) == (6, [1, 2, 3])  # text[8:]: the text ends
    assert sa.match(3) == (3, 4) and sa.draft(5, 3) == (3, [1, 2, 3, 1, 2])
    assert sa.draft(5) == brute_draft(text, 5) and sa.draft(5, 3) == brute_draft(text, 5, 3)


def test_find_matches_a_pattern_against_another_text():
    rng = random.Random(5)
    for _ in range(200):
        other = [rng.randrange(3) for _ in range(rng.randint(1, 30))]
        pattern = [rng.randrange(3) for _ in range(rng.randint(1, 10))]
        sa = SuffixAutomaton(other)
        for max_n in (-1, 1, 2):
            n, end = sa.find(pattern, max_n)
            assert (n, other[end + 1 : end + 5] if n else []) == brute_find(other, pattern, max_n)


def test_the_global_pool_prefers_the_own_match_and_keeps_completed_requests_until_full():
    pool = GlobalPool(size=2)
    done = SuffixAutomaton([1, 2, 3, 4, 5, 6])
    key = pool.join(done)
    own = SuffixAutomaton([9, 2, 3])
    pool.join(own)
    assert pool.best(own, 3, -1) == (2, [4, 5, 6])  # [2, 3] in the other text; own has no match
    own.extend(2)
    own.extend(3)  # own text 9 2 3 2 3: its own match [2, 3] ties the pool's, and wins
    assert pool.best(own, 3, -1) == (2, [2, 3])
    pool.leave(key)
    assert len(pool.members) == 2  # completed, kept while the pool has room
    pool.join(SuffixAutomaton([7]))
    assert done not in [m for m, _ in pool.members.values()]  # the oldest completed one went first


def test_recipe_knobs_follow_sadecodingconfig():
    spec = parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "sa"}}).speculative
    assert (spec.max_draft_len, spec.max_matching_ngram_size, spec.enable_global_pool) == (4, -1, False)
    assert spec.draft_len == 4 and spec.global_pool_size is None
    bad = [
        ({"max_matching_ngram_size": 0}, "max_matching_ngram_size", "got 0"),
        (
            {"enable_global_pool": True, "max_matching_ngram_size": 65},
            "max_matching_ngram_size",
            r"\[1, 64\]",
        ),
        ({"global_pool_size": 8}, "global_pool_size", "requires enable_global_pool"),
        ({"max_draft_len": 0}, "max_draft_len", "greater than or equal to 1"),
        ({"threshold": 4}, "threshold", "unknown field"),  # the threshold is the enhancer's only
    ]
    for extra, field, message in bad:
        with pytest.raises(RecipeError, match=message) as e:
            parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "sa", **extra}})
        assert e.value.field == f"speculative.{field}"


def test_speculative_config_writes_upstream_keys_only_where_not_default():
    call = modes.LlmapiCall("SA", "speculative_model", None)

    def cfg(**kw):
        spec = parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "sa", **kw}}).speculative
        return sa_mode.llmapi_config(spec, call)

    assert cfg(max_draft_len=6) == {"decoding_type": "SA", "max_draft_len": 6}
    assert cfg(max_matching_ngram_size=4, enable_global_pool=True, global_pool_size=128) == {
        "decoding_type": "SA",
        "max_draft_len": 4,
        "max_matching_ngram_size": 4,
        "enable_global_pool": True,
        "global_pool_size": 128,
    }
    enh = sa_mode.SAEnhancerConfig.model_validate({"threshold": 6})
    assert sa_mode.enhancer_config(enh) == {"threshold": 6, "enable_global_pool": False}
    with pytest.raises(ValueError, match="Extra inputs"):
        sa_mode.SAEnhancerConfig.model_validate({"threshold": 4, "max_draft_len": 3})


def test_compat_and_cost_shape():
    assert compat.cell("sa", "reference").supported and not compat.cell("sa", "engine").supported
    assert compat.cell("sa", "llmapi").trtllm_name == "SA"
    assert modes.info("sa").llmapi.min_version == sa_mode.SA_SINCE == "1.3.0rc0"
    assert proposers.draft_forwards("sa", 5) == 0 and proposers.varies_per_step("sa")
    spec = parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "sa"}}).speculative
    assert proposers.is_chain(spec) and proposers.tree_field(spec) is None and not proposers.has_window(spec)


ROOT = Path(__file__).resolve().parents[2]


def test_the_walkthrough_lists_what_sa_touched_and_nothing_else_imports_it():
    """docs/contributing.md's SA list names real files; in toolkit/, only the registry imports
    SA's home, and nothing but its home imports its runtime."""
    doc = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = doc.split("<!-- sa-files:start -->")[1].split("<!-- sa-files:end -->")[0]
    # Each item: the files it names before its first ": ", then why.
    heads = [line[2:].split(": ", 1)[0] for line in section.splitlines() if line.startswith("- ")]
    listed = [p for head in heads for p in re.findall(r"`([^`]+)`", head)]
    assert len(listed) == 18 and all((ROOT / p).is_file() for p in listed), listed
    code = [p for p in listed if p.startswith("toolkit/")]
    assert code == [
        "toolkit/modes/sa.py",
        "toolkit/reference/sa.py",
        "toolkit/modes/__init__.py",
        "toolkit/modes/core.py",
    ]
    importers = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "toolkit").rglob("*.py")
        if re.search(
            r"toolkit\.(modes|reference)\.sa\b|from toolkit\.modes import [^\n]*\bsa\b", p.read_text("utf-8")
        )
    }
    # EAGLE-3's home imports SA's enhancer config and EAGLE-3's proposer SA's enhancer wrapper: the
    # enhancer is an EAGLE-3 option (sa_config). SA's own proposer is found by its name.
    assert importers == {"toolkit/modes/__init__.py", "toolkit/modes/eagle3.py", "toolkit/reference/eagle3.py"}
