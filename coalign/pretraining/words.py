"""Random names, things and numbers for the corpus generators.

Names are drawn half from a short list and half invented from syllables, so a model cannot learn a
closed set of them: the only way to predict an invented name the second time is to copy it.
"""

from __future__ import annotations

import random

FIRST_NAMES = (
    "Ada Amir Bea Bram Cato Dara Eli Esme Farid Gus Hana Ines Ivo Jun Kai Lale Lior Mara Milo Noor Odile "
    "Pia Quin Rafi Runa Sami Tove Uma Vik Wren Xia Yara Zeno Abel Chiara Dov Enzo Freya Goran Hedda"
).split()
SYLLABLES = (
    "ba be bo da de do fa fi ka ke ko la li lo ma mi mo na ni no pa po ra re ri sa se so ta te to va vi za zo".split()
)
ENDINGS = ("", "n", "r", "s", "l", "x", "th", "nd")
THINGS = (
    "pebble lantern ticket marble stamp seed bolt ribbon crate jar coin shell feather card brick kite "
    "basket candle spoon tile badge bead button cup nail page plank rope sock tray"
).split()
PLACES = (
    "harbor library market orchard workshop station garden bakery clinic museum school depot mill farm "
    "studio hall bridge plaza"
).split()
UNITS = ("boxes", "bags", "rows", "shelves", "trays", "packs", "crates", "bundles", "stacks", "bins")


def invented(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(*syllables))) + rng.choice(ENDINGS)
    return word.capitalize()


def name(rng: random.Random) -> str:
    return rng.choice(FIRST_NAMES) if rng.random() < 0.5 else invented(rng)


def names(rng: random.Random, n: int) -> list[str]:
    """`n` distinct names."""
    out: list[str] = []
    while len(out) < n:
        candidate = name(rng)
        if candidate not in out:
            out.append(candidate)
    return out


def number(rng: random.Random) -> int:
    """A number of varied size: mostly small, sometimes with three or four digits."""
    scale = rng.choices((10, 100, 1000, 10000), weights=(4, 4, 2, 1))[0]
    return rng.randint(2, scale)


def thing(rng: random.Random) -> str:
    return rng.choice(THINGS) if rng.random() < 0.8 else invented(rng, (2, 2)).lower()
