"""WebShop as published: a data folder holding the product file, the attribute file and the human goals.

- `items_shuffle_1000.json` (or the full `items_shuffle.json`): a JSON list of products with `asin`,
  `name`, `pricing` ("$12.99", or a range "$10.99 - $15.99"), `customization_options`
  ({option name: [{"value": ...}, ...]} or null), `query`, `product_category`, `small_description`
  and `full_description`;
- `items_ins_v2_1000.json` (or `items_ins_v2.json`): {asin: {"attributes": [...], ...}};
- `items_human_ins.json`: {asin: [{"instruction", "instruction_attributes", "instruction_options"}, ...]}.

Products are read as WebShop's engine reads them (`load_products`): option names and values
lowercased with "/" read " | ", a product without attributes gets ["DUMMY_ATTR"], rows whose asin is
"nan" or longer than 10 characters and repeated asins are passed over as WebShop does. Goals follow
`get_human_goals`: one per human instruction with attributes, the price limit drawn as WebShop
draws it, then shuffled with WebShop's seed (233), so the first 500 are WebShop's test goals.
WebShop draws a product's price inside its range and the price limits with an unseeded generator;
here both come from a generator seeded by the asin, so a load is the same every time.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from coalign.core.errors import DataError, SkippedRows, keep_or_skip
from coalign.core.jsonl import convert_rows, read_json, require, require_text, type_name
from coalign.envs.shop import NO_PRICE_LIMIT, Catalogue, Goal, Product, price_upper
from coalign.tasks import Task

PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
GOAL_FILE = "items_human_ins.json"
DEFAULT_PRICE = 100.0  # WebShop's price for a product without pricing
GOAL_SHUFFLE_SEED = 233
_PRICE = re.compile(r"[^\d.]")


def _find(folder: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise DataError(folder, None, None, f"no {' or '.join(names)} in this folder", "missing file")


def load_webshop(folder: str | Path, skipped: SkippedRows | None = None) -> list[Task]:
    """Goals of a WebShop data folder as tasks (family "web", tool list "shop"), in WebShop's goal order.

    A bad product, attribute entry or goal raises DataError naming file, record and field, or is
    recorded in `skipped` and left out. Tasks have no gold plans: they serve evaluation (the reward).
    """
    folder = Path(folder)
    catalogue = load_catalogue(folder, skipped)
    goal_path = folder / GOAL_FILE
    records = read_json(goal_path)
    if not isinstance(records, dict):
        problem = f"expected a JSON object of asin -> instructions, got {type_name(records)}"
        raise DataError(goal_path, None, None, problem, "not an object")
    position = {asin: index for index, asin in enumerate(records, start=1)}
    located = [  # WebShop's order: products in file order, each product's instructions in order
        (position[product.asin], (product, k, row))
        for product in catalogue.products
        if product.asin in records
        for k, row in enumerate(_instructions(records[product.asin], goal_path, position[product.asin], skipped))
    ]
    tasks = convert_rows(located, lambda index, entry: _task(*entry, goal_path, index, folder), skipped)
    tasks = [task for task in tasks if task is not None]
    random.Random(GOAL_SHUFFLE_SEED).shuffle(tasks)
    return tasks


def _instructions(rows: object, path: Path, index: int, skipped: SkippedRows | None) -> list[object]:
    if isinstance(rows, list):
        return rows
    error = DataError(path, index, None, f"expected a list of instructions, got {type_name(rows)}", "wrong type")
    keep_or_skip(error, skipped)
    return []


def _task(product: Product, k: int, row: object, path: Path, index: int, folder: Path) -> Task | None:
    label = f"{product.asin}[{k}]"
    if not isinstance(row, dict):
        raise DataError(path, index, label, f"expected an object, got {type_name(row)}", "wrong type")
    instruction = require_text(row, "instruction", path, index, label=f"{label}.instruction")
    attributes = _strings(row, "instruction_attributes", path, index, label)
    options = _strings(row, "instruction_options", path, index, label)
    if not attributes:
        return None  # WebShop drops goals without attributes
    limit = price_upper(random.Random(f"{product.asin}/{k}"), product.price)
    priced = f", and price lower than {limit:.2f} dollars" if limit != NO_PRICE_LIMIT else ""
    goal = Goal(
        asin=product.asin,
        instruction=instruction.strip(".") + priced,
        name=product.name,
        query=product.query,
        product_category=product.product_category,
        attributes=tuple(attributes),
        options=tuple(options),
        price_upper=limit,
    )
    return Task(
        id=f"webshop-{product.asin}-{k}",
        family="web",
        dataset="webshop",
        question=goal.instruction,
        subgoals=(),
        actions=(),
        answer="",
        meta={"tools": "shop", "goal": goal.to_json(), "catalogue": str(folder)},
    )


def _strings(row: dict, field: str, path: Path, index: int, label: str) -> list[str]:
    values = require(row, field, list, path, index, label=f"{label}.{field}")
    if not all(isinstance(v, str) for v in values):
        raise DataError(path, index, f"{label}.{field}", "expected a list of strings", "wrong type")
    return values


@lru_cache(maxsize=4)
def _cached_catalogue(folder: str) -> Catalogue:
    return load_catalogue(Path(folder))


def catalogue_at(folder: str | Path) -> Catalogue:
    """The catalogue of a WebShop data folder, read once per process (episodes of its goals share it)."""
    return _cached_catalogue(str(Path(folder).resolve()))


def load_catalogue(folder: str | Path, skipped: SkippedRows | None = None) -> Catalogue:
    """The products of a WebShop data folder, with their attributes from the attribute file."""
    folder = Path(folder)
    product_path, attribute_path = _find(folder, PRODUCT_FILES), _find(folder, ATTRIBUTE_FILES)
    records, attributes = read_json(product_path), read_json(attribute_path)
    if not isinstance(records, list):
        raise DataError(product_path, None, None, f"expected a JSON list of products, got {type_name(records)}")
    if not isinstance(attributes, dict):
        problem = f"expected a JSON object of asin -> attributes, got {type_name(attributes)}"
        raise DataError(attribute_path, None, None, problem, "not an object")
    seen: set[str] = set()

    def product(index: int, record: object) -> Product | None:
        made = _product(record, attributes, product_path, attribute_path, index)
        if made is None or made.asin.lower() in seen:
            return None  # WebShop passes over "nan" asins and repeats
        seen.add(made.asin.lower())
        return made

    products = [p for p in convert_rows(enumerate(records, start=1), product, skipped) if p is not None]
    if not products:
        raise DataError(product_path, None, None, "no products", "no tasks")
    return Catalogue(products)


def _product(
    record: object, attributes: Mapping, product_path: Path, attribute_path: Path, index: int
) -> Product | None:
    if not isinstance(record, dict):
        raise DataError(product_path, index, None, f"expected a JSON object, got {type_name(record)}", "not an object")
    asin = require(record, "asin", str, product_path, index)
    if asin == "nan" or len(asin) > 10:
        return None
    name = require(record, "name", str, product_path, index)
    options = _options(record.get("customization_options"), product_path, index)
    described = record.get("small_description") or []
    bullets = described if isinstance(described, list) else [described]
    text = "\n".join([*(str(b) for b in bullets), str(record.get("full_description") or "")])
    entry = attributes.get(asin, {})
    listed = entry.get("attributes") if isinstance(entry, dict) else None
    if listed is not None and not (isinstance(listed, list) and all(isinstance(a, str) for a in listed)):
        raise DataError(attribute_path, None, f"{asin}.attributes", "expected a list of strings", "wrong type")
    return Product(
        asin=asin,
        name=name,
        query=str(record.get("query", "")).lower().strip(),
        product_category=str(record.get("product_category", "")),
        attributes=tuple(listed) if listed else ("DUMMY_ATTR",),
        options=options,
        price=_price(record.get("pricing"), asin, product_path, index),
        text=text,
    )


def _options(raw: object, path: Path, index: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not raw:
        return ()
    if not isinstance(raw, dict):
        problem = f"expected an object of option lists, got {type_name(raw)}"
        raise DataError(path, index, "customization_options", problem, "wrong type")
    options = []
    for name, contents in raw.items():
        if contents is None:
            continue
        label = f"customization_options.{name}"
        if not isinstance(contents, list) or not all(isinstance(c, dict) and "value" in c for c in contents):
            raise DataError(path, index, label, 'expected a list of {"value": ...} objects', "wrong type")
        values = tuple(str(c["value"]).strip().replace("/", " | ").lower() for c in contents)
        options.append((name.lower(), values))
    return tuple(options)


def _price(pricing: object, asin: str, path: Path, index: int) -> float:
    """WebShop's product price: the one price, or (a range) a draw inside it; 100 without pricing."""
    if not pricing:
        return DEFAULT_PRICE
    if not isinstance(pricing, str):
        raise DataError(path, index, "pricing", f"expected a price text like '$12.99', got {type_name(pricing)}")
    try:
        prices = [float(_PRICE.sub("", part)) for part in pricing.split("$")[1:]]
    except ValueError:
        prices = []
    if not prices:
        raise DataError(path, index, "pricing", f"no price in {pricing[:40]!r}", "invalid value")
    if len(prices) == 1:
        return prices[0]
    return random.Random(asin).uniform(*prices[:2])
