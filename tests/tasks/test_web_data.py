"""Web data: Mind2Web's and WebShop's published formats, Lumos's iterative web rows, and their source kinds.

The fixtures under tests/fixtures/web are written by hand in each format: Mind2Web's task lists
(`test_task_*.json`), WebShop's data folder (products, attributes, human goals) and Lumos's
`lumos_web_agent_{plan,ground}_iterative.jsonl` rows spelled as its data builder writes them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coalign.config import ConfigError, DataSource, load_config
from coalign.core.errors import DataError, SkippedRows
from coalign.formats.lumos_iterative import parse_planner_messages, web_feedback
from coalign.moat.sft_data import planner_examples
from coalign.tasks.episodes import episode_for, gold_feedback
from coalign.tasks.lumos import load_lumos_rows, load_lumos_tasks, save_lumos_rows, task_to_iterative_rows
from coalign.tasks.mind2web import load_mind2web, node_texts
from coalign.tasks.sources import load_data, load_sources, refuse_in_rounds, source_name
from coalign.tasks.web_suite import generate_web_suite
from coalign.tasks.webshop import load_catalogue, load_webshop

FIXTURES = Path(__file__).parents[1] / "fixtures" / "web"
MIND2WEB = FIXTURES / "mind2web"
WEBSHOP = FIXTURES / "webshop"
PLAN_ROWS = FIXTURES / "lumos" / "lumos_web_agent_plan_iterative.jsonl"
GROUND_ROWS = FIXTURES / "lumos" / "lumos_web_agent_ground_iterative.jsonl"


# --------------------------------------------------------------------------- Mind2Web


def test_mind2web_tasks_keep_each_steps_candidates_with_their_text_and_the_positives() -> None:
    flights, tickets = load_mind2web(MIND2WEB)
    assert (flights.id, flights.family, flights.dataset) == ("mind2web-0b1c2d3e-flights", "web", "mind2web")
    assert flights.subgoals == flights.actions == () and flights.meta["website"] == "skyvane"
    assert flights.meta["action_reprs"][1] == "[textbox]  From -> TYPE: Brennholt"
    first, second, third = flights.meta["gold_steps"]
    assert [(e["tag"], e["text"]) for e in first["page"]] == [
        ("a", "Deals"),
        ("label", "Round trip"),
        ("label", "One way"),
        ("span", "One way"),
        ("input", ""),
        ("input", ""),
        ("button", "Search flights"),
    ]  # document order, whatever the candidate lists' order
    assert first["positives"] == ["13", "14"] and (first["op"], first["value"]) == ("CLICK", "")
    assert (second["op"], second["value"], second["positives"]) == ("TYPE", "Brennholt", ["15"])
    assert second["page"][1]["attributes"] == {"aria_label": "From", "type": "text"}  # layout attributes dropped
    assert third["page"][0]["text"] == "1 adult 2 adults" and third["page"][2]["attributes"] == {"alt": "Skyvane logo"}
    assert tickets.meta["gold_steps"][1]["op"] == "CLICK"  # Mind2Web maps ENTER to CLICK
    assert load_mind2web(MIND2WEB / "test_task_1.json") == [tickets]


def test_mind2web_steps_score_in_the_site_episode() -> None:
    (flights,) = load_mind2web(MIND2WEB / "test_task_0.json")
    episode = episode_for(flights)
    episode.act("R1 = CLICK(Env, QUERY: Choose the label One way)")
    episode.act("R2 = TYPE(R1, QUERY: Type Brennholt in the From box, TEXT: Brennholt)")
    episode.act("R3 = SELECT(R2, QUERY: Select 2 adults for the Passengers, TEXT: 3 adults)")
    assert episode.flags == [True, True, False] and episode.score() == pytest.approx(2 / 3)


def test_node_texts_follow_nesting_void_elements_and_unclosed_tags() -> None:
    texts, order = node_texts(
        '<div backend_node_id="1">A <b backend_node_id="2">bold</b><input backend_node_id="3"> tail'
        '<p backend_node_id="4">open <i>and</i> shut</div><span backend_node_id="5">after</span>'
    )
    assert texts == {"1": "A bold tail open and shut", "2": "bold", "3": "", "4": "open and shut", "5": "after"}
    assert list(order) == ["1", "2", "3", "4", "5"]


def _mind2web_copy(tmp_path: Path, change) -> Path:
    tasks = json.loads((MIND2WEB / "test_task_0.json").read_text())
    tasks = [tasks[0], json.loads(json.dumps(tasks[0]))]
    change(tasks[1])
    path = tmp_path / "test_task_0.json"
    path.write_text(json.dumps(tasks))
    return path


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda t: t["actions"][1]["operation"].update(op="HOVER"), "actions[1].operation.op", "expected one of CLICK"),
        (lambda t: t["actions"][0].pop("pos_candidates"), "actions[0].pos_candidates", "missing"),
        (lambda t: t["actions"][2].update(pos_candidates=[]), "actions[2].pos_candidates", "empty"),
        (
            lambda t: t["actions"][0]["neg_candidates"][1].update(attributes="{not json"),
            "actions[0].neg_candidates[1].attributes",
            "not a JSON object text",
        ),
        (
            lambda t: t["actions"][0]["pos_candidates"][0].pop("backend_node_id"),
            "actions[0].pos_candidates[0].backend_node_id",
            "missing",
        ),
        (lambda t: t["action_reprs"].pop(), "action_reprs", "expected 3 strings"),
        (lambda t: t.update(actions=[]), "actions", "empty"),
        (lambda t: t.update(confirmed_task=" "), "confirmed_task", "empty text"),
    ],
)
def test_a_bad_mind2web_task_names_file_task_and_field(tmp_path: Path, change, field: str, problem: str) -> None:
    path = _mind2web_copy(tmp_path, change)
    with pytest.raises(DataError) as info:
        load_mind2web(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, field)
    assert problem in info.value.problem
    skipped = SkippedRows()
    assert [t.id for t in load_mind2web(path, skipped)] == ["mind2web-0b1c2d3e-flights"]
    assert [(e.line, e.field) for e in skipped.errors] == [(2, field)]


def test_a_mind2web_file_that_is_not_a_list_always_raises(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"annotation_id": "x"}')
    with pytest.raises(DataError, match="expected a JSON list of Mind2Web tasks"):
        load_mind2web(tmp_path, SkippedRows())


# --------------------------------------------------------------------------- WebShop


def test_webshop_products_read_as_webshops_engine_reads_them() -> None:
    catalogue = load_catalogue(WEBSHOP)
    tea, jasmine, mug = catalogue.products  # "nan" and the repeated asin passed over
    assert tea.options == (("flavor name", ("mint", "lemon | ginger")), ("size", ("20 count", "40 count")))
    assert (tea.price, tea.query, tea.attributes) == (12.99, "green tea", ("caffeine free", "organic"))
    assert tea.text == "Caffeine free\nOrganic leaves\nOrganic green tea from hill farms."
    assert 8.5 <= jasmine.price <= 15.0 and jasmine.price == load_catalogue(WEBSHOP).products[1].price
    assert jasmine.attributes == ("DUMMY_ATTR",) and jasmine.options == ()
    assert (mug.price, mug.option_values()) == (100.0, ["navy", "white"])  # no pricing: WebShop's $100


def test_webshop_goals_follow_get_human_goals_in_webshops_order() -> None:
    tasks = load_webshop(WEBSHOP)
    assert [t.id for t in tasks] == ["webshop-B0TEA00002-0", "webshop-B0TEA00001-0", "webshop-B0MUG00001-0"]
    assert {(t.family, t.dataset, t.tools) for t in tasks} == {("web", "webshop", "shop")}
    tea = tasks[1]
    goal = tea.meta["goal"]
    assert tea.question == "i need caffeine free green tea in mint flavor, 20 count, and price lower than 50.00 dollars"
    assert (goal["attributes"], goal["options"], goal["price_upper"]) == (["caffeine free"], ["mint", "20 count"], 50.0)
    assert tea.meta["catalogue"] == str(WEBSHOP) and tasks == load_webshop(WEBSHOP)


def test_a_webshop_goal_is_scored_by_the_reward_in_its_catalogue() -> None:
    tea = load_webshop(WEBSHOP)[1]
    episode = episode_for(tea)
    episode.act(["R1 = Search(caffeine free green tea mint)", "R2 = Click(b0tea00001)", "R3 = Click(mint)"])
    assert episode.act("R4 = Click(buy now)").done and episode.score() == pytest.approx(3 / 4)  # 20 count not chosen
    episode = episode_for(tea)
    episode.act(["R1 = Search(tea)", "R2 = Click(b0tea00001)", "R3 = Click(mint)", "R4 = Click(20 count)"])
    assert episode.act("R5 = Click(buy now)").done and episode.score() == 1.0


def _webshop_copy(tmp_path: Path, name: str, change) -> Path:
    folder = tmp_path / "webshop"
    shutil.copytree(WEBSHOP, folder)
    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("name", "change", "file", "line", "field", "problem"),
    [
        (
            "items_shuffle_1000.json",
            lambda d: d[4].update(pricing="call"),
            "items_shuffle_1000.json",
            5,
            "pricing",
            "no price",
        ),
        ("items_shuffle_1000.json", lambda d: d[4].pop("name"), "items_shuffle_1000.json", 5, "name", "missing"),
        (
            "items_shuffle_1000.json",
            lambda d: d[4].update(customization_options={"Color": ["Navy"]}),
            "items_shuffle_1000.json",
            5,
            "customization_options.Color",
            "expected a list of",
        ),
        (
            "items_human_ins.json",
            lambda d: d["B0MUG00001"][0].update(instruction_options="navy"),
            "items_human_ins.json",
            3,
            "B0MUG00001[0].instruction_options",
            "expected list, got str",
        ),
        (
            "items_human_ins.json",
            lambda d: d["B0TEA00001"][0].pop("instruction"),
            "items_human_ins.json",
            1,
            "B0TEA00001[0].instruction",
            "missing",
        ),
    ],
)
def test_a_bad_webshop_record_names_file_record_and_field(tmp_path, name, change, file, line, field, problem) -> None:
    folder = _webshop_copy(tmp_path, name, change)
    with pytest.raises(DataError) as info:
        load_webshop(folder)
    assert (Path(info.value.path).name, info.value.line, info.value.field) == (file, line, field)
    assert problem in info.value.problem
    skipped = SkippedRows()
    assert len(load_webshop(folder, skipped)) == 2 and [e.field for e in skipped.errors] == [field]


def test_a_webshop_folder_without_its_files_says_which(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no items_shuffle_1000.json or items_shuffle.json"):
        load_webshop(tmp_path)


# --------------------------------------------------------------------------- Lumos's iterative web rows


def test_lumos_iterative_web_rows_load_as_web_tasks() -> None:
    ricky, cruise = load_lumos_tasks(PLAN_ROWS, GROUND_ROWS)
    assert (ricky.id, ricky.family, ricky.dataset, ricky.tools) == ("web_agent_0", "web", "web_agent", "web")
    assert ricky.subgoals[0] == "Type Ricky Kej to search his songs."
    assert ricky.actions[0] == "R1 = TYPE(Env, QUERY: Type Ricky Kej to search his songs, TEXT: Ricky Kej)"
    assert len(ricky.actions) == len(ricky.subgoals) == 3 and "subgoal_actions" not in ricky.meta
    assert cruise.actions[1].endswith("TEXT: 6 nights)")
    plan = parse_planner_messages(load_lumos_rows(PLAN_ROWS)[0].messages)
    assert list(plan.feedback) == [web_feedback(s) for s in ricky.subgoals]  # Lumos's feedback, as we write it
    assert gold_feedback(ricky) == list(plan.feedback)  # kept from the row (meta["feedback"])
    assert plan.feedback[1] == "We have already click on the option to search for Ricky Kej. Should we stop planning?"


def test_web_tasks_round_trip_through_iterative_rows(tmp_path: Path) -> None:
    rows = [load_lumos_rows(PLAN_ROWS), load_lumos_rows(GROUND_ROWS)]
    tasks = load_lumos_tasks(PLAN_ROWS, GROUND_ROWS)
    again = [task_to_iterative_rows(t) for t in tasks]
    assert [p for p, _ in again] == rows[0] and [g for _, g in again] == rows[1]  # Lumos's spelling exactly
    suite = generate_web_suite("train", 5) + generate_web_suite("heldout", 5)
    pairs = [task_to_iterative_rows(t) for t in suite]
    save_lumos_rows(tmp_path / "plan.jsonl", [p for p, _ in pairs])
    save_lumos_rows(tmp_path / "ground.jsonl", [g for _, g in pairs])
    for task, loaded in zip(suite, load_lumos_tasks(tmp_path / "plan.jsonl", tmp_path / "ground.jsonl")):
        assert (loaded.question, loaded.subgoals, loaded.actions) == (task.question, task.subgoals, task.actions)
        assert (loaded.tools, loaded.action_groups()) == (task.tools, task.action_groups())
        # a shopping task read from rows has no goal to replay, yet trains: the heard feedback came with it
        assert planner_examples(loaded) == planner_examples(task)
    shop_planner = pairs[-1][0].messages
    assert shop_planner[2]["content"].startswith("The executed result for Subgoal 1 is b0")  # what Search found


def test_a_disagreeing_or_broken_iterative_pair_names_the_row(tmp_path: Path) -> None:
    plans = [json.loads(line) for line in PLAN_ROWS.read_text().splitlines()]
    grounds = [json.loads(line) for line in GROUND_ROWS.read_text().splitlines()]
    grounds[1]["messages"][2]["content"] = "Subgoal to be grounded: Subgoal 2: Set 7 nights.\n"
    plans[0]["messages"][3]["content"] = "Subgoal 2: skipped the keep-planning phrase"  # still read, as in Lumos
    plans[0]["messages"][-1]["content"] = "No, I will keep planning. Subgoal 4: more"
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plans))
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in grounds))
    skipped = SkippedRows()
    assert load_lumos_tasks(tmp_path / "p.jsonl", tmp_path / "g.jsonl", skipped) == []
    where = [(Path(e.path).name, e.line, e.field) for e in skipped.errors]
    assert where == [("p.jsonl", 1, "messages"), ("g.jsonl", 2, "messages")]
    assert "last planner turn" in skipped.errors[0].problem and "disagree" in skipped.errors[1].problem


# --------------------------------------------------------------------------- data sources


def test_web_source_kinds_load_for_runs_and_moat_rounds_refuse_them(tmp_path: Path) -> None:
    sources = [
        DataSource(kind="web_suite", split="heldout", n=3),
        DataSource(kind="mind2web", path=MIND2WEB),
        DataSource(kind="webshop", path=WEBSHOP, n=2),
        DataSource(kind="lumos", path=PLAN_ROWS, grounder_path=GROUND_ROWS),
    ]
    tasks = load_sources(sources)
    datasets = ("web-suite-heldout", "mind2web", "webshop", "web_agent")
    assert [len([t for t in tasks if t.dataset == d]) for d in datasets] == [3, 2, 2, 2]
    assert [source_name(s) for s in sources] == ["web-suite-heldout", "mind2web", "webshop", "lumos"]
    tasks, record = load_data(sources[:1], skip_bad_rows=False)
    assert record["tasks"] == 3
    refuse_in_rounds(tasks, "MOAT rounds")  # MOAT runs per turn on web tasks
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  train:\n    - kind: web_suite\n      split: train\n")
    with pytest.raises(ConfigError, match="kind 'web_suite' needs 'split' and 'n'"):
        load_config(config)
