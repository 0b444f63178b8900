"""Wordle in LMRL-Gym's text format (as AgentGym and PilotRL evaluate it).

Action: a guess written as spaced letters, "c r a n e" (the unspaced "crane" is read too).
Observation: the feedback, five spaced letters such as "b y g g b": g = right letter in the right
place, y = in the word elsewhere, b = not in the word (past the copies that are green or already
yellow: greens are scored first, then yellows left to right while copies of that letter remain).
A guess that is not a word of the list (or not five letters) is answered "invalid word": it counts
as a step (towards `max_steps`) but uses none of the 6 tries. LMRL-Gym's prompt says only that the
game answers "invalid word"; whether it costs a try we could not tell, so it does not here. The
sixth valid guess ends the episode.

Expert: a fixed best first guess, then the answer-list word that splits the answers still consistent
with all feedback best (smallest sum of squared group sizes; a candidate wins ties). It reads only the
feedback: its belief is those candidates, narrowed by each feedback. It solves every answer of the list
within 6 guesses (tested exhaustively; 4 at most, 2.98 on average).
Plan steps: the next guess is concrete, "guess c r a n e" (`plan_action` -> "c r a n e"); the later
ones are abstract, "guess a word that fits the feedback" (`plan_action` -> None; `delegates`: a plan judge
lets the expert choose that guess, so the expert's own plan is a correct one). There are as many as
the expert needs for the hardest candidate left (its worst case, within the tries left: the plan is the
same whichever of them is the answer), so each feedback rewrites the plan: the next guess named, the
steps it no longer needs gone.
`to_go` measures the candidates left: 1 + log2 of their number (0 once solved).

Word lists: coalign/envs/data (from wordfreq's data, CC BY-SA 4.0; see data/WORDLE_LICENSE).
"""

from __future__ import annotations

import copy
import math
import random
import re
from functools import cache, lru_cache
from importlib import resources

import numpy as np

from coalign.envs.base import TextEnv, plain_action, plain_step

TRIES = 6
ABSTRACT_STEP = "guess a word that fits the feedback"


def _read(name: str) -> list[str]:
    text = resources.files("coalign.envs").joinpath("data", name).read_text(encoding="utf-8")
    return [w.strip() for w in text.splitlines() if w.strip()]


@cache
def answers() -> tuple[str, ...]:
    return tuple(_read("wordle_answers.txt"))


@cache
def vocabulary() -> frozenset[str]:
    return frozenset(_read("wordle_words.txt")) | frozenset(answers())


@cache
def _order() -> tuple[int, ...]:
    """Seed -> answer: a fixed shuffle, so seeds 0..N-1 cover every answer once and small seeds are
    not just the most frequent words."""
    order = list(range(len(answers())))
    random.Random("coalign-wordle").shuffle(order)
    return tuple(order)


def feedback(guess: str, answer: str) -> str:
    """Wordle's rule: greens first, then yellows while unmatched copies of the letter remain."""
    marks = ["b"] * 5
    left: dict[str, int] = {}
    for i, (g, a) in enumerate(zip(guess, answer)):
        if g == a:
            marks[i] = "g"
        else:
            left[a] = left.get(a, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] == "b" and left.get(g, 0) > 0:
            marks[i] = "y"
            left[g] -= 1
    return " ".join(marks)


@cache
def _patterns() -> np.ndarray:
    """Feedback of every answer-list guess against every answer, as base-3 codes (vectorised: the
    expert scores hundreds of guesses per decision)."""
    words = np.array([[ord(c) for c in w] for w in answers()], dtype=np.int16)
    g = words[:, None, :]
    a = words[None, :, :]
    green = g == a
    marks = np.where(green, 2, 0).astype(np.int8)
    for i in range(5):
        same_letter = a == g[:, :, i : i + 1]
        available = (same_letter & ~green).sum(axis=2)
        used = np.zeros(available.shape, dtype=np.int64)
        for k in range(i):
            used += (g[:, :, k] == g[:, :, i]) & (marks[:, :, k] == 1)
        yellow = ~green[:, :, i] & (available > used)
        marks[:, :, i] = np.where(yellow, 1, marks[:, :, i])
    weights = np.array([81, 27, 9, 3, 1], dtype=np.int32)
    return (marks.astype(np.int32) * weights).sum(axis=2)


@lru_cache(maxsize=None)
def _best_guess(candidates: tuple[int, ...]) -> int:
    """The answer-list word that splits `candidates` into the smallest groups (sum of squares)."""
    if len(candidates) <= 2:
        return candidates[0]
    codes = _patterns()[:, list(candidates)]
    best, best_key = 0, None
    in_candidates = set(candidates)
    for guess in range(codes.shape[0]):
        counts = np.bincount(codes[guess], minlength=243)
        key = (int((counts * counts).sum()), guess not in in_candidates, guess)
        if best_key is None or key < best_key:
            best, best_key = guess, key
    return best


@lru_cache(maxsize=None)
def _worst_case(candidates: tuple[int, ...]) -> int:
    """The expert's guesses to the answer from `candidates`, for the hardest of them to find."""
    guess = _best_guess(candidates)
    codes = _patterns()[guess]
    groups: dict[int, list[int]] = {}
    for c in candidates:
        if c != guess:
            groups.setdefault(int(codes[c]), []).append(c)
    return 1 + max((_worst_case(tuple(group)) for group in groups.values()), default=0)


def spaced(word: str) -> str:
    return " ".join(word)


_SPACED = re.compile(r"(?<![a-z])([a-z](?: [a-z]){4})(?![a-z])")
_GUESS = re.compile(r"\bguess:? ([a-z]{5})\b")


class WordleEnv(TextEnv):
    """Guess the hidden five-letter word in six tries."""

    name = "wordle"
    expert_revises = True
    invalid_reply = r"invalid word"
    max_steps = 12
    instructions = (
        'Guess the hidden 5-letter word in 6 tries. Write a guess as spaced letters, e.g. "c r a n e". '
        "Feedback per letter: g = right place, y = in the word elsewhere, b = not in the word. "
        'A word not in the vocabulary is answered "invalid word".'
    )

    def __init__(self) -> None:
        super().__init__()
        self.answer = ""
        self.tries = 0
        self.candidates: tuple[int, ...] = ()
        self.history: list[tuple[str, str]] = []  # (word guessed, its feedback), valid guesses only

    def reset(self, seed: int | None = None) -> str:
        seed = random.randrange(2**31) if seed is None else seed
        self.answer = answers()[_order()[seed % len(answers())]]
        self.tries = 0
        self.steps_taken = 0
        self.success = self.done = False
        self.candidates = tuple(range(len(answers())))
        self.history = []
        self.goal = "guess the hidden 5-letter word within 6 tries"
        trial = copy.deepcopy(self)
        while not trial.done:
            trial.step(trial.expert_action())
        self.optimal_steps = trial.steps_taken
        return "Guess the hidden 5-letter word. You have 6 tries."

    def _act(self, action: str) -> str:
        word = "".join(action.lower().split())
        if len(word) != 5 or word not in vocabulary():
            return "invalid word"
        self.tries += 1
        marks = feedback(word, self.answer)
        self.history.append((word, marks))
        self.candidates = tuple(c for c in self.candidates if feedback(word, answers()[c]) == marks)
        if word == self.answer:
            self.success = self.done = True
        elif self.tries >= TRIES:
            self.done = True
        return marks

    def expert_action(self) -> str:
        return spaced(answers()[_best_guess(self.candidates)])

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        guesses = min(_worst_case(self.candidates), TRIES - self.tries)
        return [f"guess {self.expert_action()}"] + [ABSTRACT_STEP] * (guesses - 1)

    def to_go(self) -> float:
        """What is left to find, from the candidates the feedback allows: the bits still unknown, log2 of their
        number, plus the guess that names the answer; 0 once solved."""
        return 0.0 if self.success else 1.0 + math.log2(len(self.candidates))

    def plan_action(self, step: str) -> str | None:
        text = str(step).lower()
        for match in _SPACED.finditer(text):
            if match.group(1).replace(" ", "") in vocabulary():
                return match.group(1)
        for match in _GUESS.finditer(text):
            if match.group(1) in vocabulary():
                return spaced(match.group(1))
        return None

    def delegates(self, step: str) -> bool:
        """The abstract step exactly (case, spacing and a final full stop aside): nothing else passes."""
        return plain_step(step) == ABSTRACT_STEP

    def fits(self, action: str) -> bool:
        """A word of the vocabulary that could still be the answer given every feedback so far (the step says
        so), or the expert's guess (which may split the candidates better than any that fits)."""
        word = plain_action(action).replace(" ", "")
        if self.done or word not in vocabulary():
            return False
        return all(feedback(guess, word) == marks for guess, marks in self.history) or super().fits(action)
