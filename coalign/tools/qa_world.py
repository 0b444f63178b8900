"""The bundled QA world: a seeded knowledge base of made-up entities, written as encyclopedia pages.

Real QA benchmarks ask about Wikipedia, which a pretrained model may have memorised and which
cannot be reached offline. Here every person, city, organisation, mountain and country is built
from random syllables, so no fact can be known in advance: a right answer has to come from the
QA tools reading these pages. One world (`WORLD_SEED`) serves every split and seed of the
bundled suite because the executor's tools read one corpus, as Lumos's tools read one Wikipedia.

Each page holds one fact per paragraph and names its entity in full in every sentence, so the
paragraph a query needs is well defined and the bundled extractive reader can find it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

WORLD_SEED = 0
COUNTS: dict[str, int] = {"country": 16, "city": 128, "person": 360, "organisation": 160, "mountain": 64}
KINDS = tuple(COUNTS)

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "t", "tr", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "k", "m")
_ORGANISATION_TYPES = (
    ("Guild", "guild of craftspeople"),
    ("Institute", "research institute"),
    ("Company", "trading company"),
    ("Society", "learned society"),
    ("Academy", "music academy"),
    ("Bank", "savings bank"),
)
_OCCUPATIONS = ("painter", "poet", "engineer", "botanist", "architect", "composer", "sculptor", "astronomer")
_WORKS = ("portraits", "long poems", "bridges", "studies of ferns", "town halls", "choral music", "star maps")
_FEATURES = ("river port", "old market", "stone bridges", "glassworks", "spring festival", "clock tower")


@dataclass(frozen=True)
class Entity:
    """One page's subject. `facts` maps an attribute to a number (years, counts) or another entity's name."""

    name: str
    kind: str
    facts: dict[str, int | str]

    @property
    def mention(self) -> str:
        """How a sentence names it: organisations take "the" ("the Orvel Guild"), other names stand alone."""
        return f"the {self.name}" if self.kind == "organisation" else self.name


@dataclass(frozen=True)
class World:
    entities: dict[str, Entity]  # by name
    pages: dict[str, tuple[str, ...]]  # name -> paragraphs

    def of_kind(self, kind: str) -> list[Entity]:
        return [e for e in self.entities.values() if e.kind == kind]


class _Names:
    """Fresh capitalised made-up words; no word is used twice in a world, so a name points at one page."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def word(self, syllables: tuple[int, ...] = (2, 3)) -> str:
        while True:
            parts = [
                self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                for _ in range(self.rng.choice(syllables))
            ]
            word = "".join(parts).capitalize()
            if word not in self.used and len(word) >= 5:  # too long to be a question word ("Have", "Does")
                self.used.add(word)
                return word


def number(value: int) -> str:
    """Counts as an encyclopedia writes them: `48,200`."""
    return f"{value:,}"


def _page(entity: Entity, rng: random.Random) -> tuple[str, ...]:
    """The paragraphs of one page, one fact each (plus a sentence of colour that no question asks about)."""
    f, n = entity.facts, entity.name
    if entity.kind == "person":
        article = "an" if f["occupation"][0] in "aeiou" else "a"
        return (
            f"{n} is {article} {f['occupation']} known for {rng.choice(_WORKS)}.",
            f"{n} was born in {f['born']} in the city of {f['birthplace']}.",
            f"{n} is {f['height']} centimetres tall.",
        )
    if entity.kind == "city":
        return (
            f"{n} is a city in the country of {f['country']}. It is known for its {rng.choice(_FEATURES)}.",
            f"{n} was founded in {f['founded']}.",
            f"{n} has a population of {number(f['population'])}.",
        )
    if entity.kind == "organisation":
        the = entity.mention[0].upper() + entity.mention[1:]
        return (
            f"{the} is a {f['type']} with its headquarters in the city of {f['headquarters']}.",
            f"{the} was founded in {f['founded']} by {f['founder']}.",
            f"{the} has {number(f['employees'])} employees.",
        )
    if entity.kind == "mountain":
        return (
            f"{n} is a mountain in the country of {f['country']}.",
            f"{n} is {number(f['height'])} metres tall.",
            f"{n} was first climbed in {f['climbed']}.",
        )
    return (
        f"{n} is a country whose capital is the city of {f['capital']}.",
        f"{n} has a population of {number(f['population'])}.",
    )


def build_world(seed: int = WORLD_SEED) -> World:
    """The same world for the same seed. Facts are consistent: a capital lies in its country, a founder
    was born at least 20 years before founding, a country counts more people than any of its cities."""
    rng = random.Random(f"coalign-qa-world/{seed}")
    names = _Names(rng)
    entities: dict[str, Entity] = {}

    def add(name: str, kind: str, **facts: int | str) -> Entity:
        entities[name] = Entity(name, kind, facts)
        return entities[name]

    countries = [names.word() for _ in range(COUNTS["country"])]
    cities = [
        add(names.word(), "city", country=countries[i % len(countries)], founded=rng.randint(1050, 1890),
            population=rng.randrange(2_000, 900_000, 100))
        for i in range(COUNTS["city"])
    ]  # fmt: skip
    for country in countries:
        own = [c for c in cities if c.facts["country"] == country]
        total = sum(c.facts["population"] for c in own)
        add(country, "country", capital=rng.choice(own).name, population=rng.randrange(total + 10_000, 3 * total, 1000))
    people = [
        add(f"{names.word((2,))} {names.word()}", "person", born=rng.randint(1800, 1990),
            birthplace=rng.choice(cities).name, height=rng.randint(150, 205), occupation=rng.choice(_OCCUPATIONS))
        for _ in range(COUNTS["person"])
    ]  # fmt: skip
    for _ in range(COUNTS["organisation"]):
        founder = rng.choice(people)
        suffix, kind = rng.choice(_ORGANISATION_TYPES)
        add(f"{names.word()} {suffix}", "organisation", type=kind, founder=founder.name,
            founded=min(2020, founder.facts["born"] + rng.randint(20, 60)), headquarters=rng.choice(cities).name,
            employees=rng.randint(40, 60_000))  # fmt: skip
    for _ in range(COUNTS["mountain"]):
        add(f"Mount {names.word()}", "mountain", country=rng.choice(countries), height=rng.randint(900, 6_800),
            climbed=rng.randint(1780, 1995))  # fmt: skip
    pages = {name: _page(entity, rng) for name, entity in entities.items()}
    return World(entities, pages)


@cache
def bundled_world() -> World:
    """The world the bundled QA suite asks about and the default QA tools read."""
    return build_world(WORLD_SEED)
