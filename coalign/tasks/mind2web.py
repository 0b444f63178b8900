"""Mind2Web as published (a JSON list of tasks per file, in folders such as `train/` and `test_task/`).

Each task has `annotation_id`, `website`, `confirmed_task`, `action_reprs` and `actions`; each action
has `operation` {op, original_op, value}, the candidate elements `pos_candidates` and
`neg_candidates` ({tag, backend_node_id, attributes: a JSON string, ...}) and `cleaned_html`, the
page before the action. A step's page is its candidates in document order, each with the text
its node holds in `cleaned_html` (the first 100 words, as Lumos's candidate formatter keeps) and
its naming attributes; the positives are the `pos_candidates`. No decomposition ships with
Mind2Web, so tasks have no gold subgoals or actions: they serve evaluation (step success rate),
and `meta["action_reprs"]` keeps what Lumos turns into the planner's history of earlier steps.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_rows, read_json, require, require_text, type_name
from coalign.envs.web import NAMING_ATTRIBUTES, OPERATIONS, Element, GoldStep
from coalign.tasks import Task

KEPT_ATTRIBUTES = (*NAMING_ATTRIBUTES, "type", "role")
MAX_TEXT_WORDS = 100
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class _NodeText(HTMLParser):
    """Text under each element that has a `backend_node_id`, and the order the elements open in."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None]] = []
        self.text: dict[str, list[str]] = {}
        self.order: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = dict(attrs).get("backend_node_id")
        if node is not None:
            self.order.setdefault(node, len(self.order))
            self.text.setdefault(node, [])
        if tag not in _VOID:
            self.stack.append((tag, node))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = dict(attrs).get("backend_node_id")
        if node is not None:
            self.order.setdefault(node, len(self.order))
            self.text.setdefault(node, [])

    def handle_endtag(self, tag: str) -> None:
        if any(open_tag == tag for open_tag, _ in self.stack):
            while self.stack and self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        for _, node in self.stack:
            if node is not None:
                self.text[node].append(data)


def node_texts(html: str) -> tuple[dict[str, str], dict[str, int]]:
    """(backend_node_id -> its text, squeezed and cut to MAX_TEXT_WORDS words; -> document position)."""
    parser = _NodeText()
    parser.feed(html)
    parser.close()
    texts = {node: " ".join(" ".join(parts).split()[:MAX_TEXT_WORDS]) for node, parts in parser.text.items()}
    return texts, parser.order


def load_mind2web(path: str | Path, skipped: SkippedRows | None = None) -> list[Task]:
    """Tasks of one Mind2Web JSON file, or of every `*.json` file in a folder (in name order).

    Errors name the file, the 1-based task index as the line, and the field (`actions[2].operation.op`);
    a bad task raises DataError, or is recorded in `skipped` and left out. A file that is not a JSON
    list always raises.
    """
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    tasks = []
    for file in files:
        records = read_json(file)
        if not isinstance(records, list):
            problem = f"expected a JSON list of Mind2Web tasks, got {type_name(records)}"
            raise DataError(file, None, None, problem, "not a list")
        tasks += convert_rows(enumerate(records, start=1), lambda i, record, at=file: _task(record, at, i), skipped)
    return tasks


def _task(record: object, path: Path, index: int) -> Task:
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type_name(record)}", "not an object")
    annotation = require_text(record, "annotation_id", path, index)
    question = require_text(record, "confirmed_task", path, index)
    website = require(record, "website", str, path, index)
    reprs = require(record, "action_reprs", list, path, index)
    actions = require(record, "actions", list, path, index)
    if not actions:
        raise DataError(path, index, "actions", "empty; a task needs at least one step", "empty")
    if len(reprs) != len(actions) or not all(isinstance(r, str) for r in reprs):
        problem = f"expected {len(actions)} strings (one per action), got {len(reprs)} items"
        raise DataError(path, index, "action_reprs", problem, "invalid value")
    steps = [_step(action, path, index, f"actions[{i}]") for i, action in enumerate(actions)]
    return Task(
        id=f"mind2web-{annotation}",
        family="web",
        dataset="mind2web",
        question=question.strip(),
        subgoals=(),
        actions=(),
        answer="",
        meta={
            "source": path.name,
            "website": website,
            "action_reprs": reprs,
            "gold_steps": [step.to_json() for step in steps],
        },
    )


def _step(action: object, path: Path, index: int, label: str) -> GoldStep:
    if not isinstance(action, dict):
        raise DataError(path, index, label, f"expected an object, got {type_name(action)}", "wrong type")
    operation = require(action, "operation", dict, path, index, label=f"{label}.operation")
    op = require(operation, "op", str, path, index, label=f"{label}.operation.op")
    if op not in OPERATIONS:
        problem = f"expected one of {', '.join(OPERATIONS)}, got {op!r}"
        raise DataError(path, index, f"{label}.operation.op", problem, "unknown operation")
    value = require(operation, "value", str, path, index, label=f"{label}.operation.value")
    html = require(action, "cleaned_html", str, path, index, label=f"{label}.cleaned_html")
    positives = require(action, "pos_candidates", list, path, index, label=f"{label}.pos_candidates")
    negatives = require(action, "neg_candidates", list, path, index, label=f"{label}.neg_candidates")
    if not positives:
        raise DataError(path, index, f"{label}.pos_candidates", "empty; a step needs a right element", "empty")
    texts, order = node_texts(html)
    elements: dict[str, Element] = {}
    right: set[str] = set()
    for kind, candidates in (("pos", positives), ("neg", negatives)):
        for j, candidate in enumerate(candidates):
            element = _element(candidate, texts, path, index, f"{label}.{kind}_candidates[{j}]")
            elements.setdefault(element.id, element)
            if kind == "pos":
                right.add(element.id)
    page = sorted(elements.values(), key=lambda e: order.get(e.id, len(order)))
    return GoldStep(tuple(page), op, value, frozenset(right))


def _element(candidate: object, texts: dict[str, str], path: Path, index: int, label: str) -> Element:
    if not isinstance(candidate, dict):
        raise DataError(path, index, label, f"expected an object, got {type_name(candidate)}", "wrong type")
    node = require_text(candidate, "backend_node_id", path, index, label=f"{label}.backend_node_id")
    tag = require_text(candidate, "tag", path, index, label=f"{label}.tag")
    raw = require(candidate, "attributes", str, path, index, label=f"{label}.attributes")
    try:
        attributes = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise DataError(path, index, f"{label}.attributes", "not a JSON object text", "invalid JSON") from None
    if not isinstance(attributes, dict):
        problem = f"expected a JSON object text, got {type_name(attributes)}"
        raise DataError(path, index, f"{label}.attributes", problem, "wrong type")
    kept = tuple((k, str(attributes[k])) for k in KEPT_ATTRIBUTES if isinstance(attributes.get(k), str | int | float))
    return Element(node, tag, texts.get(node, ""), kept)
