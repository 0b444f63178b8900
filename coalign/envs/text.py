"""Reading an action out of a plan step, for the environments with a command grammar (household, iqa).

Plans written by a model come numbered, bulleted or labelled ("Step 2:", "- Action:") and the action is
followed by its reason ("go to fridge 1 to find the cup"), so a step is cleaned first and an action
pattern is matched at its start, ending at a word boundary.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(r"^(?:step\s*\d+\s*[:.)-]?|\d+\s*[.):-]|[-*•]|action\s*:)\s*")
_END = r"(?=$|[\s.,;:!?)])"  # where an action in a plan step may end: before a space or punctuation


def step_text(step: str) -> str:
    """A plan step lower-cased, whitespace squeezed, and its list markers and labels dropped (repeatedly:
    "1. Step 1: ..." carries two)."""
    text = " ".join(str(step).lower().split())
    while (stripped := _PREFIX.sub("", text, count=1)) != text:
        text = stripped
    return text


def match_action(pattern: str, text: str, whole: bool) -> re.Match[str] | None:
    """`pattern` matched against an action (`whole`: the text is only the action) or the start of a plan
    step (the action may be followed by more words)."""
    return re.fullmatch(pattern, text) if whole else re.match(pattern + _END, text)
