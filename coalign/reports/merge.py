"""One bench from several invocations: the results.json of seeds run in separate sittings or on separate
machines, merged into the results of the one bench they are parts of (`coalign report`).

A bench's seeds are independent (each has its own cold start), so a 5-seed bench may run one seed per
invocation, each with its own `--name`, and be reported as one. Pure: results dicts in, a results dict out.
"""

from __future__ import annotations

from collections.abc import Sequence

from coalign.core.runs import value_changes

# Fields that differ between the parts of one bench; every other field must be equal.
PER_PART = ("runs", "seeds", "recipes", "k", "wall_seconds", "merged_from", "machine", "machines")


def merge_results(parts: Sequence[tuple[str, dict]]) -> dict:
    """The results of the bench whose invocations gave `parts` (`(label, results)`, e.g. each file's path):
    their runs together and their seeds in order, with the labels in `merged_from`, the wall times summed
    and each part's machine in `machines`. ValueError, naming the part, when one is not of the same bench
    (another config, evaluation or training data) or holds a run of a (recipe, seed) that another part holds
    differently."""
    if not parts:
        raise ValueError("no results to merge")
    (first_label, first), merged_runs, k, labels, machines = parts[0], {}, {}, [], {}
    for label, part in parts:
        runs = part.get("runs") if isinstance(part, dict) else None
        if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
            raise ValueError(f"{label}: not a bench's results ('runs' is no mapping of recipes to seeds)")
        if not isinstance(part.get("seeds"), list):
            raise ValueError(f"{label}: not a bench's results ('seeds' is no list)")
        shared = sorted((set(first) | set(part)) - set(PER_PART))
        changed = [k for key in shared for k, _, _ in value_changes(first.get(key), part.get(key), key)]
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            raise ValueError(f"{label} is not the same bench as {first_label}: {shown} differ")
        for recipe, by_seed in part["runs"].items():
            runs = merged_runs.setdefault(recipe, {})
            for seed, run in by_seed.items():
                if seed in runs and runs[seed] != run:
                    raise ValueError(f"{label}: {recipe} seed {seed} differs from the same run in an earlier part")
                runs[seed] = run
        for recipe, value in part.get("k", {}).items():
            if k.setdefault(recipe, value) != value:
                raise ValueError(f"{label}: {recipe} has K={value}, an earlier part K={k[recipe]}")
        labels += part.get("merged_from", [label])
        machines |= part.get("machines") or ({label: part["machine"]} if "machine" in part else {})
    merged = {key: value for key, value in first.items() if key not in PER_PART}
    merged["seeds"] = sorted({int(s) for _, part in parts for s in part["seeds"]})
    merged["runs"] = merged_runs
    if any("recipes" in part for _, part in parts):
        merged["recipes"] = list(dict.fromkeys(r for _, part in parts for r in part.get("recipes", [])))
        merged["k"] = k
    if all("wall_seconds" in part for _, part in parts):
        merged["wall_seconds"] = round(sum(part["wall_seconds"] for _, part in parts), 1)
    merged["merged_from"] = labels
    if machines:
        merged["machines"] = machines
    return merged
