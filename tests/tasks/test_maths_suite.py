"""The bundled suite: deterministic, split-clean, well-formed, and hard to solve without a plan."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from functools import cache

import pytest

from coalign.formats.answers import numeric_match
from coalign.formats.lumos import parse_action
from coalign.pretraining.leakage import SKELETON_N, VERBATIM_N, corpus_index, probe_overlap
from coalign.pretraining.words import FIRST_NAMES
from coalign.tasks.maths_suite import (
    _KINDS,
    BLANK_SUBGOAL,
    COMPOSED,
    HELDIN_SURFACE,
    HELDIN_TEMPLATES,
    HELDOUT_TEMPLATES,
    MATHS_SPLITS,
    NAMES,
    NEAR,
    NEAR_SURFACE,
    NEAR_TEMPLATES,
    SPLITS,
    STYLE_WEIGHTS,
    STYLES,
    VAGUE_SUBGOALS,
    _compose_once,
    _tasks,
    _Teller,
    blank_subgoals,
    generate_near,
    generate_suite,
    heldout_structures,
    structure_keys,
)
from coalign.tools.executor import execute

_OPERATION = re.compile(r"^(?P<left>R\d+|\d+) (?P<op>[-+*/]) (?P<right>R\d+|\d+)$")


@cache
def _suite(split: str, n: int = 500):
    return generate_suite(split, n)


def _operations(task):
    """(op, left, right) per action; asserts each is one binary Calculator call."""
    out = []
    for i, text in enumerate(task.actions, start=1):
        action = parse_action(text)
        assert action.outputs == (f"R{i}",) and action.tool == "Calculator", text
        match = _OPERATION.match(action.argument)
        assert match, text
        out.append((match["op"], match["left"], match["right"]))
    return out


def test_same_split_size_and_seed_give_identical_tasks():
    first, again = generate_suite("train", 200, seed=3), generate_suite("train", 200, seed=3)
    assert [t.to_json() for t in first] == [t.to_json() for t in again]
    assert [t.question for t in generate_suite("train", 200, seed=4)] != [t.question for t in first]


def test_a_longer_list_extends_a_shorter_one():
    assert generate_suite("heldout", 300) == generate_suite("heldout", 100) + generate_suite("heldout", 300)[100:]


def test_train_and_heldin_share_no_question():
    train = {t.question for t in generate_suite("train", 3000)}
    composed = {t.question for t in generate_suite(COMPOSED, 1500)}
    heldin = {t.question for t in _suite("heldin")}
    assert len(train) == 3000 and len(composed) == 1500 and len(heldin) == 500
    assert not (train | composed) & heldin


def test_heldout_uses_only_templates_never_seen_held_in():
    assert not set(HELDIN_TEMPLATES) & set(HELDOUT_TEMPLATES)
    held_in = {t.meta["template"] for split in ("train", "heldin") for t in _suite(split)}
    held_out = {t.meta["template"] for t in _suite("heldout")}
    assert held_in == set(HELDIN_TEMPLATES) and held_out == set(HELDOUT_TEMPLATES)
    assert all(name.startswith("heldout_") for name in HELDOUT_TEMPLATES) and 4 <= len(HELDOUT_TEMPLATES) <= 6


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if not w.isdigit() and not re.fullmatch(r"r\d+", w)}


def test_heldout_questions_and_subgoals_use_only_words_of_the_train_text():
    """Models are trained from scratch on train: held-out must test structure, not unseen words."""
    known = set()
    for task in generate_suite("train", 3000):
        known |= _words(" ".join([task.question, *task.subgoals]))
    unseen = Counter()
    for task in _suite("heldout"):
        unseen.update(_words(" ".join([task.question, *task.subgoals])) - known)
    assert not unseen, unseen.most_common(20)


_NAME = re.compile(r"\b(?:" + "|".join(NAMES) + r")\b")
_ITEM = re.compile(r"\b(?:" + "|".join(i for k in _KINDS.values() for i in k.items) + r")\b")
_WHEN = re.compile(r"\b(?:on \w+day|in the morning|at noon|in the afternoon|in the evening|in \w+)\b")


def _structure(task) -> tuple:
    """What a template fixes: each step's operation and where its operands come from (a number in the text,
    or which earlier result), with the question sentence's wording once names, items, times and numbers go."""
    flow = tuple(
        (op, *(o if o.startswith("R") else "n" for o in (left, right))) for op, left, right in _operations(task)
    )
    asked = re.split(r"(?<=[.?!]) ", task.question)[-1]
    for pattern, slot in ((_NAME, "P"), (_ITEM, "X"), (_WHEN, "T"), (re.compile(r"\b\d+\b"), "N")):
        asked = pattern.sub(slot, asked)
    return flow, asked


def test_no_heldout_task_repeats_a_held_in_structure():
    held_in = {_structure(t) for t in [*generate_suite("train", 3000), *_suite("heldin")]}
    clashes = Counter(t.meta["template"] for t in _suite("heldout") if _structure(t) in held_in)
    assert not clashes, clashes
    # the check can fail: a held-in task, relabelled, is caught
    assert _structure(_suite("heldin")[0]) in held_in


def test_composed_stories_share_no_structure_with_heldout_tasks():
    """Checked with this file's own notion of structure (flow and question), not the generator's."""
    held_out = {_structure(t): t.meta["template"] for t in generate_suite("heldout", 2000)}
    clashes = Counter(held_out[_structure(t)] for t in generate_suite(COMPOSED, 3000) if _structure(t) in held_out)
    assert not clashes, clashes


def test_composed_stories_are_new_combinations_of_held_in_events():
    held_in = {_structure(t) for t in generate_suite("train", 3000)}
    composed = generate_suite(COMPOSED, 1500)
    assert {t.meta["template"] for t in composed} == {"composed"}
    assert _share(composed, lambda t: _structure(t) not in held_in) > 0.5
    assert Counter(t.meta["steps"] for t in composed).keys() == {2, 3, 4}
    known = set()
    for task in generate_suite("train", 3000):
        known |= _words(" ".join([task.question, *task.subgoals]))
    unseen = Counter(w for t in composed for w in _words(" ".join([t.question, *t.subgoals])) - known)
    assert not unseen, unseen.most_common(10)


def test_heldout_structures_hold_every_structure_a_heldout_template_builds():
    rng = random.Random("another sample")
    for name, template in HELDOUT_TEMPLATES.items():
        for _ in range(1000):
            draft = template(rng)
            assert set(structure_keys(draft.steps, draft.question)) <= heldout_structures(), name


def test_unfiltered_compositions_would_include_heldout_structures():
    """The filter bites: drawn without it, some composed drafts compute exactly what give_split does."""
    rng = random.Random(0)
    drafts = [_compose_once(rng) for _ in range(3000)]
    rejected = [d for d in drafts if set(structure_keys(d.steps, d.question)) & heldout_structures()]
    assert 0 < len(rejected) < 0.1 * len(drafts)
    give_split = HELDOUT_TEMPLATES["heldout_give_split"]
    splits = {structure_keys(d.steps, d.question)[0] for d in (give_split(rng) for _ in range(500))}
    assert any(structure_keys(d.steps, d.question)[0] in splits for d in rejected)


def test_structure_keys_ignore_names_items_and_numbers_but_not_quantities():
    draft = HELDOUT_TEMPLATES["heldout_give_split"](random.Random(1))
    fresh = [n for n in NAMES if n not in draft.people][:2]
    item = next(i for k in _KINDS.values() for i in k.items if i != draft.item)

    def reworded(text: str) -> str:
        for old, new in zip(draft.people, fresh):
            text = re.sub(rf"\b{old}\b", new, text)
        return re.sub(rf"\b{draft.item}\b", item, re.sub(r"\d+", "7", text))

    keys = structure_keys(draft.steps, draft.question)
    assert structure_keys([replace(s, what=reworded(s.what)) for s in draft.steps], reworded(draft.question)) == keys
    changed = [replace(draft.steps[0], what="how many boxes were left"), *draft.steps[1:]]
    assert structure_keys(changed, draft.question)[0] != keys[0]
    assert structure_keys(draft.steps, "How many boxes were left?")[1] != keys[1]


def test_ids_datasets_and_family_follow_the_split():
    for split in MATHS_SPLITS:
        tasks = _suite(split)
        assert [t.id for t in tasks] == [f"suite-{split}-{i:05d}" for i in range(len(tasks))]
        assert {t.dataset for t in tasks} == {f"suite-{split}" if split in ("heldout", NEAR) else "suite-heldin"}
        assert {t.family for t in tasks} == {"maths"}


def test_every_task_has_two_to_four_steps_each_with_a_subgoal_in_one_style():
    for split in MATHS_SPLITS:
        for task in _suite(split):
            assert 2 <= len(task.actions) <= 4 and task.meta["steps"] == len(task.actions)
            assert len(task.subgoals) == len(task.actions) == len(task.subgoal_styles)
            assert len(set(task.subgoal_styles)) == 1 and task.subgoal_styles[0] in STYLES


def test_style_shares_are_near_the_module_constants():
    for split in SPLITS:
        counts = Counter(t.subgoal_styles[0] for t in generate_suite(split, 2000))
        for style, weight in STYLE_WEIGHTS.items():
            assert abs(counts[style] / 2000 - weight) < 0.04, (split, style, counts)


def test_actions_apply_one_operation_to_question_numbers_or_earlier_results():
    for split in MATHS_SPLITS:
        for task in _suite(split):
            numbers = set(re.findall(r"\b\d+\b", task.question))
            for i, (_, left, right) in enumerate(_operations(task), start=1):
                for operand in (left, right):
                    if operand.startswith("R"):
                        assert int(operand[1:]) < i, task.actions
                    else:
                        assert operand in numbers, (operand, task.question)


def test_executing_the_gold_actions_gives_the_gold_answer_on_every_task():
    for split in MATHS_SPLITS:
        for task in _suite(split):
            trace = execute(task.actions, domain="maths")
            assert numeric_match(trace.answer, task.answer), (task.id, task.actions, trace.answer, task.answer)


def test_answers_are_positive_integers_below_ten_thousand():
    for split in MATHS_SPLITS:
        for task in _suite(split):
            assert task.answer.isdigit() and 0 < int(task.answer) < 10_000, task.answer


def test_explicit_subgoals_name_every_operand_while_descriptive_ones_name_no_number():
    seen = Counter()
    for split in MATHS_SPLITS:
        for task in _suite(split):
            style = task.subgoal_styles[0]
            seen[style] += 1
            for subgoal, (_, left, right) in zip(task.subgoals, _operations(task)):
                words = set(re.findall(r"\w+", subgoal))
                if style == "explicit":
                    assert {left, right} <= words, (subgoal, left, right)
                elif style == "descriptive":
                    assert not re.search(r"\d", subgoal), subgoal
                else:
                    assert subgoal in VAGUE_SUBGOALS
    assert set(seen) == set(STYLES)


def test_blank_subgoals_keep_the_count_and_drop_the_content():
    task = next(t for t in _suite("train") if t.meta["steps"] == 3)
    assert blank_subgoals(task) == (BLANK_SUBGOAL,) * 3
    assert BLANK_SUBGOAL in VAGUE_SUBGOALS


def _share(tasks, predicate) -> float:
    return sum(map(predicate, tasks)) / len(tasks)


def test_the_decomposition_cannot_be_read_off_the_text():
    """A grounder that copies numbers in text order, or ignores which facts matter, should fail often."""
    for split in MATHS_SPLITS:
        tasks = _suite(split)
        assert _share(tasks, lambda t: t.meta["distractors"] > 0) > 0.4
        assert _share(tasks, lambda t: t.meta["out_of_order"]) > 0.3

        def copies_in_text_order(task) -> bool:
            literals = [o for _, left, right in _operations(task) for o in (left, right) if not o.startswith("R")]
            return literals == re.findall(r"\b\d+\b", task.question)

        assert _share(tasks, copies_in_text_order) < 0.25

        def mixes_operations(task) -> bool:
            ops = {op for op, _, _ in _operations(task)}
            return bool(ops & {"*", "/"}) and bool(ops & {"+", "-"})

        assert _share(tasks, mixes_operations) > 0.6


# --------------------------------------------------------------------------- the near held-out set


def test_near_is_the_same_for_the_same_size_and_seed_and_a_longer_list_extends_a_shorter_one():
    first = generate_suite(NEAR, 200, seed=3)
    assert [t.to_json() for t in first] == [t.to_json() for t in generate_suite(NEAR, 200, seed=3)]
    assert [t.question for t in generate_suite(NEAR, 200, seed=4)] != [t.question for t in first]
    assert generate_suite(NEAR, 300) == generate_suite(NEAR, 100) + generate_suite(NEAR, 300)[100:]
    assert first == generate_near(200, seed=3)


def _surface_words(surface) -> set[str]:
    """The words a surface tells stories with: names, items, verbs (past and gerund), and priced things."""
    words = {name.lower() for name in surface.names} | set(surface.things)
    for kind in surface.kinds.values():
        words |= set(kind.items) | set(kind.get[1:]) | {clause.split()[0] for clause, _ in kind.lose[1:]}
    return words


@cache
def _words_of_the_other_splits() -> set[str]:
    tasks = [*generate_suite("train", 3000), *generate_suite(COMPOSED, 1500), *_suite("heldin"), *_suite("heldout")]
    return set().union(*(_words(" ".join([t.question, *t.subgoals])) for t in tasks))


def test_near_tells_held_in_templates_in_words_no_other_split_uses():
    near = _suite(NEAR)
    assert {t.meta["template"] for t in near} == set(NEAR_TEMPLATES) < set(HELDIN_TEMPLATES)
    assert set(NEAR_SURFACE.names) <= set(FIRST_NAMES)  # names a pretrained base has read
    assert not _surface_words(NEAR_SURFACE) & _words_of_the_other_splits()
    assert _surface_words(HELDIN_SURFACE) <= _words_of_the_other_splits()  # the check can fail
    for task in near:  # every story names its people, and each is new; no held-in item is left in
        assert not _NAME.search(task.question) and not _ITEM.search(task.question), task.question
        assert _words(task.question) & _surface_words(NEAR_SURFACE), task.question


def _numbers(tasks) -> list[int]:
    return [int(n) for t in tasks for n in re.findall(r"\b\d+\b", t.question)]


def test_near_numbers_lie_above_every_held_in_range_and_the_knob_takes_them_back():
    assert NEAR_SURFACE.numbers(2, 6) == (7, 12) and HELDIN_SURFACE.numbers(2, 6) == (2, 6)
    assert replace(NEAR_SURFACE, number_scale=1.05).numbers(2, 6) == (7, 7)  # never an empty range
    top = max(_numbers(generate_suite("train", 3000)))
    near = _numbers(_suite(NEAR))
    assert sum(n > top for n in near) > 0.2 * len(near)
    assert max(_numbers(generate_near(500, surface=replace(NEAR_SURFACE, number_scale=1.0)))) <= top


def test_near_has_more_distractors_and_ones_of_its_own():
    def distracted(task) -> bool:
        return task.meta["distractors"] > 0

    assert _share(_suite(NEAR), distracted) > _share(_suite("heldin"), distracted) + 0.2
    own = [text.split("{n}")[1] for _, text in NEAR_SURFACE.distractors]  # " miles from the market." ...
    assert all(any(words in t.question for t in _suite(NEAR)) for words in own)
    assert not any(words in t.question for t in generate_suite("train", 3000) for words in own)


def test_near_shares_no_question_text_with_training_but_its_structures():
    """The leak check: no 13-word run (the contamination check's verbatim view) of a near question is in a
    training question (train and composed); their skeletons (names and numbers as slots) are, by design."""
    training = [t.question for t in [*generate_suite("train", 3000), *generate_suite(COMPOSED, 1500)]]
    verbatim, skeletons = corpus_index(training, VERBATIM_N, False), corpus_index(training, SKELETON_N, True)
    near = [t.question for t in _suite(NEAR)]
    assert probe_overlap(verbatim, near)["leaked"] == 0
    assert probe_overlap(skeletons, near)["share"] > 0.5
    assert probe_overlap(verbatim, [t.question for t in _suite("heldin")])["share"] > 0.2  # the check can fail
    # class_teams is left out of the near set: with one name and no item to tell anew, it would leak
    teams = _tasks(NEAR, 300, _Teller("class_teams", NEAR_SURFACE), {"class_teams": HELDIN_TEMPLATES["class_teams"]})
    assert probe_overlap(verbatim, [t.question for t in teams])["leaked"] > 0


def test_near_is_a_held_out_set_of_the_maths_suite_beside_the_far_one_in_tiny_and_smol_suite():
    from pydantic import ValidationError

    from coalign.config import load_config
    from coalign.config.data import DataSettings, DataSource

    for name in ("tiny", "smol-suite"):
        heldout = load_config(name).data.heldout
        assert [(s.kind, s.split) for s in heldout] == [("suite", "heldout"), ("suite", NEAR)]
        assert heldout[0].n == heldout[1].n
    with pytest.raises(ValidationError, match="maths suite's only"):
        DataSource(kind="qa_suite", split=NEAR, n=3)
    near, train = {"kind": "suite", "split": NEAR, "n": 3}, {"kind": "suite", "split": "train", "n": 3}
    with pytest.raises(ValidationError, match="under data.heldout, not data.train"):
        DataSettings(train=[train, near])
    with pytest.raises(ValidationError, match="under data.heldout, not data.heldin"):
        DataSettings(train=[train], heldin=[near])
    assert DataSettings(train=[train], heldout=[near]).heldout[0].split == NEAR


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="unknown split"):
        generate_suite("test", 3)
