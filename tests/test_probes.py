"""The probes' own logic. benchmarks/copy_probe.py splits a drill into what the model is given and what it must
copy: the ids are the whole drill's, tokenized as in pretraining, so the prompt never ends in tokens no copy ever
followed. benchmarks/token_identity.py finds the actions that copy their thought and compares their tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import copy_probe  # noqa: E402
import token_identity  # noqa: E402

from coalign.models.load import load_tokenizer, train_tokenizer  # noqa: E402
from coalign.models.bases import starting_point  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(starting_point("coalign-base-2"))


@pytest.mark.parametrize("seq", ["48213 Zorvak 771 bemmit", "Zorvak = 12", "x", ": ( 7"])
def test_the_split_keeps_the_drills_own_tokens_and_cuts_where_the_copy_starts(tokenizer, seq: str) -> None:
    ids, n_head = copy_probe.split_at_copy(tokenizer, seq)
    text = f"Copy: {seq}\nCopy: {seq}\n"
    assert ids == tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids[:n_head]) == f"Copy: {seq}\nCopy: "
    assert tokenizer.decode(ids[n_head:]) == f"{seq}\n"


def test_a_prompt_cut_at_the_colon_is_not_what_pretraining_saw(tokenizer) -> None:
    """Why the probe tokenizes whole: this tokenizer merges across spaces, so `Copy:` alone ends differently."""
    whole = tokenizer("Copy: 12\nCopy: 12\n", add_special_tokens=False).input_ids
    cut = tokenizer("Copy: 12\nCopy:", add_special_tokens=False).input_ids
    assert whole[: len(cut)] != cut


def test_token_identity_finds_copied_actions_and_compares_their_tokens() -> None:
    turn = (
        "<global_plan>\nStep 1: get 2 wood log\n</global_plan>\n"
        "Thought: get 2 wood log for the plank\nAction: get 2 wood log"
    )
    episodes = [
        {"messages": [{"role": "user", "content": "Action: get 2 wood log"}, {"role": "assistant", "content": turn}]},
        {"messages": [{"role": "assistant", "content": "Thought: look around\nAction: open door 1"}]},
        {"messages": [{"role": "assistant", "content": "Thought: no action line here"}]},
    ]
    copies = token_identity.copied_actions(episodes)
    assert [(turn[s : s + n], turn[t : t + n]) for _, s, t, n in copies] == [("get 2 wood log", "get 2 wood log")]
    assert copies[0][1] > turn.find("Thought: ")  # the thought's copy, not the plan step's
    texts = [turn] * 30 + ["the wood log is here"] * 30
    assert token_identity.identical_share(train_tokenizer(texts, 320, digits=True, words=True), copies) == 1.0
    assert token_identity.identical_share(train_tokenizer(texts, 320, digits=True), copies) == 0.0
