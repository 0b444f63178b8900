"""The bundled shop: a seeded catalogue of made-up brands' products in WebShop's shape.

Twelve product kinds, each with WebShop-like attributes ("caffeine free", "non slip"), option
groups (flavor, color, size) and a price range; each product has a few of its kind's attributes,
some values of each option group and a price. Titles name the brand, one or two attributes and
the kind, as WebShop's scraped titles mostly do; the text lists the attributes as bullet points.
The catalogue is the same for every seed of the suite (the shop tools read one catalogue).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from functools import cache

from coalign.envs.shop import Catalogue, Product

PER_KIND = 40


@dataclass(frozen=True)
class _Kind:
    noun: str
    category: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


_COLORS = ("black", "white", "navy", "grey", "red", "green", "pink", "teal")
KINDS: tuple[_Kind, ...] = (
    _Kind(
        "green tea",
        "Grocery & Gourmet Food › Beverages › Tea",
        ("caffeine free", "organic", "gluten free", "non gmo", "sugar free", "loose leaf"),
        (
            ("flavor", ("mint", "lemon", "ginger", "peach", "jasmine", "honey")),
            ("size", ("20 count", "40 count", "100 count")),
        ),
        (4.0, 28.0),
    ),
    _Kind(
        "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo",
        ("sulfate free", "paraben free", "cruelty free", "tea tree", "argan oil", "dry scalp"),
        (("scent", ("coconut", "lavender", "citrus", "unscented")), ("size", ("8 fl oz", "16 fl oz", "32 fl oz"))),
        (6.0, 38.0),
    ),
    _Kind(
        "running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic",
        ("non slip", "lightweight", "breathable", "rubber sole", "arch support", "wide fit"),
        (("color", _COLORS[:5]), ("size", ("7", "8", "9", "10", "11", "12"))),
        (28.0, 118.0),
    ),
    _Kind(
        "backpack",
        "Luggage & Travel Gear › Backpacks › Laptop Backpacks",
        ("water resistant", "laptop sleeve", "usb charging port", "anti theft", "lightweight"),
        (("color", ("black", "grey", "navy", "green", "pink")),),
        (19.0, 89.0),
    ),
    _Kind(
        "wireless earbuds",
        "Electronics › Headphones › Earbud Headphones",
        ("noise cancelling", "water resistant", "long battery life", "charging case", "touch control"),
        (("color", ("black", "white", "navy", "rose gold")),),
        (14.0, 148.0),
    ),
    _Kind(
        "scented candle",
        "Home & Kitchen › Home Decor › Candles",
        ("soy wax", "long lasting", "lead free", "natural ingredients", "hand poured"),
        (("scent", ("vanilla", "lavender", "sea salt", "sandalwood", "cinnamon")), ("size", ("4 oz", "8 oz", "16 oz"))),
        (7.0, 39.0),
    ),
    _Kind(
        "coffee mug",
        "Home & Kitchen › Kitchen & Dining › Mugs",
        ("dishwasher safe", "microwave safe", "lead free", "double wall", "large handle"),
        (("color", ("white", "black", "navy", "green", "red")), ("size", ("12 oz", "16 oz", "20 oz"))),
        (8.0, 34.0),
    ),
    _Kind(
        "wool socks",
        "Clothing, Shoes & Jewelry › Men › Socks",
        ("moisture wicking", "machine washable", "cushioned", "merino wool", "breathable"),
        (("color", ("grey", "navy", "black", "green")), ("size", ("small", "medium", "large", "x-large"))),
        (9.0, 39.0),
    ),
    _Kind(
        "desk lamp",
        "Tools & Home Improvement › Lighting › Desk Lamps",
        ("dimmable", "eye caring", "usb charging port", "touch control", "memory function"),
        (("color", ("black", "white", "silver")),),
        (15.0, 69.0),
    ),
    _Kind(
        "yoga mat",
        "Sports & Outdoors › Yoga › Yoga Mats",
        ("non slip", "extra thick", "eco friendly", "carrying strap", "latex free"),
        (("color", ("purple", "navy", "black", "teal", "pink")), ("thickness", ("4mm", "6mm", "8mm"))),
        (15.0, 79.0),
    ),
    _Kind(
        "phone case",
        "Cell Phones & Accessories › Cases & Covers › Basic Cases",
        ("shockproof", "slim fit", "wireless charging", "raised edges", "kickstand"),
        (("color", ("clear", "black", "navy", "pink", "green")),),
        (7.0, 29.0),
    ),
    _Kind(
        "throw pillow covers",
        "Home & Kitchen › Bedding › Decorative Pillows & Covers › Throw Pillow Covers",
        ("machine washable", "hidden zipper", "double sided", "soft velvet", "set of 2"),
        (("color", ("grey", "navy", "green", "pink", "white")), ("size", ("16x16 inch", "18x18 inch", "20x20 inch"))),
        (9.0, 34.0),
    ),
)

BRANDS = (
    "Vorlan", "Quibble", "Marrowby", "Kestrel", "Brindle", "Okapi", "Lumenfield", "Corvid", "Halden", "Pellucid",
    "Wrenwood", "Ostara", "Fennick", "Glimmerly", "Tamsin", "Norrow", "Bexley", "Saffra", "Cobaltine", "Yarrowby",
)  # fmt: skip


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "b0" + "".join(rng.choices(string.ascii_lowercase + string.digits, k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _product(rng: random.Random, kind: _Kind, asin: str) -> Product:
    attributes = tuple(sorted(rng.sample(kind.attributes, rng.randint(2, 4)), key=kind.attributes.index))
    options = tuple(
        (name, tuple(sorted(rng.sample(values, rng.randint(2, min(4, len(values)))), key=values.index)))
        for name, values in kind.options
    )
    titled = " ".join(a.title() for a in rng.sample(attributes, rng.randint(1, 2)))
    return Product(
        asin=asin,
        name=f"{rng.choice(BRANDS)} {titled} {kind.noun.title()}",
        query=kind.noun,
        product_category=kind.category,
        attributes=attributes,
        options=options,
        price=round(rng.uniform(*kind.price), 2),
        text="\n".join(f"{a.capitalize()}." for a in attributes),
    )


def build_catalogue(seed: int) -> Catalogue:
    """PER_KIND products of every kind, the same for the same seed, kinds interleaved."""
    rng = random.Random(f"coalign-shop/{seed}")
    taken: set[str] = set()
    return Catalogue([_product(rng, kind, _asin(rng, taken)) for _ in range(PER_KIND) for kind in KINDS])


@cache
def bundled_catalogue() -> Catalogue:
    return build_catalogue(0)


def kind_of(product: Product) -> _Kind:
    return next(kind for kind in KINDS if kind.noun == product.query)
