"""Crafting in TextCraft's style, over a recipe graph of our own (not Minecraft's recipe files).

Actions: "get N item" (base materials only; "get item" means 1), "craft N X using a A, b B" (N a
multiple of the recipe's output, each ingredient scaled alike; the ingredients in any order),
"inventory". Item names are lower case; a plural "s" is forgiven ("2 sticks" reads "2 stick").
First observation: "Crafting commands:" then one recipe per line (the ones the goal needs and some
distractors, shuffled), then "Goal: craft X." Answers: "Got 2 iron ore", "Crafted 4 stick",
"Could not find iron ingot" (get of a craftable or unknown item), "Could not find enough items to
craft torch", "Could not find a valid recipe for torch", "Inventory: [coal] (1) [stick] (3)",
"Could not execute <action>" for anything else. Holding the goal item ends the episode with success.

Expert: adds up what the goal needs in topological order (what the inventory already holds is
used first), then gets each base material once and crafts each intermediate once, leaves first.
It knows only what the agent has observed: every recipe it uses is among the crafting commands of the
first observation (all the goal needs are shown), and the inventory is what the agent's own gets and
crafts made of it (the answers say so; "inventory" shows it). Nothing is hidden, so its plan is never a
hypothesis and no observation rewrites it (`expert_revises` stays False): each plan is the last one
less its first step, unless the agent strays. `to_go` is its remaining step count.
Plan steps: the action itself, then for a get or an intermediate craft " for the <consumer>", e.g.
"get 2 iron ore for the iron ingot" (`plan_action` -> "get 2 iron ore"); "craft 1 lantern using 1
glass, 1 iron ingot, 1 torch" (`plan_action` -> that same text); "check the inventory" -> "inventory".
"""

from __future__ import annotations

import math
import random
import re

from coalign.envs.base import TextEnv

BASE = (
    "iron ore", "coal", "wood log", "sand", "clay", "stone", "string", "leather", "feather", "flint",
    "copper ore", "gold ore", "wool", "reed", "wax",
)  # fmt: skip

# item: (count made, {ingredient: count})
RECIPES: dict[str, tuple[int, dict[str, int]]] = {
    "iron ingot": (1, {"iron ore": 1, "coal": 1}),
    "gold ingot": (1, {"gold ore": 1, "coal": 1}),
    "copper ingot": (1, {"copper ore": 1, "coal": 1}),
    "plank": (4, {"wood log": 1}),
    "glass": (1, {"sand": 1, "coal": 1}),
    "brick": (2, {"clay": 1, "coal": 1}),
    "stone block": (1, {"stone": 4}),
    "cloth": (1, {"wool": 3}),
    "paper": (3, {"reed": 3}),
    "rope": (1, {"string": 3}),
    "stick": (4, {"plank": 2}),
    "copper wire": (3, {"copper ingot": 1}),
    "candle": (1, {"wax": 1, "string": 1}),
    "torch": (4, {"stick": 1, "coal": 1}),
    "arrow": (4, {"flint": 1, "stick": 1, "feather": 1}),
    "bow": (1, {"stick": 3, "string": 3}),
    "fishing rod": (1, {"stick": 3, "string": 2}),
    "iron sword": (1, {"iron ingot": 2, "stick": 1}),
    "iron pickaxe": (1, {"iron ingot": 3, "stick": 2}),
    "bucket": (1, {"iron ingot": 3}),
    "shield": (1, {"plank": 6, "iron ingot": 1}),
    "chest": (1, {"plank": 8}),
    "boat": (1, {"plank": 5}),
    "fence": (3, {"plank": 4, "stick": 2}),
    "window": (1, {"glass": 4, "plank": 2}),
    "lantern": (1, {"glass": 1, "iron ingot": 1, "torch": 1}),
    "book": (1, {"paper": 3, "leather": 1}),
    "bookshelf": (1, {"plank": 6, "book": 3}),
    "bed": (1, {"cloth": 3, "plank": 3}),
    "kiln": (1, {"brick": 8}),
    "furnace": (1, {"stone block": 8}),
    "compass": (1, {"iron ingot": 1, "copper wire": 1, "glass": 1}),
    "clock": (1, {"gold ingot": 4, "copper wire": 1}),
    "spear": (1, {"flint": 1, "stick": 2, "rope": 1}),
    "ladder": (1, {"rope": 2, "stick": 4}),
    "candle lamp": (1, {"candle": 1, "glass": 1}),
    "map": (1, {"paper": 8, "compass": 1}),
}
ITEMS = frozenset(BASE) | frozenset(RECIPES)
DISTRACTORS = 5
MIN_STEPS, MAX_STEPS_EXPERT = 3, 12


def depth(item: str) -> int:
    """Crafting levels under `item` (a base material: 0)."""
    if item not in RECIPES:
        return 0
    return 1 + max(depth(i) for i in RECIPES[item][1])


def _topological(goal: str) -> list[str]:
    """Items under `goal`, each after every item that consumes it (goal first)."""
    seen: list[str] = []

    def visit(item: str) -> None:
        if item in seen:
            return
        for ingredient in RECIPES.get(item, (0, {}))[1]:
            visit(ingredient)
        seen.append(item)

    visit(goal)
    return seen[::-1]


def recipe_text(item: str, batches: int = 1) -> str:
    made, ingredients = RECIPES[item]
    parts = ", ".join(f"{count * batches} {name}" for name, count in ingredients.items())
    return f"craft {made * batches} {item} using {parts}"


def _item(text: str) -> str | None:
    """An item name as the game knows it (plural "s" forgiven), or None."""
    name = " ".join(text.lower().split())
    if name in ITEMS:
        return name
    if name.endswith("s") and name[:-1] in ITEMS:
        return name[:-1]
    return None


def _longest_item(words: list[str]) -> str | None:
    """The longest known item that `words` starts with (plan steps carry trailing words)."""
    for n in range(min(len(words), 4), 0, -1):
        item = _item(" ".join(words[:n]))
        if item:
            return item
    return None


_GET = re.compile(r"get (?:(\d{1,4}) )?(.+)")
_CRAFT = re.compile(r"craft (\d{1,4}) (.+?) using (.+)")
_INGREDIENT = re.compile(r"(\d{1,4}) (.+)")


class CraftingEnv(TextEnv):
    """Get base materials and craft up the recipe tree to the goal item."""

    name = "crafting"
    invalid_reply = r"Could not "
    max_steps = 30
    instructions = (
        'Craft the goal item. Actions: "get N item" for base materials, "craft N X using a A, b B" '
        'following the crafting commands given, "inventory" to see what you hold.'
    )

    def __init__(self) -> None:
        super().__init__()
        self.target = ""
        self.inventory: dict[str, int] = {}
        self.commands: list[str] = []

    def reset(self, seed: int | None = None) -> str:
        rng = random.Random(random.randrange(2**31) if seed is None else seed)
        self.inventory = {}
        goals = sorted(item for item in RECIPES if depth(item) >= 2)
        while True:
            self.target = rng.choice(goals)
            if MIN_STEPS <= len(self._expert_actions()) <= MAX_STEPS_EXPERT:
                break
        needed = [item for item in _topological(self.target) if item in RECIPES]
        others = sorted(set(RECIPES) - set(needed))
        shown = needed + rng.sample(others, DISTRACTORS)
        rng.shuffle(shown)
        self.commands = [recipe_text(item) for item in shown]
        self.steps_taken = 0
        self.success = self.done = False
        self.goal = f"craft {self.target}"
        self.optimal_steps = len(self._expert_actions())
        return "Crafting commands:\n" + "\n".join(self.commands) + f"\n\nGoal: craft {self.target}."

    def _act(self, action: str) -> str:
        text = action.lower().rstrip(".")
        if text in ("inventory", "check inventory", "i"):
            return self._inventory_text()
        if match := _GET.fullmatch(text):
            return self._get(int(match.group(1) or 1), match.group(2))
        if match := _CRAFT.fullmatch(text):
            return self._craft(int(match.group(1)), match.group(2), match.group(3))
        return f"Could not execute {action[:80]}"

    def _inventory_text(self) -> str:
        held = [f"[{name}] ({count})" for name, count in self.inventory.items() if count > 0]
        return "Inventory: " + (" ".join(held) if held else "You are not carrying anything.")

    def _get(self, count: int, name: str) -> str:
        item = _item(name)
        if item not in BASE or count < 1:
            return f"Could not find {name[:80]}"
        self._add(item, count)
        return f"Got {count} {item}"

    def _craft(self, count: int, name: str, ingredients: str) -> str:
        item = _item(name)
        if item not in RECIPES:
            return f"Could not find a valid recipe for {name[:80]}"
        made, recipe = RECIPES[item]
        given: dict[str, int] = {}
        for part in ingredients.split(","):
            match = _INGREDIENT.fullmatch(part.strip())
            ingredient = _item(match.group(2)) if match else None
            if ingredient is None or ingredient in given:
                return f"Could not find a valid recipe for {item}"
            given[ingredient] = int(match.group(1))
        batches = count // made
        if count < 1 or count % made or given != {k: v * batches for k, v in recipe.items()}:
            return f"Could not find a valid recipe for {item}"
        if any(self.inventory.get(k, 0) < v for k, v in given.items()):
            return f"Could not find enough items to craft {item}"
        for k, v in given.items():
            self.inventory[k] -= v
        self._add(item, count)
        return f"Crafted {count} {item}"

    def _add(self, item: str, count: int) -> None:
        self.inventory[item] = self.inventory.get(item, 0) + count
        if item == self.target:
            self.success = self.done = True

    def _expert_steps(self) -> list[tuple[str, str]]:
        """(action, consumer) pairs: every material the goal still needs, got or crafted once, leaves
        first; what the inventory holds is used before anything is made."""
        demand = {self.target: 1}
        batches: dict[str, int] = {}
        consumer: dict[str, str] = {}
        for item in _topological(self.target):
            missing = demand.get(item, 0) - self.inventory.get(item, 0)
            if missing <= 0:
                continue
            if item not in RECIPES:
                batches[item] = missing
                continue
            made, recipe = RECIPES[item]
            batches[item] = math.ceil(missing / made)
            for ingredient, count in recipe.items():
                demand[ingredient] = demand.get(ingredient, 0) + count * batches[item]
                consumer.setdefault(ingredient, item)
        steps = []
        for item in reversed(_topological(self.target)):
            if item in batches:
                action = recipe_text(item, batches[item]) if item in RECIPES else f"get {batches[item]} {item}"
                steps.append((action, consumer.get(item, "")))
        return steps

    def _expert_actions(self) -> list[str]:
        return [action for action, _ in self._expert_steps()]

    def expert_action(self) -> str:
        actions = self._expert_actions()
        return actions[0] if actions else "inventory"

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        plan = []
        for action, consumer in self._expert_steps():
            short = action.startswith("get") or len(action.split()) <= 8
            plan.append(f"{action} for the {consumer}" if consumer and short else action)
        return plan

    def to_go(self) -> float:
        """The expert's remaining steps (exact: it plans on nothing unseen), also once the task has failed."""
        return 0.0 if self.success else float(len(self._expert_steps()))

    def plan_action(self, step: str) -> str | None:
        text = " ".join(re.sub(r"[.!?]", " ", str(step).lower().replace(";", ",")).split())
        if re.search(r"\binventory\b", text) and not re.search(r"\b(get|craft)\b", text):
            return "inventory"
        if match := re.search(r"\bcraft (\d{1,4}) (.+?) using (.+)", text):
            item = _item(match.group(2))
            parts = []
            for part in match.group(3).split(","):
                ingredient = _INGREDIENT.match(part.strip())
                name = _longest_item(ingredient.group(2).split()) if ingredient else None
                if name is None:
                    break
                parts.append(f"{int(ingredient.group(1))} {name}")
            if item in RECIPES and parts:
                return f"craft {int(match.group(1))} {item} using {', '.join(parts)}"
            return None
        if match := re.search(r"\bget (\d{1,4}) (.+)", text):
            item = _longest_item(match.group(2).split())
            if item in BASE:
                return f"get {int(match.group(1))} {item}"
        return None
