"""The web family trains and evaluates: per-turn SFT rows, the iterative loop driven by scripted agents
(gold turns score 1, hostile turns end the episode with a recorded error), the diagnostics, the guards."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coalign.config import DataSource, EvalSettings, load_config
from coalign.formats.lumos import format_actions, parse_planner_prompt
from coalign.formats.lumos_iterative import (
    STOP_PLANNING,
    chat_prompt,
    parse_grounder_messages,
    parse_planner_messages,
    planner_turn,
    turn_examples,
)
from coalign.moat import evaluate, iterative
from coalign.moat.evaluate import evaluate_iterative, evaluate_tasks, split_summary
from coalign.moat.iterative import malformed_grounding, run_episodes
from coalign.moat.sft_data import grounder_data, grounder_examples, planner_data, planner_examples
from coalign.models.load import make_tiny_model, render_prompt
from coalign.tasks.episodes import gold_feedback
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.sources import load_data, refuse_in_rounds
from coalign.tasks.web_suite import BLANK_SUBGOAL, generate_web_suite
from coalign.training.sft import sft_dataset
from tests.moat.test_baseline import TINY

SITES = generate_web_suite("heldin", 6)
SHOP = generate_web_suite("heldout", 3)
SETTINGS = EvalSettings(batch_size=4, max_turns=12)


# --------------------------------------------------------------------------- SFT rows


@pytest.mark.parametrize("task", [SITES[0], SHOP[0]], ids=["site", "shop"])
def test_sft_rows_are_one_example_per_assistant_turn_and_rebuild_the_gold_conversations(task) -> None:
    plans, grounds = planner_examples(task), grounder_examples(task)
    assert len(plans) == len(task.subgoals) + 1 and len(grounds) == len(task.subgoals)
    for prompt, _ in plans + grounds:  # the prompt is the conversation so far, ending with a user turn
        assert [m["role"] for m in prompt] == ["user", "assistant"] * (len(prompt) // 2) + ["user"]
    assert [c for _, c in plans] == [planner_turn(k, s) for k, s in enumerate(task.subgoals, 1)] + [STOP_PLANNING]
    assert [c for _, c in grounds] == [format_actions(list(group)) for group in task.action_groups()]
    # every assistant turn is a completion once, in its context: the last prompt plus its turn is the whole row
    last_prompt, last_turn = plans[-1]
    planner = parse_planner_messages([*last_prompt, {"role": "assistant", "content": last_turn}])
    assert (planner.task, planner.subgoals, list(planner.feedback)) == (
        task.question,
        task.subgoals,
        gold_feedback(task),
    )
    last_prompt, last_turn = grounds[-1]
    grounder = parse_grounder_messages([*last_prompt, {"role": "assistant", "content": last_turn}])
    assert (grounder.subgoals, grounder.tools) == (task.subgoals, task.tools)
    assert [a for group in grounder.actions for a in group] == list(task.actions)


def test_sft_prompts_render_as_the_loop_renders_them_and_mixed_data_keeps_onetime_rows(tmp_path) -> None:
    maths, web = generate_suite("train", 2), generate_web_suite("train", 2)
    config = load_config("tiny", {"data": {"train": [{"kind": "suite", "split": "train", "n": 2}]}})
    examples = planner_data(config, maths + web)
    assert examples[:2] == [planner_examples(t)[0] for t in maths] and all(isinstance(u, str) for u, _ in examples[:2])
    assert len(examples) == 2 + sum(len(t.subgoals) + 1 for t in web)
    assert len(grounder_data(config, web)) == sum(len(t.subgoals) for t in web)  # no plan-following copies for web
    make_tiny_model(["<|user|>\nhello\n<|assistant|>\nworld</s>"] * 4, tmp_path, load_config("tiny").models.tiny)
    from coalign.models.load import load_tokenizer

    tok = load_tokenizer(tmp_path)
    data = sft_dataset(tok, examples)
    conversation, turn = examples[-1]
    assert data["prompt"][-1] == chat_prompt(conversation) == render_prompt(tok, conversation)
    assert data["prompt"][-1].endswith("<|assistant|>\n") and data["completion"][-1] == turn == STOP_PLANNING
    assert data["prompt"][0] == render_prompt(tok, examples[0][0])  # a onetime row keeps its plain prompt


def test_turn_examples_refuse_a_conversation_without_a_last_assistant_turn() -> None:
    with pytest.raises(Exception, match="assistant"):
        turn_examples([{"role": "user", "content": "hi"}])


# --------------------------------------------------------------------------- scripted agents


def _task_of(conversation, tasks):
    first = conversation[0]["content"]
    if first.startswith("Please provide"):
        question = parse_planner_prompt(first)
        return next(t for t in tasks if t.question == question)
    return next(t for t in tasks if f"Task: {t.question} \n" in first)


class Scripted:
    """An Agent-like object: `reply(task, conversation)` writes the next assistant turn."""

    def __init__(self, reply) -> None:
        self.reply = reply


def gold_planner(task, conversation) -> str:
    k = sum(m["role"] == "assistant" for m in conversation) + 1
    return planner_turn(k, task.subgoals[k - 1]) if k <= len(task.subgoals) else STOP_PLANNING


def gold_grounder(task, conversation) -> str:
    """The gold actions of the turn's subgoal, but only when the subgoal is the gold one (so blanking hurts)."""
    k = sum(m["role"] == "user" for m in conversation)
    said = conversation[-1]["content"]
    return format_actions(list(task.action_groups()[k - 1])) if task.subgoals[k - 1] in said else "R1 = Click(nothing)"


@pytest.fixture
def scripted(monkeypatch):
    """Route the loop's generation to scripted agents; records the batch sizes asked for."""
    calls = []

    def fake_generate(agent, conversations, max_new_tokens, batch_size, **kwargs):
        calls.append(len(conversations))
        tasks = SITES + SHOP
        return [[agent.reply(_task_of(c, tasks), c)] for c in conversations]

    monkeypatch.setattr(iterative, "generate", fake_generate)
    return calls


def test_gold_turns_score_one_on_sites_and_in_the_shop(scripted) -> None:
    rollouts = run_episodes(Scripted(gold_planner), Scripted(gold_grounder), SITES + SHOP, SETTINGS)
    assert [r.score for r in rollouts] == [1.0] * len(SITES + SHOP)
    assert {r.stop for r in rollouts} == {"episode done"} and not any(r.error or r.action_errors for r in rollouts)
    assert [r.subgoals for r in rollouts] == [list(t.subgoals) for t in SITES + SHOP]
    assert scripted[0] == len(SITES + SHOP)  # the first turn is one batch over all tasks
    shop = rollouts[len(SITES)]
    assert shop.planner[2]["content"] == gold_feedback(SHOP[0])[0]  # the planner heard the shop's search result


HOSTILE = [
    "__import__('os').system('touch /tmp/pwned')",
    "Subgoal",
    "R1 = CLICK(",
    "x" * 1_000_000,
    "\x00\u202e" * 1000,
    "",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_planner_turn_ends_the_episode_with_a_recorded_error(scripted, text) -> None:
    rollouts = run_episodes(Scripted(lambda t, c: text), Scripted(gold_grounder), [SITES[0], SHOP[0]], SETTINGS)
    for r in rollouts:
        assert r.stop == "malformed planner turn" and r.error and r.score == 0.0 and r.actions == []


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_grounder_turn_ends_the_episode_with_a_recorded_error(scripted, text) -> None:
    rollouts = run_episodes(Scripted(gold_planner), Scripted(lambda t, c: text), [SITES[0], SHOP[0]], SETTINGS)
    for r in rollouts:
        assert r.stop == "malformed grounder turn" and r.error.startswith("malformed grounder turn")
        assert r.score < 1.0 and len(r.actions) == 1


def test_actions_that_parse_but_fail_are_step_errors_and_the_loop_goes_on(scripted) -> None:
    wrong = Scripted(lambda t, c: "R1 = CLICK(Env, QUERY: zzz qqq)" if t.tools != "shop" else "R1 = Click(nothing)")
    site, shop = run_episodes(Scripted(gold_planner), wrong, [SITES[0], SHOP[0]], SETTINGS)
    assert site.stop == "episode done" and site.score == 0.0 and len(site.action_errors) == len(SITES[0].subgoals)
    assert "no element on the page matches" in site.action_errors[0]
    assert shop.stop == "planner stopped" and shop.score == 0.0 and "cannot click" in shop.action_errors[0]
    assert malformed_grounding("R1 = CLICK(Env, QUERY: zzz)") is None


def test_the_turn_limit_holds(scripted) -> None:
    forever = Scripted(lambda t, c: planner_turn(sum(m["role"] == "assistant" for m in c) + 1, "Look around"))
    (shop,) = run_episodes(forever, Scripted(lambda t, c: "R1 = Click(nothing)"), SHOP[:1], EvalSettings(max_turns=3))
    assert shop.stop == "turn limit" and len(shop.subgoals) == len(shop.actions) == 3 and shop.score == 0.0


def test_gold_and_blank_subgoals_feed_the_grounder_turn_by_turn(scripted) -> None:
    gold = run_episodes(None, Scripted(gold_grounder), SITES + SHOP, SETTINGS, "gold")
    blank = run_episodes(None, Scripted(gold_grounder), SITES + SHOP, SETTINGS, "blank", BLANK_SUBGOAL)
    assert [r.score for r in gold] == [1.0] * len(gold)
    assert all(r.subgoals == [BLANK_SUBGOAL] * len(r.task.subgoals) for r in blank if r.stop != "episode done")
    assert all(r.score < 1.0 for r in blank)


def test_evaluation_reports_the_set_metric_diagnostics_and_rows(scripted, monkeypatch) -> None:
    scored = []

    def fake_scores(agent, users, completions, batch_size, desc=""):
        scored.extend(zip(users, completions))
        return [SimpleNamespace(nll_sum=0.0, n_tokens=4) for _ in users]

    monkeypatch.setattr(evaluate, "score_completions", fake_scores)
    agents = Scripted(gold_planner), Scripted(gold_grounder)
    sites, sites_rows = evaluate_tasks(*agents, SITES, SETTINGS, "sites")
    shop, shop_rows = evaluate_iterative(*agents, SHOP, SETTINGS, "shop")
    assert (sites["metric"], sites["accuracy"], sites["step_success_rate"], sites["task_success"]) == (
        "step_success_rate",
        1.0,
        1.0,
        1.0,
    )
    assert (shop["metric"], shop["reward"], shop["grounder_acc_gold_subgoals"]) == ("reward", 1.0, 1.0)
    for metrics in (sites, shop):
        assert metrics["grounder_acc_blank_subgoals"] < 1.0 and metrics["capability_gap"] == 0.0
        assert metrics["plan_value"] == 1.0 - metrics["grounder_acc_blank_subgoals"]  # the team minus blanked
        assert metrics["subgoal_agreement"] == 1.0  # the gold planner writes the gold subgoals, turn by turn
        assert metrics["grounding_ppl_gold_subgoals"] == pytest.approx(1.0) and "grounding_ppl" not in metrics
        assert sum(metrics["style_counts"].values()) == metrics["n"]
    # PPL scores the gold grounder conversation turn by turn: one row per gold subgoal
    assert len(scored) == sum(len(t.subgoals) for t in SITES + SHOP)
    row = shop_rows[0]
    assert row["score"] == 1.0 and row["correct"] and row["stop"] == "episode done" and row["gold_subgoal_score"] == 1.0
    assert row["planner_conversation"][0]["role"] == "user" and len(row["actions"]) == len(SHOP[0].subgoals)
    summary = split_summary({"sites": sites, "maths": {"accuracy": 0.5, "grounding_ppl": 2.0}})
    assert summary["accuracy"] == 0.75


# --------------------------------------------------------------------------- guards


def test_runs_and_moat_rounds_take_web_tasks() -> None:
    tasks, record = load_data([DataSource(kind="web_suite", split="train", n=2)], skip_bad_rows=False)
    assert record["tasks"] == 2 and all(t.iterative for t in tasks)
    refuse_in_rounds(tasks, "MOAT rounds")  # MOAT per turn (moat.units)
    refuse_in_rounds(generate_suite("train", 2), "MOAT rounds")


# --------------------------------------------------------------------------- end to end

WEB_RUN = {
    **TINY,
    "name": "web-test",
    "data": {
        "train": [{"kind": "suite", "split": "train", "n": 8}, {"kind": "web_suite", "split": "train", "n": 8}],
        "heldin": [{"kind": "web_suite", "split": "heldin", "n": 3}],
        "heldout": [{"kind": "web_suite", "split": "heldout", "n": 2}],
    },
    "eval": {"batch_size": 8, "max_new_tokens_plan": 12, "max_new_tokens_ground": 16, "max_turns": 3},
}


@pytest.mark.slow
def test_a_tiny_team_trains_on_maths_and_web_tasks_and_evaluates_web_sets(tmp_path) -> None:
    import json

    from rich.console import Console

    from coalign.moat.baseline import run_lumos

    config = load_config("tiny", WEB_RUN)
    results = run_lumos(config, tmp_path, Console(quiet=True))
    train = load_data(config.data.train, False)[0]
    stages = {s: json.loads((tmp_path / "stages" / f"{s}.json").read_text()) for s in ("planner_sft", "grounder_sft")}
    assert stages["planner_sft"]["examples"] == len(planner_data(config, train))  # web tasks: one example per turn
    heldin, heldout = results["heldin"]["sets"]["web-suite-heldin"], results["heldout"]["sets"]["web-suite-heldout"]
    assert (heldin["metric"], heldout["metric"]) == ("step_success_rate", "reward")
    for metrics in (heldin, heldout):
        for key in ("accuracy", "grounder_acc_gold_subgoals", "grounder_acc_blank_subgoals", "plan_well_formed"):
            assert 0.0 <= metrics[key] <= 1.0
        assert metrics["grounding_ppl_gold_subgoals"] > 1.0 and sum(metrics["stops"].values()) == metrics["n"]
    rows = [json.loads(line) for line in (tmp_path / "eval" / "heldout-web-suite-heldout.predictions.jsonl").open()]
    assert (
        len(rows) == 2 and {"planner_conversation", "actions", "score", "stop", "gold_subgoal_score"} <= rows[0].keys()
    )


def test_the_bundled_web_config_holds_the_longest_gold_site_examples() -> None:
    config = load_config("tiny-web")
    assert [s.kind for s in config.data.train + config.data.heldin + config.data.heldout] == ["web_suite"] * 3
    assert config.eval.max_turns > max(len(t.subgoals) for t in generate_web_suite("train", 300))
    assert config.planner_sft.max_length >= 183 and config.grounder_sft.max_length >= 222  # measured, see the config
