"""The generated half of the pretraining corpus: one function per kind of document.

Each takes a seeded `random.Random` and returns one document. Between them they teach what pretraining
gives a real base model and the bundled suites assume: reading numbers and names, copying them to where
they are needed, arithmetic language, turning instructions into calls, looking facts up, numbered plans,
and chat turns. Their wordings are their own, not the suites' templates.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from coalign.formats.lumos import ASSISTANT_TAG, EOS, USER_TAG, format_subgoals, grounder_prompt, planner_prompt
from coalign.pretraining.programs import OPS, Step, call, instruction, program, run, spelling
from coalign.pretraining.words import PLACES, UNITS, invented, name, names, number, thing

# --------------------------------------------------------------------------- arithmetic

# How a story tells each operation on its count ({w} and {o} people, {x} the things, {p} a place, {u} a unit).
MOVES = {
    "+": ("{o} brings {n} more {x}.", "{w} finds another {n}.", "{n} {x} arrive from the {p}."),
    "-": ("{w} gives {n} {x} to {o}.", "{n} of the {x} break.", "{o} takes {n} away."),
    "*": (
        "The pile grows to {n} times its size.",
        "{w} ends up with {n} times as many.",
        "Each one is swapped for {n} new ones.",
    ),
    "/": (
        "{w} shares them equally among {n} {u} and keeps one share.",
        "The {x} are split into {n} equal groups; {w} keeps one.",
    ),
}


def story(rng: random.Random) -> str:
    """An arithmetic story whose count changes step by step, and its worked solution with calculator
    annotations (GSM8K's `<<a*b=c>>`). Every intermediate count is a whole, non-negative number."""
    who, other = names(rng, 2)
    item = thing(rng) + "s"
    fill = {"w": who, "o": other, "x": item, "p": rng.choice(PLACES), "u": rng.choice(UNITS)}
    opening = rng.choice(
        (
            "{w} has {n} {x}.",
            "There are {n} {x} in the {p}.",
            "{w} counted {n} {x} at the {p}.",
            "The {p} keeps {n} {x}.",
            "A box holds {n} {x} that belong to {w}.",
        )
    )
    value = number(rng)
    lines, solution = [opening.format(n=value, **fill)], []
    for _ in range(rng.randint(1, 4)):
        divisors = [d for d in range(2, 13) if value % d == 0]
        op = rng.choice(
            [o for o in OPS if (o != "-" or value > 1) and (o != "/" or divisors) and (o != "*" or value < 5000)]
        )
        n = (
            rng.randint(1, value - 1)
            if op == "-"
            else rng.choice(divisors)
            if op == "/"
            else rng.randint(2, 6)
            if op == "*"
            else number(rng)
        )
        new = run([Step(op, value, n)])[0]
        lines.append(rng.choice(MOVES[op]).format(n=n, **fill))
        solution.append(f"{value} {op} {n} = <<{value}{op}{n}={new}>>{new}")
        value = new
    lines.append(
        rng.choice(
            (
                "How many {x} are there at the end?",
                "What is the final number of {x}?",
                "How many {x} does {w} have now?",
            )
        ).format(**fill)
    )
    return " ".join(lines) + "\n" + "\n".join(solution) + f"\nThe answer is {value}.\n"


def program_text(rng: random.Random) -> str:
    """Numbered instructions, then the same steps as calls in one syntax, then the values."""
    steps, how = program(rng, rng.randint(1, 5)), spelling(rng)
    head = rng.choice(("Instructions:", "Do the following:", "Steps:", "Task:"))
    body = [f"{i}. {instruction(rng, s, how)}" for i, s in enumerate(steps, 1)]
    calls = [call(s, i, how) for i, s in enumerate(steps, 1)]
    if rng.random() < 0.5:  # interleaved: each instruction followed by its call
        text = "\n".join(f"{b}\n   {c}" for b, c in zip(body, calls))
        return f"{head}\n{text}\n"
    code = rng.choice(("Code:", "Calls:", "Program:", "As calls:"))
    values = ", ".join(str(v) for v in run(steps))
    return f"{head}\n" + "\n".join(body) + f"\n{code}\n" + "\n".join(calls) + f"\nValues: {values}\n"


# --------------------------------------------------------------------------- copying and look-up


def copy_drill(rng: random.Random) -> str:
    """A random sequence and its copy; the second half is predictable only by copying the first."""
    pieces = [
        rng.choice((str(number(rng)), invented(rng), thing(rng), name(rng), rng.choice("+-*/=(),:")))
        for _ in range(rng.randint(3, 12))
    ]
    seq = " ".join(pieces)
    frame = rng.choice(
        (
            "Copy: {s}\nCopy: {s}\n",
            "Repeat after me: {s}\n{s}\n",
            "Input: {s}\nOutput: {s}\n",
            'echo "{s}"\n{s}\n',
            "Say it back. {s} -> {s}\n",
        )
    )
    return frame.format(s=seq)


def lookup_drill(rng: random.Random) -> str:
    """A small table of facts, then questions answered from it."""
    kind = rng.choice(("population", "height", "founding year", "price", "score", "age"))
    keys = [invented(rng) for _ in range(rng.randint(3, 8))]
    values = {k: number(rng) if kind != "founding year" else rng.randint(1200, 2020) for k in keys}
    style = rng.choice(("colon", "sentence", "json"))
    if style == "colon":
        table = "\n".join(f"{k}: {v}" for k, v in values.items())
    elif style == "sentence":
        table = " ".join(f"The {kind} of {k} is {v}." for k, v in values.items())
    else:
        table = json.dumps(values)
    asked = rng.sample(keys, k=min(len(keys), rng.randint(1, 3)))
    qa = "\n".join(f"Q: What is the {kind} of {k}?\nA: {values[k]}" for k in asked)
    return f"Facts ({kind}):\n{table}\n{qa}\n"


def relation_chain(rng: random.Random) -> str:
    """Facts that chain (who founded what, where they were born) and a two-hop question over them."""
    person, place, org = invented(rng), invented(rng), invented(rng) + rng.choice((" Guild", " Institute", " Works"))
    year = rng.randint(1500, 2000)
    facts = [f"{org} was founded by {person}.", f"{person} was born in {place}.", f"{person} was born in {year}."]
    rng.shuffle(facts)
    question, answer = rng.choice(
        (
            (f"Where was the founder of {org} born?", place),
            (f"In which year was the founder of {org} born?", str(year)),
            (f"Who founded {org}?", person),
        )
    )
    steps = f"First find who founded {org}: {person}." + (
        "" if answer == person else f" Then look that person up: {answer}."
    )
    return " ".join(facts) + f"\nQuestion: {question}\n{steps}\nAnswer: {answer}\n"


# --------------------------------------------------------------------------- plans and pages


def step_list(rng: random.Random) -> str:
    """A numbered plan for an errand whose steps name the things they act on."""
    who, place, item = name(rng), rng.choice(PLACES), thing(rng)
    steps = rng.sample(
        [
            f"go to the {place}",
            f"find the {item}",
            f"ask {name(rng)} for the key",
            f"count the {item}s",
            f"write down the number {number(rng)}",
            f"open the door marked {invented(rng)}",
            f"take the {item} to {name(rng)}",
            f"check the list for {invented(rng)}",
            f"pay {number(rng)} coins",
        ],
        k=rng.randint(2, 5),
    )
    mark = rng.choice(("{i}. ", "Step {i}: ", "({i}) ", "- "))
    lines = [mark.format(i=i) + s.capitalize() for i, s in enumerate(steps, 1)]
    return f"Plan for {who}:\n" + "\n".join(lines) + "\n"


def page_actions(rng: random.Random) -> str:
    """A small page as a list of elements and a goal, then the clicks and typing that reach it."""
    field, value, button, link = invented(rng), invented(rng), invented(rng), invented(rng)
    elements = [
        f"[{rng.randint(100, 9999)}] textbox {field}",
        f"[{rng.randint(100, 9999)}] button {button}",
        f"[{rng.randint(100, 9999)}] link {link}",
    ]
    rng.shuffle(elements)
    verbs = rng.choice((("type", "click"), ("TYPE", "CLICK"), ("fill", "press")))
    actions = [f'{verbs[0]}("{field}", "{value}")', f'{verbs[1]}("{button}")']
    if rng.random() < 0.5:
        actions.append(f'{verbs[1]}("{link}")')
    return (
        "Page:\n"
        + "\n".join(elements)
        + f"\nGoal: enter {value} in {field} and press {button}\nActions:\n"
        + "\n".join(actions)
        + "\n"
    )


# --------------------------------------------------------------------------- chat


CHAT_FORMATS = (
    ("User: {u}\nAssistant: {a}\n"),
    ("Q: {u}\nA: {a}\n"),
    ("### Instruction:\n{u}\n### Response:\n{a}\n"),
    (USER_TAG + "{u}\n" + ASSISTANT_TAG + "{a}" + EOS + "\n"),
    ("<human>{u}</human>\n<bot>{a}</bot>\n"),
)


def dialogue(rng: random.Random) -> str:
    """A request and its answer in one of several chat formats."""
    steps, how = program(rng, rng.randint(1, 3)), spelling(rng)
    kind = rng.choice(("calls", "copy", "value"))
    if kind == "calls":
        asks = "; ".join(instruction(rng, s, how) for s in steps)
        user, answer = f"Write these as calls: {asks}", "; ".join(call(s, i, how) for i, s in enumerate(steps, 1))
    elif kind == "copy":
        phrase = " ".join(invented(rng) if rng.random() < 0.5 else str(number(rng)) for _ in range(rng.randint(2, 6)))
        user, answer = f"Please repeat exactly: {phrase}", phrase
    else:  # a one-step program's operands are numbers
        first = program(rng, 1)[0]
        user, answer = instruction(rng, first, how), str(run([first])[0])
    return rng.choice(CHAT_FORMATS).format(u=user, a=answer)


def lumos_turns(rng: random.Random) -> str:
    """Lumos's planner and grounder turns over a generated program: the paper's format, not its tasks.

    Subgoals are this corpus's own instructions (referring to results as R1, R2, ...); the grounder's
    answer is the Calculator calls. The suites' questions and subgoal wordings never appear."""
    steps = program(rng, rng.randint(1, 4))
    how = spelling(rng)
    how = type(how)("R{i}", "R{i}", "assign_tool", "Calculator", how.fn_index)
    task = program_question(rng, steps)
    subgoals = format_subgoals([instruction(rng, s, how) for s in steps])
    actions = "; ".join(call(s, i, how) for i, s in enumerate(steps, 1))
    if rng.random() < 0.5:
        return f"{USER_TAG}{planner_prompt(task)}\n{ASSISTANT_TAG}{subgoals}{EOS}\n"
    return f"{USER_TAG}{grounder_prompt(task, subgoals)}\n{ASSISTANT_TAG}{actions}{EOS}\n"


def program_question(rng: random.Random, steps: list[Step]) -> str:
    """A terse question that states a program's numbers in order."""
    numbers = [x for s in steps for x in (s.left, s.right) if isinstance(x, int)]
    head = rng.choice(("Work out", "Evaluate", "Compute", "Find"))
    return f"{head} the value from the numbers " + ", ".join(map(str, numbers)) + f" ({invented(rng)} puzzle)."


KINDS: dict[str, Callable[[random.Random], str]] = {
    "story": story,
    "program": program_text,
    "copy": copy_drill,
    "lookup": lookup_drill,
    "relations": relation_chain,
    "plan": step_list,
    "page": page_actions,
    "dialogue": dialogue,
    "lumos": lumos_turns,
}
