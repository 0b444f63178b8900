"""The bundled QA world and suite: consistent facts, deterministic splits, gold plans that reach the answer."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import pytest

from coalign.formats.answers import squad_exact_match, strategyqa_match
from coalign.formats.lumos import parse_action
from coalign.tasks.maths_suite import SPLITS, STYLE_WEIGHTS, STYLES
from coalign.tasks.qa_suite import HELDIN_TEMPLATES, HELDOUT_TEMPLATES, VAGUE_SUBGOALS, generate_qa_suite
from coalign.tools.executor import execute
from coalign.tools.qa_world import COUNTS, build_world, bundled_world

GOLD_CHECKED = 300  # tasks per split whose gold actions are executed


@cache
def _suite(split: str, n: int = GOLD_CHECKED):
    return generate_qa_suite(split, n)


# --------------------------------------------------------------------------- world


def test_the_world_is_seeded_and_consistent() -> None:
    world = bundled_world()
    assert build_world(0) == world and build_world(1) != world
    assert Counter(e.kind for e in world.entities.values()) == COUNTS
    for entity in world.entities.values():
        facts = entity.facts
        if entity.kind == "organisation":
            assert facts["founded"] >= world.entities[facts["founder"]].facts["born"] + 20
            assert world.entities[facts["headquarters"]].kind == "city"
        if entity.kind == "country":
            capital = world.entities[facts["capital"]]
            assert capital.facts["country"] == entity.name
            cities = [c for c in world.of_kind("city") if c.facts["country"] == entity.name]
            assert facts["population"] > sum(c.facts["population"] for c in cities)


def test_no_made_up_word_names_two_entities() -> None:
    """A name points at one page, so a page lookup and the reader cannot confuse two entities."""
    words = Counter(w for name in bundled_world().entities for w in name.split() if w not in {"Mount"})
    suffixes = {"Guild", "Institute", "Company", "Society", "Academy", "Bank"}
    assert {w: c for w, c in words.items() if c > 1 and w not in suffixes} == {}


def test_every_page_names_its_entity_in_each_fact_sentence() -> None:
    world = bundled_world()
    for name, paragraphs in world.pages.items():
        assert len(paragraphs) >= 2
        for paragraph in paragraphs:
            assert name in paragraph.split(". ")[0], paragraph


# --------------------------------------------------------------------------- suite


def test_same_split_size_and_seed_give_identical_tasks() -> None:
    first, again = generate_qa_suite("train", 200, seed=3), generate_qa_suite("train", 200, seed=3)
    assert [t.to_json() for t in first] == [t.to_json() for t in again]
    assert [t.question for t in generate_qa_suite("train", 200, seed=4)] != [t.question for t in first]


def test_a_longer_list_extends_a_shorter_one() -> None:
    assert generate_qa_suite("heldout", 300) == generate_qa_suite("heldout", 100) + _suite("heldout")[100:]


def test_train_and_heldin_share_no_question_and_heldout_uses_its_own_templates() -> None:
    train = {t.question for t in generate_qa_suite("train", 2000)}
    heldin = {t.question for t in _suite("heldin")}
    assert len(train) == 2000 and len(heldin) == GOLD_CHECKED and not train & heldin
    assert not set(HELDIN_TEMPLATES) & set(HELDOUT_TEMPLATES)
    for split in SPLITS:
        templates = HELDOUT_TEMPLATES if split == "heldout" else HELDIN_TEMPLATES
        assert {t.meta["template"] for t in _suite(split)} == set(templates)


def test_ids_datasets_family_and_answers_follow_the_split() -> None:
    for split in SPLITS:
        tasks = _suite(split)
        assert [t.id for t in tasks] == [f"qa-{split}-{i:05d}" for i in range(len(tasks))]
        assert {t.family for t in tasks} == {"qa"}
        assert {t.dataset for t in tasks} == {"qa-suite-heldout" if split == "heldout" else "qa-suite-heldin"}
        if split == "heldout":
            assert {t.meta["answer_kind"] for t in tasks} == {"name", "number", "year"}
            assert all(t.answer not in ("yes", "no") for t in tasks)
        else:
            answers = Counter(t.answer for t in tasks)
            assert set(answers) == {"yes", "no"} and abs(answers["yes"] - answers["no"]) < 0.15 * len(tasks)


def test_gold_actions_reach_the_gold_answer_on_every_task() -> None:
    """The Must-show check: executed in the bundled QA environment, every gold plan gets its answer,
    scored by the split's reference metric (Lumos's yes/no rule held-in, SQuAD exact match held-out)."""
    for split in SPLITS:
        tasks = _suite(split)
        for task in tasks:
            trace = execute(task.actions, domain="qa")
            assert trace.error is None, (task.id, trace.error)
            if split == "heldout":
                assert squad_exact_match(trace.answer, task.answer), (task.id, trace.answer, task.answer)
            else:
                assert strategyqa_match(trace.answer, task.answer == "yes"), (task.id, trace.answer, task.answer)
        assert len(tasks) == GOLD_CHECKED


def test_answers_mean_what_the_questions_ask() -> None:
    """Checked against the world's facts, not through the tools: the comparison a yes/no question words
    is the one its Calculator step makes, and an "A or B?" answer is the entity the world says wins."""
    larger_words = {"taller", "larger", "more", "after", "younger"}
    for split in ("train", "heldin"):
        for task in _suite(split):
            words = set(re.findall(r"\b[a-z]+\b", task.question))  # names are capitalised
            op = re.search(r"Calculator\(R\d+ ([<>]) R\d+\)", task.actions[-1])[1]
            assert op == (">" if words & larger_words else "<"), (task.question, task.actions[-1])
    world = bundled_world()
    measures = {"founded": "founded", "born": "born", "climbed": "climbed", "tall": "height", "shorter": "height"}
    measures |= {"population": "population", "employees": "employees"}
    for task in _suite("heldout"):
        if task.meta["template"] != "heldout_choice":
            continue
        ask, a, b = re.fullmatch(r"(.+), (?:the )?(.+) or (?:the )?(.+)\?", task.question).groups()
        attribute = next(v for k, v in measures.items() if k in ask)
        values = {name: world.entities[name].facts[attribute] for name in (a, b)}
        larger = bool(set(ask.lower().split()) & {"later", "taller", "larger", "more"})
        assert task.answer == (max if larger else min)(values, key=values.get), (task.question, values)


def _tools(task) -> list[str]:
    return [parse_action(a).tool for a in task.actions]


def test_facts_are_fetched_the_lumos_way_and_end_in_the_template_step() -> None:
    for split in SPLITS:
        for task in _suite(split):
            tools = _tools(task)
            final = split != "heldout" or task.meta["template"] == "heldout_choice"
            lookups = tools[: len(tools) - final]
            assert lookups == ["KnowledgeQuery", "ParagraphRetrieve", "QA"] * (len(lookups) // 3)
            assert task.meta["facts"] == len(lookups) // 3 == len(task.subgoals) - final
            if split != "heldout":
                assert re.fullmatch(r"R\d+ = Calculator\(R\d+ [<>] R\d+\)", task.actions[-1])
            elif final:
                assert task.actions[-1].startswith("R7 = QA([R2, R5], Question: ")


def test_a_bridge_looks_up_the_answer_of_the_hop_before() -> None:
    bridged = [t for t in _suite("heldout") if t.meta["template"] == "heldout_bridge"]
    assert bridged
    for task in bridged:
        assert task.actions[3] == "R4 = KnowledgeQuery(R3)"
        assert "R3" in task.actions[4] and "R3" in task.actions[5]
    held_in = [t for t in _suite("train") if t.meta["template"].startswith("bridge_")]
    assert held_in and all("R4 = KnowledgeQuery(R3)" in t.actions for t in held_in)


def test_subgoal_styles_explicit_names_entity_and_question_descriptive_only_words() -> None:
    seen = Counter()
    for split in SPLITS:
        for task in _suite(split):
            (style,) = set(task.subgoal_styles)
            seen[style] += 1
            assert len(task.subgoal_styles) == len(task.subgoals)
            entities = [parse_action(a).argument for a in task.actions if a.split(" = ")[1].startswith("Know")]
            for subgoal in task.subgoals:
                if style == "vague":
                    assert subgoal in VAGUE_SUBGOALS
                elif style == "descriptive":
                    assert not re.search(r"\bR\d+\b", subgoal), subgoal
            if style == "explicit":
                for entity, subgoal in zip(entities, task.subgoals):
                    assert entity in subgoal and subgoal.endswith("?"), (entity, subgoal)
    assert set(seen) == set(STYLES)
    total = sum(seen.values())
    for style, weight in STYLE_WEIGHTS.items():
        assert abs(seen[style] / total - weight) < 0.05, seen


def test_heldout_questions_use_only_words_of_the_train_text() -> None:
    """Held-out asks in new shapes, not new words (names aside), as the maths suite's held-out does."""
    names = {w.lower() for name in bundled_world().entities for w in name.split()}

    def words(text: str) -> set[str]:
        return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in names and not re.fullmatch(r"r\d+", w)}

    known = set()
    for task in generate_qa_suite("train", 2000):
        known |= words(" ".join([task.question, *task.subgoals]))
    unseen = Counter()
    for task in _suite("heldout"):
        unseen.update(words(" ".join([task.question, *task.subgoals])) - known)
    assert not unseen, unseen.most_common(20)


def test_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown split 'test'"):
        generate_qa_suite("test", 1)
