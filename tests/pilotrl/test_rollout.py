"""GRPO rollouts: plan-token marking, the expert-guided stage-1 turns, TRL's rollout output (one row per
prompt, completions ending on the model's turn, the trained-token mask by stage) and the rollout function."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from coalign import envs
from coalign.core.errors import RunError
from coalign.formats.adaplan import PLAN_CLOSE, format_turn
from coalign.pilotrl import rollout as rollout_module
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func, prompt_rows, rollout_rows, trained_mask
from coalign.pilotrl.runtime import expert_guide, plan_tokens, run_episodes
from tests.toy_env import ScriptedModel, toy_tokenizer


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


@pytest.fixture(scope="module")
def tokenizer():
    return toy_tokenizer()


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_plan_tokens_end_with_the_closing_tag(tokenizer):
    turn = format_turn("step forward to reach position 1", "step forward", ["step forward", "open door"])
    ids = _ids(tokenizer, turn + "</s>")
    n = plan_tokens(tokenizer, ids)
    assert PLAN_CLOSE in tokenizer.decode(ids[:n]) and PLAN_CLOSE not in tokenizer.decode(ids[: n - 1])
    assert "Action" not in tokenizer.decode(ids[:n])
    assert plan_tokens(tokenizer, _ids(tokenizer, "Thought: x\nAction: open door")) == 0
    unclosed = _ids(tokenizer, "<global_plan>\nStep 1: step forward")
    assert plan_tokens(tokenizer, unclosed) == len(unclosed)


def test_guided_turns_take_the_experts_plan_and_train_only_what_the_model_wrote(tokenizer):
    """Stage 1: the plan block is the expert's (context, mask 0); the model writes thought and action."""
    model = ScriptedModel(tokenizer, plans=False)
    (episode,) = run_episodes(model, tokenizer, [("toy", 1)], "adaplan", progress=False, guide=expert_guide)
    assert episode.env.success and not any(t["errors"] for t in episode.turns)  # the plans are the guide's
    assert episode.turns[0]["plan"] == ["step forward to reach position 1", "step forward to reach position 2",
                                        "open door to finish"]  # fmt: skip
    assert episode.turns[2]["plan"] == ["open door to finish"]
    generated = tokenizer.decode([i for i, m in zip(episode.ids, episode.mask) if m])
    assert "<global_plan>" not in generated and generated.count("Action:") == len(episode.turns) == 3
    assert "<global_plan>" in tokenizer.decode(episode.ids) and sum(episode.plan_mask) == 0


def _episodes(tokenizer, **kwargs):
    return run_episodes(ScriptedModel(tokenizer), tokenizer, [("toy", s) for s in range(3)], "adaplan",
                        progress=False, **kwargs)  # fmt: skip


def test_rollout_rows_end_on_the_models_turn_with_observations_untrained(tokenizer):
    episodes = _episodes(tokenizer)
    out = rollout_rows(episodes, "all", tokenizer.eos_token_id)
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["env_mask"]) == 3
    for episode, prompt, completion, mask in zip(episodes, out["prompt_ids"], out["completion_ids"], out["env_mask"]):
        assert prompt + completion == episode.ids[: len(prompt) + len(completion)]
        assert completion[-1] == tokenizer.eos_token_id and len(mask) == len(completion)
        assert "Observation:" in tokenizer.decode(completion)  # attended to ...
        untrained = tokenizer.decode([i for i, m in zip(completion, mask) if not m])
        trained = tokenizer.decode([i for i, m in zip(completion, mask) if m])
        assert "Observation:" in untrained and "Observation:" not in trained  # ... never trained on
    assert [r["success"] for r in out["episode"]] == [True, True, True]


def test_a_context_stopped_episode_still_ends_on_its_last_turn(tokenizer):
    (episode,) = run_episodes(ScriptedModel(tokenizer, text="Thought: wait\nAction: wait"), tokenizer, [("toy", 1)],
                              "adaplan", max_context=200, max_new_tokens=20, progress=False)  # fmt: skip
    assert episode.stop == "context" and episode.mask[-1] == 0  # an observation was appended last
    out = rollout_rows([episode], "all", tokenizer.eos_token_id)
    assert out["completion_ids"][0][-1] == tokenizer.eos_token_id and out["env_mask"][0][-1] == 1


def test_isolated_rows_end_on_the_executors_end_of_turn_and_fit_the_context(tokenizer):
    """With a fixed executor the policy's last trained token closes a plan block; the row goes on through the
    executor's rest (untrained), so it ends on the end-of-sequence token TRL reads as a finished completion."""
    policy = ScriptedModel(tokenizer, text="<global_plan>\nStep 1: step forward\n</global_plan>\nThought: x")
    executor = ScriptedModel(tokenizer, plans=False)
    (episode,) = run_episodes(policy, tokenizer, [("toy", 0)], "adaplan", progress=False, executor=executor)
    out = rollout_rows([episode], "plan", tokenizer.eos_token_id)
    completion, mask = out["completion_ids"][0], out["env_mask"][0]
    assert completion[-1] == tokenizer.eos_token_id and mask[-1] == 0
    assert "Action:" in tokenizer.decode(completion[-12:]) and "</global_plan>" in tokenizer.decode(
        [i for i, m in zip(completion, mask) if m])  # fmt: skip
    for max_context in range(60, 110):  # the policy's part and the executor's rest both fit, or no turn is taken
        asked = []
        watched = Watched(tokenizer, plans=False, asked=asked)
        (short,) = run_episodes(policy, tokenizer, [("toy", 0)], "adaplan", progress=False, executor=watched,
                                max_context=max_context, max_new_tokens=10)  # fmt: skip
        assert all(n <= max_context for n in asked), (max_context, asked)
        assert short.turn_end <= max_context


class Watched(ScriptedModel):
    """The scripted model, noting how long each context it is asked to continue could grow."""

    def __init__(self, *args, asked: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = asked

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        self.asked.extend(int(k.sum()) + max_new_tokens for k in attention_mask)
        return super().generate(input_ids, attention_mask, max_new_tokens, **kwargs)


def test_stages_train_plan_or_action_tokens(tokenizer):
    (episode,) = _episodes(tokenizer)[:1]
    plan, action = trained_mask(episode, "plan"), trained_mask(episode, "action")
    assert [p + a for p, a in zip(plan, action)] == episode.mask and sum(plan) and sum(action)
    plan_text = tokenizer.decode([i for i, m in zip(episode.ids, plan) if m])
    action_text = tokenizer.decode([i for i, m in zip(episode.ids, action) if m])
    assert "<global_plan>" in plan_text and "Action:" not in plan_text
    assert "Action: step forward" in action_text and "Step 1" not in action_text


def test_an_episode_that_generated_nothing_gets_one_untrained_token(tokenizer):
    (episode,) = run_episodes(ScriptedModel(tokenizer), tokenizer, [("toy", 0)], "adaplan", max_context=70,
                              max_new_tokens=60, progress=False)  # fmt: skip
    assert episode.stop == "context" and not any(episode.mask)
    out = rollout_rows([episode], "all", tokenizer.eos_token_id)
    assert out["completion_ids"] == [[tokenizer.eos_token_id]] and out["env_mask"] == [[0]]


def test_prompt_rows_name_their_task_even_when_two_tasks_open_alike():
    rows = prompt_rows([("toy", 0), ("toy", 1), ("toy", 3)], "adaplan")  # seeds 0 and 3: the same door
    assert [(r["env"], r["seed"]) for r in rows] == [("toy", 0), ("toy", 1), ("toy", 3)]
    assert rows[0]["prompt"][0]["content"] == rows[2]["prompt"][0]["content"]
    assert [r["prompt"][0]["task"] for r in rows] == ["toy/0", "toy/1", "toy/3"]


def test_the_rollout_function_runs_each_prompt_as_its_task(tokenizer):
    rows = prompt_rows([("toy", 0), ("toy", 2)], "adaplan")
    trainer = _trainer(tokenizer)
    rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
    prompts = [rows[1]["prompt"]] * 2 + [rows[0]["prompt"]] * 2  # the sampler repeats each task per rollout
    out = rollout(prompts, trainer)
    assert [(e["env"], e["seed"]) for e in out["episode"]] == [("toy", 2)] * 2 + [("toy", 0)] * 2
    assert all(e["success"] for e in out["episode"]) and out["logprobs"] is None
    with pytest.raises(ValueError, match="not one of its tasks"):
        rollout([[{"role": "user", "content": rows[0]["prompt"][0]["content"]}]], trainer)
    with pytest.raises(ValueError, match="not one of its tasks"):
        rollout([[{"role": "user", "content": "x", "task": "toy/99"}]], trainer)


class FakeVLLM:
    """TRL's `VLLMGeneration.generate` contract over the scripted model: completions without their prompts,
    here with stray tokens after the end-of-sequence token (a real engine stops there; the cut must hold)."""

    def __init__(self, tokenizer):
        self.model, self.tokenizer, self.calls = ScriptedModel(tokenizer), tokenizer, 0

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.calls += 1
        completions = []
        for ids in prompts:
            new = self.tokenizer(self.model.turn(self.tokenizer.decode(ids)) + "</s>", add_special_tokens=False)
            completions.append(new["input_ids"] + [self.tokenizer.pad_token_id] * 3)
        return prompts, completions, None, None


def _trainer(tokenizer, mode: str = "colocate", tensor_parallel: int = 1, **extra):
    model = ScriptedModel(tokenizer)
    accelerator = SimpleNamespace(
        unwrap_model=lambda m: m, num_processes=extra.pop("processes", 1), state=SimpleNamespace(deepspeed_plugin=None)
    )
    return SimpleNamespace(
        model=model,
        model_wrapped=model,  # as the accelerator wrapped it: no DDP, FSDP or DeepSpeed here
        accelerator=accelerator,
        processing_class=tokenizer,
        args=SimpleNamespace(
            temperature=1.0,
            top_p=1.0,
            vllm_mode=mode,
            vllm_tensor_parallel_size=tensor_parallel,
            ds3_gather_for_generation=True,
            gradient_checkpointing_kwargs=None,
        ),
        **extra,
    )


def test_vllm_rollouts_take_the_same_code_path_and_give_the_same_rows(tokenizer):
    rows = prompt_rows([("toy", 0), ("toy", 2)], "adaplan")
    rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
    prompts = [rows[0]["prompt"], rows[1]["prompt"]]
    engine = FakeVLLM(tokenizer)
    with_vllm = rollout(prompts, _trainer(tokenizer, use_vllm=True, vllm_generation=engine))
    with_generate = rollout(prompts, _trainer(tokenizer, use_vllm=False))
    assert engine.calls > 0
    assert with_vllm == with_generate


def test_colocated_vllm_rollouts_under_a_launcher_generate_alone(tokenizer, monkeypatch):
    """A colocated engine with tensor parallel 1 generates each rank's prompts alone (TRL gathers nothing), so a
    rank's rollouts run as in one process, without waiting for the others."""
    monkeypatch.setattr(rollout_module, "gather_object", lambda _: pytest.fail("nothing to agree on"))
    rows = prompt_rows([("toy", 0), ("toy", 2)], "adaplan")
    rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
    prompts = [rows[0]["prompt"], rows[1]["prompt"]]
    alone = rollout(prompts, _trainer(tokenizer, use_vllm=True, vllm_generation=FakeVLLM(tokenizer)))
    launched = _trainer(tokenizer, use_vllm=True, vllm_generation=FakeVLLM(tokenizer), processes=2)
    assert rollout(prompts, launched) == alone


class Ranks:
    """Ranks as threads: `exchange` is an all-gather that each rank's call meets (a rank that never comes breaks
    the barrier, so a call some rank skips fails the test instead of hanging it)."""

    def __init__(self, size: int):
        self.barrier, self.slots, self.local = threading.Barrier(size, timeout=20), [None] * size, threading.local()

    def exchange(self, value):
        self.slots[self.local.rank] = value
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got

    def gather_object(self, value: list) -> list:
        """accelerate's `gather_object`: every rank's list, concatenated in rank order."""
        parts = self.exchange(("gather", value))
        assert {kind for kind, _ in parts} == {"gather"}, parts  # no rank in a vLLM call meanwhile
        return [item for _, part in parts for item in part]


class ServedVLLM(FakeVLLM):
    """TRL's server mode: a collective call, every rank's prompts gathered (each rank's slice of the answers cut
    at rank x its own count, so every rank must send as many); one-token prompts are padding."""

    def __init__(self, tokenizer, group: Ranks):
        super().__init__(tokenizer)
        self.group, self.widths, self.padding = group, [], 0

    def generate(self, prompts, images, num_generations):
        kinds, sizes = zip(*((kind, len(part)) for kind, part in self.group.exchange(("generate", prompts))))
        assert set(kinds) == {"generate"} and len(set(sizes)) == 1 and sizes[0] > 0, (kinds, sizes)
        if self.group.local.rank == 0:
            self.widths.append(sizes[0])
        eos = self.tokenizer.eos_token_id
        real = [ids for ids in prompts if ids != [eos]]
        self.padding += len(prompts) - len(real)
        _, completions, _, _ = super().generate(real, images, num_generations)
        return prompts, completions + [[eos]] * (len(prompts) - len(real)), None, None


@pytest.mark.parametrize(("mode", "tensor_parallel"), [("server", 1), ("colocate", 2)])
def test_collective_vllm_rollouts_under_a_launcher_call_it_together(tokenizer, monkeypatch, mode, tensor_parallel):
    """Server mode (and tensor parallelism) make TRL's vLLM call a collective: two ranks whose episodes take 2 and
    4 turns call it together every time, as many prompts each (padded), until both are done, and each gets the
    rows one process gives its prompts."""
    group = Ranks(2)
    monkeypatch.setattr(rollout_module, "gather_object", group.gather_object)
    rows = prompt_rows([("toy", 0), ("toy", 2)], "adaplan")
    rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
    shares = [[rows[0]["prompt"]] * 3, [rows[1]["prompt"]] * 2]  # seed 0: 2 turns, seed 2: 4
    alone = [
        rollout(share, _trainer(tokenizer, use_vllm=True, vllm_generation=FakeVLLM(tokenizer))) for share in shares
    ]
    engine = ServedVLLM(tokenizer, group)
    got: list = [None, None]

    def rank(r: int) -> None:
        group.local.rank = r
        trainer = _trainer(tokenizer, mode, tensor_parallel, use_vllm=True, vllm_generation=engine, processes=2)
        got[r] = rollout(shares[r], trainer)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == alone
    assert engine.widths == [3, 3, 2, 2] and engine.padding == 1 + 1 + 2 + 2  # rank 1 pads, then rank 0 joins with none


def test_a_spec_refuses_unknown_token_sets_and_guided_react():
    with pytest.raises(ValueError, match="train must be"):
        RolloutSpec(train="observations")
    with pytest.raises(ValueError, match="guided"):
        RolloutSpec(mode="react", guided=True)


@pytest.mark.parametrize("fsdp,processes,refused", [(2, 2, True), (None, 2, False), (2, 1, False)])
def test_the_policys_own_rollouts_under_fsdp_on_several_processes_are_refused(tokenizer, fsdp, processes, refused):
    """FSDP2 gathers shards in every forward, so ranks running episodes of different lengths would hang."""
    rows = prompt_rows([("toy", 0)], "adaplan")
    trainer = _trainer(tokenizer, use_vllm=False, processes=processes)
    trainer.accelerator.state.fsdp_plugin = SimpleNamespace(fsdp_version=fsdp) if fsdp else None
    rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
    if refused:
        with pytest.raises(RunError, match="under FSDP with several processes would hang"):
            rollout([rows[0]["prompt"]], trainer)
    else:
        assert len(rollout([rows[0]["prompt"]], trainer)["episode"]) == 1
