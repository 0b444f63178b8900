"""MOAT per turn on web tasks: units and their prompts, per-turn scoring and pairs, the per-turn critic, a
mixed maths + web round end to end (resumed), the bench over web sets, and the onetime path unchanged."""

import io
import json

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.core.errors import RunError
from coalign.core.runs import Run
from coalign.formats.lumos import grounder_prompt, planner_prompt
from coalign.formats.lumos_iterative import chat_prompt, planner_turn
from coalign.moat import recipe as moat
from coalign.moat.bench import run_bench
from coalign.moat.data import round_tasks
from coalign.moat.recipe import pair_stage, round_premise, run_moat, score_stage
from coalign.moat.report import report_markdown
from coalign.moat.scoring import ActionScore
from coalign.moat.sft_data import planner_pair
from coalign.moat.turn_critic import judge_turn, judge_turns
from coalign.moat.units import round_units, task_units, turn_subgoal
from coalign.models.agents import grounder_example
from coalign.models.load import load_tokenizer, render_prompt
from coalign.reports.tables import eval_rows, eval_table
from coalign.tasks.episodes import grounder_conversation, planner_conversation
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.sources import load_data
from coalign.tasks.web_suite import generate_web_suite
from coalign.training.dpo import dpo_dataset
from tests.moat.test_iterative import WEB_RUN
from tests.moat.test_moat import MOAT

MIXED = {
    **MOAT,
    "name": "moat-web-test",
    "data": WEB_RUN["data"],
    "eval": WEB_RUN["eval"],
    "moat": {**MOAT["moat"], "tasks": 4, "web_turns_per_task": 2},
}


def _lines(path):
    return [json.loads(line) for line in path.open()]


@pytest.fixture(scope="module")
def site():
    return generate_web_suite("train", 3)[0]


@pytest.fixture(scope="module")
def shop():
    return generate_web_suite("heldout", 1)[0]


# --------------------------------------------------------------------------- units


def test_a_turn_unit_prompts_with_the_gold_prefixes(site, shop) -> None:
    for task in (site, shop):
        planner, grounder = planner_conversation(task), grounder_conversation(task)
        units = task_units(task)
        assert [u.turn for u in units] == list(range(1, len(task.subgoals) + 1))  # no unit for the stop turn
        for u in units:
            t = u.turn
            assert u.planner_prompt() == tuple(planner[: 2 * t - 1]) and u.planner_prompt()[-1]["role"] == "user"
            assert u.gold_planner_output() == planner[2 * t - 1]["content"] == planner_turn(t, task.subgoals[t - 1])
            # the gold candidate's grounder prompt is the gold grounder conversation up to turn t's user turn
            assert u.grounder_prompt(planner[2 * t - 1]["content"]) == tuple(grounder[: 2 * t - 1])
            assert u.gold_actions() == grounder[2 * t - 1]["content"]
            assert u.key == {"id": task.id, "turn": t}
        other = units[-1].grounder_prompt("Subgoal 9: Click the blue button")  # a candidate's subgoal, turn's number
        assert other[:-1] == tuple(grounder[: 2 * len(units) - 2]) and other[-1]["content"].endswith(
            f"Subgoal {len(units)}: Click the blue button\n"
        )


def test_unparsed_turns_are_kept_whole_as_the_onetime_stages_keep_a_malformed_plan() -> None:
    assert turn_subgoal("No, I will keep planning. Subgoal 3: Click Search") == "Click Search"
    assert turn_subgoal("Subgoal 1: Type Paris") == "Type Paris"
    assert turn_subgoal("  garbled text ") == "garbled text"
    assert turn_subgoal("Yes, I will stop planning.") == "Yes, I will stop planning."


def test_turns_per_task_are_drawn_once_per_seed_and_task(site) -> None:
    n = len(site.subgoals)
    two = [u.turn for u in task_units(site, 2, seed=0)]
    assert len(two) == 2 and two == sorted(two) and set(two) <= set(range(1, n + 1))
    assert two == [u.turn for u in task_units(site, 2, seed=0)]
    assert [u.turn for u in task_units(site, n + 5, seed=0)] == list(range(1, n + 1))


def test_a_onetime_unit_is_exactly_the_onetime_path() -> None:
    tasks = generate_suite("train", 5)
    units = round_units(tasks, 2, seed=0)
    assert [u.task for u in units] == tasks and all(u.turn is None and u.key == {"id": u.task.id} for u in units)
    for u in units:
        t = u.task
        assert (u.planner_prompt(), u.gold_planner_output()) == planner_pair(t)
        assert u.planner_prompt() == planner_prompt(t.question)
        assert u.grounder_prompt("Subgoal 1: x") == grounder_prompt(t.question, "Subgoal 1: x", t.family)
        assert u.gold_actions() == grounder_example(t.question, t.subgoals, t.actions, t.family)[1]


# --------------------------------------------------------------------------- scoring and pairs


def test_turns_are_scored_in_the_gold_context_and_the_gold_subgoal_is_chosen(site, tmp_path, monkeypatch) -> None:
    """A scripted scorer: low NLL when the grounder's last user turn asks for the gold subgoal of its turn."""
    config = load_config("tiny", MIXED)
    units = task_units(site)
    seen = []

    def scripted(agent, users, completions, batch_size, share_prefix=False):
        seen.extend(zip(users, completions))
        out = []
        for user in users:
            turn = (len(user) + 1) // 2
            asked = user[-1]["content"].rstrip("\n")
            right = asked.endswith(f"Subgoal {turn}: {site.subgoals[turn - 1]}")
            out.append(ActionScore(nll_sum=(0.5 if right else 2.0) * 10, n_tokens=10, content_nll_sum=5, n_content=5))
        return out

    monkeypatch.setattr(moat, "score_completions", scripted)
    monkeypatch.setattr(moat.Agent, "load", staticmethod(lambda *a, **k: None))
    candidates = [
        ["Subgoal 9: nonsense words here", u.gold_planner_output(), "garbled"][: config.moat.k] for u in units
    ]
    run = Run(tmp_path)
    scores = score_stage(run, 1, config, "grounder", units, candidates)
    grounder = grounder_conversation(site)
    for i, u in enumerate(units):
        user, completion = seen[i * 3 + 1]  # the gold candidate
        assert user == tuple(grounder[: 2 * u.turn - 1]) and completion == grounder[2 * u.turn - 1]["content"]
        assert [s["mean"] for s in scores[i]] == [2.0, 0.5, 2.0]
    pairs = pair_stage(run, 1, config, units, candidates, scores)
    assert len(pairs) == len(units)
    for pair, u in zip(pairs, units):
        assert pair["turn"] == u.turn and pair["chosen"] == u.gold_planner_output()
        assert pair["rejected"] == "garbled" and pair["prompt"] == list(u.planner_prompt())
    info = run.stage_info("round1_pairs")
    assert info["pairs"] == info["turns"]["pairs"] == len(units)


@pytest.mark.slow
def test_a_fitted_grounder_scores_the_gold_subgoal_of_a_turn_below_a_content_free_one(tmp_path) -> None:
    """A tiny grounder fitted (60 steps) to two explicit-style site tasks: in the per-turn scoring context, the
    gold actions are likelier after the gold subgoal than after a vague one, turn by turn."""
    from coalign.config import SFTSettings, TinySpec
    from coalign.moat.scoring import score_completions
    from coalign.moat.sft_data import grounder_examples, tokenizer_texts
    from coalign.models.agents import Agent
    from coalign.models.load import make_tiny_model
    from coalign.training.sft import sft

    tasks = [t for t in generate_web_suite("train", 40) if t.subgoal_styles[0] == "explicit"][:2]
    spec = TinySpec(vocab_size=400, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)
    make_tiny_model([text for t in tasks for text in tokenizer_texts(t)], tmp_path / "init", spec)
    examples = [e for t in tasks for e in grounder_examples(t)]
    settings = SFTSettings(learning_rate=1e-2, epochs=40, batch_size=4, grad_accum=1, max_length=1024)
    sft(tmp_path / "init", examples, tmp_path / "grounder", settings)
    units = [u for t in tasks for u in task_units(t)]
    users, completions = [], []
    for u in units:
        for candidate in (u.gold_planner_output(), f"Subgoal {u.turn}: Do the next step on the page"):
            users.append(u.grounder_prompt(candidate))
            completions.append(u.gold_actions())
    scores = score_completions(Agent.load(str(tmp_path / "grounder")), users, completions, 16)
    gold, vague = [s.value("mean") for s in scores[::2]], [s.value("mean") for s in scores[1::2]]
    assert all(g < v for g, v in zip(gold, vague)), (gold, vague)


def test_dpo_renders_a_conversation_prompt_as_generation_does(tmp_path) -> None:
    from coalign.config import TinySpec
    from coalign.models.load import make_tiny_model

    task = generate_web_suite("train", 1)[0]
    make_tiny_model(
        [planner_prompt(task.question)] * 4,
        tmp_path,
        TinySpec(vocab_size=300, hidden_size=16, num_heads=2, num_kv_heads=2, intermediate_size=32),
    )
    tokenizer = load_tokenizer(tmp_path)
    unit = task_units(task)[1]
    data = dpo_dataset(tokenizer, [(unit.planner_prompt(), "a", "b"), ("one user turn", "c", "d")])
    assert data["prompt"] == [
        render_prompt(tokenizer, unit.planner_prompt()),
        render_prompt(tokenizer, "one user turn"),
    ]
    assert data["prompt"][0] == chat_prompt(list(unit.planner_prompt()))  # no chat template: Lumos's format
    assert data["chosen"] == ["a" + tokenizer.eos_token, "c" + tokenizer.eos_token]


# --------------------------------------------------------------------------- the per-turn critic


def test_the_site_critic_keeps_a_right_step_and_corrects_a_wrong_one(site) -> None:
    groups = site.action_groups()
    for t, group in enumerate(groups, start=1):
        gold = "; ".join(group)
        kept = judge_turn(site, t, gold)
        assert kept.success and kept.actions == gold
        page = "Env" if t == 1 else f"R{t - 1}"
        wrong = judge_turn(site, t, f"R{t} = CLICK({page}, QUERY: zzqx vvwy)")
        assert not wrong.success and wrong.actions == gold and "wrong step" in wrong.note
        assert wrong.corrected_subgoals == (site.subgoals[t - 1].strip(),) and kept.corrected_subgoals is None
    extra = judge_turn(site, 1, "; ".join([*groups[0], groups[1][0]]))  # also takes turn 2's step
    assert not extra.success and "2 steps" in extra.note
    last = len(groups)
    past = judge_turn(site, last, "; ".join([*groups[-1], groups[-1][0].replace(f"R{last}", f"R{last + 1}", 1)]))
    assert not past.success  # an action past the last step fails the turn


@pytest.mark.parametrize("mode", ["original", "corrected"])
def test_a_wrong_turn_trains_the_gold_turn_with_the_modes_subgoal(site, mode, tmp_path) -> None:
    units = task_units(site)
    candidates = [[planner_turn(u.turn, "Look around")] * 2 for u in units]
    groundings = [[u.gold_actions(), "R9 = CLICK(Env, QUERY: zzqx)"] for u in units]
    config = load_config("tiny", {"moat": {"k": 2, "critic_subgoals": mode}})
    rows = moat.critic_stage(Run(tmp_path), 1, config, units, candidates, groundings)
    by_turn = {(u.task.id, u.turn): u for u in units}
    for u, (right, wrong) in zip(units, zip(rows[::2], rows[1::2])):
        subgoal = site.subgoals[u.turn - 1].strip() if mode == "corrected" else "Look around"
        assert (right["success"], right["subgoals"]) == (True, ["Look around"])
        assert (wrong["success"], wrong["actions"], wrong["subgoals"]) == (False, u.gold_actions(), [subgoal])
        assert moat._critic_example(wrong, by_turn, {})[0] == u.grounder_prompt_for(subgoal)
    record = Run(tmp_path).stage_info("round1_critic")
    assert record["turns"]["corrected_subgoals"] == (len(units) if mode == "corrected" else 0)


def test_the_shop_critic_judges_a_turn_by_its_result(shop) -> None:
    groups = shop.action_groups()
    for t, group in enumerate(groups, start=1):
        gold = "; ".join(group)
        verdict = judge_turn(shop, t, gold)
        assert verdict.success and verdict.actions == gold, (t, verdict.note)
    other = judge_turn(shop, 1, "R1 = Search(bright yellow garden hose)")
    assert not other.success and other.actions == "; ".join(groups[0])
    failed = judge_turn(shop, 2, "R2 = Click(NO-SUCH-ITEM); R3 = FeatureRetrieve(R2, Query: x)")
    assert not failed.success and failed.note.startswith("action failed")
    swapped = "; ".join(groups[1]).replace(groups[1][0].split("(")[1].rstrip(")"), "B0XXXXXXX")
    assert not judge_turn(shop, 2, swapped).success


def test_critics_other_than_execution_and_none_refuse_web_turns(site) -> None:
    items = [(site, 1, "whatever")]
    assert judge_turns("none", items)[0].success
    with pytest.raises(RunError, match="cannot judge web turns"):
        judge_turns("llm", items)


def test_an_llm_critic_is_refused_before_any_work_on_web_tasks(tmp_path) -> None:
    options = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = load_config("tiny", {**MIXED, "moat": {**MIXED["moat"], "critic": "llm", "critic_options": options}})
    with pytest.raises(RunError, match="llm cannot judge web turns"):
        run_moat(config, tmp_path, Console(quiet=True))
    assert not (tmp_path / "stages").exists()
    with pytest.raises(RunError, match="llm cannot judge web turns"):
        run_bench(config, tmp_path / "bench", [0], ["moat"], workers=1, console=Console(quiet=True))
    assert not (tmp_path / "bench" / "seed0" / "cold_start" / "stages").exists()


def test_the_premise_counts_web_turns_by_the_turn_critic(site) -> None:
    units = task_units(site)
    scores = [[{"mean": 0.2}, {"mean": 3.0}] for _ in units]
    groundings = [[u.gold_actions(), "R9 = CLICK(Env, QUERY: zzqx)"] for u in units]
    premise = round_premise(units, scores, groundings, "mean")
    assert premise["candidates"] == 2 * len(units) and premise["grounding_success_rate"] == 0.5
    assert premise["nll_success_auc"] == 1.0 and "by_family" not in premise


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("moat-web")
    config = load_config("tiny", MIXED)
    return config, run_dir, run_moat(config, run_dir, Console(quiet=True))


@pytest.mark.slow
def test_a_mixed_round_samples_web_turns_and_trains_on_them(mixed_run) -> None:
    config, run_dir, history = mixed_run
    assert set(history) == {"round0", "round1"}
    assert history["round1"]["heldin"]["sets"]["web-suite-heldin"]["metric"] == "step_success_rate"
    candidates = _lines(run_dir / "round1" / "candidates.jsonl")
    web = [row for row in candidates if "turn" in row]
    assert len(candidates) - len(web) == 2 and len(web) == 4  # 2 maths tasks, 2 web tasks x 2 turns
    assert all(len(row["candidates"]) == 3 for row in candidates)
    pairs = _lines(run_dir / "round1" / "pairs.jsonl")
    assert any(isinstance(p["prompt"], list) for p in pairs) and any(isinstance(p["prompt"], str) for p in pairs)
    verdicts = _lines(run_dir / "round1" / "verdicts.jsonl")
    assert len(verdicts) == 18 and sum("turn" in v for v in verdicts) == 12 and all(v["actions"] for v in verdicts)
    stages = {s: json.loads((run_dir / "stages" / f"round1_{s}.json").read_text()) for s in ("sample", "critic")}
    assert stages["sample"]["turns"] == 4 and stages["critic"]["turns"]["judged"] == 12
    premise = json.loads((run_dir / "round1" / "premise.json").read_text())
    assert set(premise["by_family"]) == {"maths", "web"} and premise["by_family"]["web"]["candidates"] == 12
    sft = json.loads((run_dir / "stages" / "round1_grounder_sft.json").read_text())
    assert sft["examples"] == 2 * 18  # critic-built, mixed 1:1 with the initial data


@pytest.mark.slow
def test_rerunning_a_finished_mixed_round_redoes_nothing(mixed_run) -> None:
    config, run_dir, history = mixed_run
    markers = {p: p.stat().st_mtime_ns for p in (run_dir / "stages").glob("*.json")}
    assert run_moat(config, run_dir, Console(quiet=True)) == history
    assert {p: p.stat().st_mtime_ns for p in (run_dir / "stages").glob("*.json")} == markers


@pytest.mark.slow
def test_the_bench_takes_web_sets_and_reports_their_metrics(tmp_path) -> None:
    config = load_config("tiny", {**MIXED, "name": "bench-web"})
    results = run_bench(config, tmp_path, [0], ["lumos", "moat"], workers=1, console=Console(quiet=True))
    lumos = Run(tmp_path / "seed0" / "lumos")
    units = round_units(round_tasks(config, load_data(config.data.train, False)[0]), 2, 0)
    assert lumos.stage_info("round1_planner_sft")["examples"] == len(units)  # one gold output per MOAT unit
    moat_run = Run(tmp_path / "seed0" / "moat")
    grounder = [r.stage_info("round1_grounder_sft")["examples"] for r in (lumos, moat_run)]
    assert grounder[0] == grounder[1]
    report = report_markdown(results)
    assert "web-suite-heldin the step success rate" in report and "web-suite-heldout the reward" in report
    assert "| web avg [gold sg] |" in report and "| web PPL [gold sg] |" in report
    assert "nan" not in report.split("## Grounding PPL")[1].split("##")[0]
    round1 = results["runs"]["moat"]["0"]["rounds"]["round1"]
    assert [row[0] for row in eval_rows(round1["heldin"])] == ["web-suite-heldin", "average"]
    shown = Console(width=80, file=io.StringIO(), record=True)
    shown.print(eval_table(round1))
    assert "web-suite-heldin the step success rate" in " ".join(shown.export_text().split())
