"""AdaPlan: its text format, Eq. 1, turn-appended token ids with the model's tokens masked in, the expert's
episodes and plan selection, and the runtime driven by a scripted model over a toy environment."""

from __future__ import annotations

import random
import re

import pytest

from coalign import envs
from coalign.formats.adaplan import NEXT, UPDATE, format_turn, parse_turn, plan_due, update_plan, window_message
from coalign.formats.lumos import FormatError, lumos_chat
from coalign.formats.lumos_iterative import chat_prompt
from coalign.models.turn_writers import hf_turns
from coalign.models.turns import encode, segments
from coalign.pilotrl.expert import (
    candidate_plans,
    expert_conversation,
    expert_conversations,
    follow_plan,
    plan_progress,
    plan_quality,
    select_plan,
)
from coalign.pilotrl.runtime import run_episodes
from tests.toy_env import ScriptedModel, ToyEnv, expert_conversation_unregistered, toy_tokenizer


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


@pytest.fixture(scope="module")
def tokenizer():
    return toy_tokenizer()


# ------------------------------------------------------------------ format


def test_a_formatted_turn_parses_back():
    text = format_turn("go on", "step forward", ["step forward", "open door"], first=3)
    turn = parse_turn(text, expect_plan=True)
    assert turn.plan == ("step forward", "open door") and turn.action == "step forward" and turn.well_formed
    assert "Step 3: step forward\nStep 4: open door" in text


def test_a_turn_without_a_due_plan_or_action_lists_what_is_missing():
    turn = parse_turn("Thought: hmm", expect_plan=True)
    assert turn.plan is None and turn.action == ""
    assert "a plan was due and none was written" in turn.errors and "no Action: line" in turn.errors


@pytest.mark.parametrize(
    "text",
    ["", "\x00" * 100, "<global_plan>", "<global_plan>\nStep x\n</global_plan>", "Action:" * 10_000,
     "\u202e" + "a" * 1_000_000, "<global_plan>\nStep 2: a\nStep 1: b\n</global_plan>\nAction: go"],
)  # fmt: skip
def test_parse_turn_never_raises_on_hostile_text(text):
    turn = parse_turn(text, expect_plan=True)
    assert isinstance(turn.action, str) and not turn.well_formed


def test_a_step_number_too_long_for_int_is_a_format_error_not_a_crash():
    turn = parse_turn("<global_plan>\nStep " + "9" * 5000 + ": move up\n</global_plan>\nThought: x\nAction: move up")
    assert turn.action == "move up" and any("not a plan step" in e for e in turn.errors)


@pytest.mark.parametrize("action", ["", "   ", "\x00\x01", "\u200b"])
def test_an_action_line_that_names_no_action_is_malformed(action):
    turn = parse_turn(f"Thought: t\nAction: {action}")
    assert "the Action: line names no action" in turn.errors and not turn.well_formed


def test_a_second_plan_block_or_stray_tag_is_malformed():
    block = "<global_plan>\nStep 1: look\n</global_plan>"
    assert not parse_turn(f"{block}\n{block}\nThought: t\nAction: look", expect_plan=True).well_formed
    assert not parse_turn(f"{block}\nThought: t </global_plan>\nAction: look", expect_plan=True).well_formed
    assert parse_turn(f"{block}\nThought: t\nAction: look", expect_plan=True).well_formed


def test_after_a_missing_first_plan_each_step_is_read_against_the_plan_written_for_it(tokenizer):
    """The first turn writes no plan, each later turn a one-step plan for the step it takes: step t is the
    plan's step t, so adherence reads every action against the step written for it."""
    env = envs.make_env("toy")
    env.reset(2)

    def writer(contexts, *args):
        plan = [env.expert_action()] if env.steps_taken else None
        text = format_turn("go", env.expert_action(), plan, first=env.steps_taken + 1)
        env.step(env.expert_action())
        return [tokenizer(text + "</s>", add_special_tokens=False)["input_ids"]]

    (episode,) = run_episodes(None, tokenizer, [("toy", 2)], "adaplan", progress=False, writer=writer)
    assert episode.env.success and len(episode.turns) == 4
    assert [t["step"] for t in episode.turns] == [None, "step forward", "step forward", "open door"]
    assert [t["action"] for t in episode.turns] == ["step forward"] * 3 + ["open door"]


def test_update_keeps_executed_steps_verbatim():
    """Eq. 1: steps 1..t stay as they were, whatever the model writes for them."""
    plan = ["go to a", "take x", "go to b", "put x"]
    assert update_plan(plan, 2, ["go to c", "put x in c"]) == ["go to a", "take x", "go to c", "put x in c"]
    assert update_plan(["go to a"], 3, ["open"]) == ["go to a", "", "", "open"]  # step 3 stays plan[3]


def test_plans_are_due_every_k_steps_and_never_in_react():
    assert [plan_due("adaplan", t, 2) for t in range(5)] == [True, False, True, False, True]
    assert not any(plan_due("react", t, 1) for t in range(5))


# ------------------------------------------------------------------ token ids


def test_appended_turns_tokenize_as_the_rendered_conversation(tokenizer):
    messages = expert_conversation_unregistered(2)
    ids, mask = encode(tokenizer, messages)
    assert tokenizer.decode(ids) == lumos_chat(messages).rstrip("\n")
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "".join(m["content"] + "</s>" for m in messages if m["role"] == "assistant")
    prompt_ids, _ = encode(tokenizer, messages[:3])
    assert tokenizer.decode(prompt_ids) == chat_prompt(messages[:3])


def test_a_template_that_is_not_prefix_preserving_is_refused():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "".join(m["content"][::-1] for m in reversed(messages))

    with pytest.raises(FormatError, match="extension"):
        segments(Tok(), [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"}])


def test_roles_must_alternate(tokenizer):
    with pytest.raises(FormatError):
        encode(tokenizer, [{"role": "assistant", "content": "x"}])


# ------------------------------------------------------------------ expert


def test_the_expert_conversation_follows_eq1_and_succeeds():
    messages = expert_conversation("toy", 2, "adaplan")  # target 3: 3 steps forward, open
    turns = [parse_turn(m["content"]) for m in messages if m["role"] == "assistant"]
    assert [t.action for t in turns] == ["step forward"] * 3 + ["open door"]
    firsts = [int(re.search(r"Step (\d+):", m["content"])[1]) for m in messages if m["role"] == "assistant"]
    assert firsts == [1, 2, 3, 4]  # each update lists the remaining steps only
    assert all(t.well_formed for t in turns)


def test_react_and_sparse_updates_write_plans_only_when_due():
    react = [m for m in expert_conversation("toy", 2, "react") if m["role"] == "assistant"]
    assert not any("<global_plan>" in m["content"] for m in react)
    every2 = [m for m in expert_conversation("toy", 2, "adaplan", every=2) if m["role"] == "assistant"]
    assert ["<global_plan>" in m["content"] for m in every2] == [True, False, True, False]


def test_plan_quality_scores_and_selection():
    env = ToyEnv()
    env.reset(2)
    good = env.expert_plan()
    assert plan_quality(env, good).total == 15 and follow_plan(env, good)
    assert plan_quality(env, good[1:]).correctness == 3  # a dropped step: half way (position 2 of 3, door shut)
    assert plan_progress(env, good[:1]) == 0.25 and plan_progress(env, good[1:]) == 0.5
    assert plan_progress(env, ["dance"] * 3) == 0.0 and plan_quality(env, ["dance"] * 3).correctness == 1
    assert plan_progress(env, ["dance"] * 8) == 0.0 == plan_progress(env, [*good[:3], *["dance"] * 5])  # step limit
    assert env.steps_taken == 0 and env.to_go() == 4  # judged on copies
    assert plan_quality(env, ["dance"] * 4).executability == 1
    assert plan_quality(env, []).total == 3
    assert select_plan(env, [good[1:], ["x " * 30], good]) == good
    assert len(candidate_plans(good, random.Random(0), n=4)) == 5


@pytest.mark.parametrize("name", ["wordle", "iqa"])
def test_an_environment_that_delegates_its_abstract_steps_gets_its_experts_plan_selected(name):
    """Wordle's and iqa's expert plans hold a step naming no action; the judge lets the expert act there,
    so the expert's own plan is correct and chosen over its noisy variants (Wordle chose a variant in 92 of
    100 episodes when every plan with an abstract step counted as failing)."""
    for seed in range(30):
        env = envs.make_env(name)
        env.reset(seed)
        plan = env.expert_plan()
        assert any(env.plan_action(step) is None and env.delegates(step) for step in plan)
        assert plan_quality(env, plan).total == 15, seed
        first = parse_turn(expert_conversation(name, seed, "adaplan")[1]["content"], expect_plan=True).plan
        assert list(first) == plan, seed


@pytest.mark.parametrize(
    "step", ["guess a word that fits", "guess a word that fits the feedback, then c r a n e", "fits the feedback", ""]
)
def test_only_the_exact_abstract_step_is_delegated(step):
    env = envs.make_env("wordle")
    env.reset(0)
    assert env.delegates("  Guess a word that FITS the feedback. ") and not env.delegates(step)
    assert not envs.make_env("household").delegates("guess a word that fits the feedback")
    assert not follow_plan(env, [env.expert_plan()[0], *[step] * 5])  # an undelegated filler step fails


def test_a_bounded_context_shows_the_task_the_plan_and_the_last_turns_only():
    whole = expert_conversation("toy", 2, "adaplan")
    bounded = expert_conversations("toy", 2, "adaplan", history=0)
    assert [c[1] for c in bounded] == [m for m in whole if m["role"] == "assistant"]  # the same turns
    assert bounded[0][0] == whole[0] and all(len(c) == 2 for c in bounded)
    third = bounded[2][0]["content"]  # after two actions
    assert third.startswith(whole[0]["content"].rsplit("\n", 1)[0])  # the task as the first turn stated it
    assert "Your plan (steps 1-2 done):\nStep 1: step forward to reach position 1" in third
    assert "Step 4: open door to finish" in third
    assert third.endswith("Action: step forward\nObservation: You are at position 2.\n" + UPDATE)
    assert "position 1." not in third.split("Step 4")[1]  # the observation before the last one is gone
    assert (
        "Observation: You are at position 1." in expert_conversations("toy", 2, "adaplan", history=1)[2][0]["content"]
    )
    react = expert_conversations("toy", 2, "react", history=0)
    assert "Your plan" not in react[2][0]["content"] and [c[1] for c in react][0]["content"].startswith("Thought:")
    assert window_message("Task.", [], 0, [], False) == f"Task.\n{NEXT}"  # no plan written: none shown
    assert "Action: go\nObservation" in window_message("Task.", None, 1, [("go\nrm -rf /", "ok")], True)


def test_the_runtime_gives_a_bounded_context_exactly_as_the_sft_episodes_show_it(tokenizer):
    """The contexts the model is given at evaluation are the SFT prompts of the expert's own episode, turn for
    turn, and stay bounded however long the episode runs."""
    contexts = []
    writer = hf_turns(ScriptedModel(tokenizer), tokenizer)

    def recording(batch, *args):
        contexts.extend(tokenizer.decode(ids) for ids in batch)
        return writer(batch, *args)

    (episode,) = run_episodes(ScriptedModel(tokenizer), tokenizer, [("toy", 2)], "adaplan", progress=False,
                              writer=recording, history=0)  # fmt: skip
    assert episode.env.success and episode.stop == "success" and len(contexts) == 4
    for context, (user, _) in zip(contexts, expert_conversations("toy", 2, "adaplan", history=0), strict=True):
        expected = user["content"].replace("open door to finish", "open door")  # the scripted model's words
        assert context == f"<|user|>\n{expected}\n<|assistant|>\n"
    assert len({len(c) for c in contexts[2:]}) == 1  # no longer after three turns than after two


# ------------------------------------------------------------------ runtime


def test_the_runtime_runs_a_scripted_expert_to_success(tokenizer):
    model = ScriptedModel(tokenizer)
    episodes = run_episodes(model, tokenizer, [("toy", s) for s in range(6)], "adaplan", batch_size=4, progress=False)
    assert all(e.env.success and e.stop == "success" for e in episodes)
    assert [e.env.steps_taken for e in episodes] == [e.env.optimal_steps for e in episodes]
    for e in episodes:
        assert e.generated_tokens == sum(e.mask)
        trained = tokenizer.decode([i for i, m in zip(e.ids, e.mask) if m])
        assert trained == "".join(m["content"] + "</s>" for m in e.messages if m["role"] == "assistant")
        assert all(not t["errors"] for t in e.turns)


def test_the_runtime_keeps_executed_steps_whatever_the_model_rewrites(tokenizer):
    episodes = run_episodes(ScriptedModel(tokenizer, bogus_plan=True), tokenizer, [("toy", 2)], "adaplan",
                            progress=False)  # fmt: skip
    (episode,) = episodes
    assert episode.env.success and len(episode.turns) == 4
    # turn n (after n actions) rewrites steps n+1.. only: step i stays as turn i-1 wrote it
    assert episode.plan == [f"rewritten at turn {n}" for n in range(3)] + ["rewritten at turn 3"] * 5


@pytest.mark.parametrize("text", ["", "Action: rm -rf /", "\x00\x01", "Thought: x\nAction: " + "(" * 10_000])
def test_hostile_model_turns_end_at_the_step_limit_not_in_a_crash(tokenizer, text):
    (episode,) = run_episodes(ScriptedModel(tokenizer, text=text), tokenizer, [("toy", 1)], "react", progress=False)
    assert episode.stop == "step limit" and episode.env.steps_taken == ToyEnv.max_steps and not episode.env.success


def test_an_episode_stops_when_its_context_is_full(tokenizer):
    (episode,) = run_episodes(ScriptedModel(tokenizer, text="Action: wait"), tokenizer, [("toy", 1)], "react",
                              max_context=200, max_new_tokens=20, progress=False)  # fmt: skip
    assert episode.stop == "context" and len(episode.ids) + 20 > 200


def _tiny_model(tmp_path):
    from coalign.config import TinySpec
    from coalign.models.load import load_model, load_tokenizer, make_tiny_model

    spec = TinySpec(**{"vocab_size": 300, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
            "intermediate_size": 64, "max_positions": 512})  # fmt: skip
    texts = ["Thought: go to the shelf and take the mug 1\nAction: take mug 1 from shelf 1"] * 20
    path = make_tiny_model(texts, tmp_path / "m", spec, seed=0)
    return load_model(path, dtype="float32"), load_tokenizer(path)


def test_the_static_turn_cache_generates_what_the_default_cache_does(tmp_path):
    """`generate_turns` on the CPU with the runtime's static cache writes, greedily, the same ids as
    `generate`'s default cache, over a left-padded batch of different lengths (the runtime's case)."""
    from unittest import mock

    from coalign.models.turn_writers import generate_turns, turn_cache

    model, tokenizer = _tiny_model(tmp_path)
    rng = random.Random(0)
    batch = [[rng.randrange(4, len(tokenizer)) for _ in range(n)] for n in (40, 7, 23, 40, 1)]
    assert type(turn_cache(model, 5, 60)["cache"]).__name__ == "StaticCache" and turn_cache(model, 1, 60) == {}
    static = generate_turns(model, tokenizer, batch, 20, 0.0, 1.0)
    with mock.patch("coalign.models.turn_writers.turn_cache", lambda model, rows, length: {}):
        default = generate_turns(model, tokenizer, batch, 20, 0.0, 1.0)
    assert static == default and all(len(row) > 0 for row in static)


@pytest.mark.parametrize("max_bytes", [2 << 30, 1])
def test_a_kept_cache_writes_the_episodes_that_rereading_does(tmp_path, max_bytes):
    """Episodes run with each one's key/value cache kept across turns are, greedily, the episodes run by
    re-reading every context, batched or not, with every cache kept or (max_bytes 1) all but one dropped; the
    kept caches spare most of the context from prefill."""
    from coalign.models.turn_writers import PrefixCachedWriter, hf_turns

    model, tokenizer = _tiny_model(tmp_path)
    tasks = [("toy", seed) for seed in range(3)]  # three targets: no two episodes alike

    def episodes(writer, batch_size):
        runs = run_episodes(model, tokenizer, tasks, "adaplan", max_new_tokens=24, max_context=400,
                            batch_size=batch_size, progress=False, writer=writer)  # fmt: skip
        return [(e.ids, e.mask, e.stop) for e in runs]

    reread = episodes(hf_turns(model, tokenizer, keep_cache=False), 3)
    assert all(len(ids) > 100 for ids, _, _ in reread)  # several turns each
    for batch_size in (3, 2, 1):
        kept = PrefixCachedWriter(model, tokenizer, max_bytes=max_bytes)
        contexts = []

        def writer(batch, *args, kept=kept, contexts=contexts):
            contexts.extend(batch)
            return kept(batch, *args)

        assert episodes(writer, batch_size) == reread
        assert kept.reused + kept.prefilled == sum(len(c) - 1 for c in contexts)  # all but the last token
        assert len(kept.entries) <= (1 if max_bytes == 1 else len(tasks))
        if max_bytes > 1:  # no context token is read twice
            assert kept.prefilled <= sum(len(ids) for ids, _, _ in reread) and kept.reused > 0
    assert isinstance(hf_turns(model, tokenizer), PrefixCachedWriter)


def test_only_models_with_full_attention_caches_keep_them():
    from types import SimpleNamespace

    from transformers import LlamaConfig, MistralConfig

    from coalign.models.turn_writers import supports

    assert supports(SimpleNamespace(config=LlamaConfig(num_hidden_layers=2)))
    assert not supports(SimpleNamespace(config=MistralConfig(num_hidden_layers=2, sliding_window=16)))
    assert not supports(SimpleNamespace())  # a scripted model, no transformers config


def test_the_static_turn_cache_is_for_batches_on_the_cpu_only():
    from types import SimpleNamespace

    import torch

    from coalign.models.turn_writers import turn_cache

    assert turn_cache(SimpleNamespace(device=torch.device("cuda", 0)), 8, 100) == {}
