"""benchmarks/copy_probe.py's split of a drill into what the model is given and what it must copy: the ids are the
whole drill's, tokenized as in pretraining, so the prompt never ends in tokens no copy ever followed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import copy_probe  # noqa: E402

from coalign.models import load_tokenizer  # noqa: E402
from coalign.pretraining.bases import starting_point  # noqa: E402


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
