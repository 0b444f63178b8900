"""`coalign bench` (and `make demo`) prints its report through rich's Markdown: in an 80-column terminal every
table of the demo's report fits, no cell cut short and none wrapped, headers and row labels included."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markdown import Markdown

from coalign.envs import HELDIN, HELDOUT
from coalign.moat import report as moat_report
from coalign.pilotrl import report as pilotrl_report

WIDTH = 80


def render(markdown: str) -> list[str]:
    """The lines `coalign bench` prints for `markdown` in a WIDTH-column terminal (`console.print(Markdown(...))`)."""
    console = Console(width=WIDTH, file=io.StringIO(), record=True, color_system=None)
    console.print(Markdown(markdown))
    return console.export_text().splitlines()


def tables(markdown: str) -> list[list[str]]:
    """The markdown's pipe tables, each as its lines."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found, current = found + [current], []
    return found


def assert_fits(markdown: str) -> None:
    """Every line within WIDTH columns, and every table's header and rows each on one uncut line."""
    assert max(map(len, render(markdown))) <= WIDTH
    assert "…" not in "\n".join(render(markdown))
    for table in tables(markdown):
        lines = [line for line in render("\n".join(table)) if line.strip()]  # less the blank top and bottom edges
        assert not [line for line in lines if "…" in line or "..." in line], "\n".join(lines)
        assert len(lines) == len(table), "a cell wraps:\n" + "\n".join(lines)  # header, rule, one line per row


def metrics(acc: float, gold: float, blank: float, ppl: float) -> dict:
    return {
        "accuracy": acc,
        "lumos_exact": acc,
        "grounder_acc_gold_subgoals": gold,
        "grounder_acc_blank_subgoals": blank,
        "capability_gap": gold - acc,
        "plan_well_formed": 1.0,
        "grounding_ppl": ppl,
    }


def split(name: str, m: dict) -> dict:
    return {"sets": {name: {"n": 200, **m}}, "average": m, "families": {name: "maths"}, "family_average": {"maths": m}}


def rounds(*per_round: tuple[dict, dict]) -> dict:
    return {
        f"round{r}": {"heldin": split("suite-heldin", heldin), "heldout": split("suite-heldout", heldout)}
        for r, (heldin, heldout) in enumerate(per_round)
    }


def demo_results(seeds: int = 1) -> dict:
    """`coalign demo`'s results.json, less what the report does not read: `bench tiny` of lumos and moat, one
    round; each further seed shifts the accuracies by a point (a 3-seed bench's cells hold mean ± std)."""
    runs: dict = {"lumos": {}, "moat": {}}
    for seed in range(seeds):
        d = seed / 100
        cold = (metrics(0.06 + d, 0.58, 0.14, 4.474), metrics(0.0, 0.44 + d, 0.01, 6.22))
        lumos = (metrics(0.04 + d, 0.515, 0.095, 3.334), metrics(0.0, 0.38, 0.01 + d, 5.411))
        moat = (metrics(0.075 + d, 0.495, 0.12, 1.457 + d), metrics(0.0, 0.12, 0.0, 2.362))
        premise = {
            "candidates": 400,
            "grounding_success_rate": 0.0325 + d,
            "nll_success_point_biserial": -0.113 - d,
            "nll_success_auc": 0.746 + d,
        }
        stages = {
            "premise": premise,
            "pairs": {"pairs": 100, "kept_fraction": 1.0},
            "dpo": {"reward_accuracies": [0.6375]},
        }
        runs["lumos"][str(seed)] = {"rounds": rounds(cold, lumos), "stages": {}}
        runs["moat"][str(seed)] = {"rounds": rounds(cold, moat), "stages": {"round1": stages}}
    machine = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cores": 2, "gpus": [], "torch": "2.13.0+cpu"}
    return {
        "config": {"name": "tiny", "moat": {"rounds": 1, "tasks": 100, "k": 4, "critic": "execution"}},
        "seeds": list(range(seeds)),
        "recipes": ["lumos", "moat"],
        "k": {"lumos": 4, "moat": 4},
        "runs": runs,
        "wall_seconds": 536.0,
        "machine": {**machine, "transformers": "5.25.0", "trl": "1.16.0"},
    }


def test_the_demo_report_fits_80_columns():
    report = moat_report.report_markdown(demo_results())
    assert_fits(report)
    main = render("\n".join(tables(report)[0]))
    for label in ("Lumos (cold start)", "Lumos (matched)", "MOAT"):  # each row label whole, on its row's line
        assert [line for line in main if line.startswith(f" {label}  ")], "\n".join(main)
    assert "| Lumos (matched) | 4.0 | 4.0 | 0.0 | 0.0 |" in report  # the numbers as ever
    assert (
        "| MOAT | 1 | 7.5 | 49.5 | 42.0 | 1.457 |" in report
        and "| MOAT | 1 | 0.746 | -0.113 | 3.2 | 100.0 | 63.7 |" in report
    )
    assert "Lumos (matched): the Lumos baseline trained on MOAT's budget" in report  # the short name's legend


def test_the_main_table_of_a_three_seed_bench_fits_too():
    report = moat_report.report_markdown(demo_results(seeds=3))
    assert "| Lumos (matched) | 5.0 ± 1.0 | 5.0 ± 1.0 | 0.0 ± 0.0 | 0.0 ± 0.0 |" in report
    assert_fits("\n".join(tables(report)[0]))


def test_a_bench_with_a_near_and_a_far_held_out_set_fits_with_one_main_table_per_split():
    """`tiny` and `smol-suite` evaluate two held-out sets (far and near): five data columns side by side would
    pass 80, so the main table goes one per split."""
    results = demo_results(seeds=3)
    for run in (r for per_seed in results["runs"].values() for r in per_seed.values()):
        for block in run["rounds"].values():
            far = block["heldout"]["sets"]["suite-heldout"]
            block["heldout"]["sets"]["suite-near"] = {**far, "accuracy": 0.2}
            block["heldout"]["families"]["suite-near"] = "maths"
    report = moat_report.report_markdown(results)
    heldin, heldout = tables(report)[:2]
    assert heldin[0].startswith("| held-in | suite-heldin |") and "suite-near" in heldout[0]
    assert_fits("\n".join(heldin) + "\n\n" + "\n".join(heldout))


def pilotrl_demo_results() -> dict:
    """`coalign demo pilotrl`'s results: SFT AdaPlan and ReAct, one seed, the six environments, k=1 only."""

    def run(mode: str, first: float) -> dict:
        envs = {
            env: {
                "success": (first + 20 * i) % 120,
                "reward": 0.5,
                "steps": 12.4,
                "tokens": 123.4,
                "well_formed": 87.25,
            }
            | {"plan_correct": 40.0 if mode == "adaplan" else None}
            for i, env in enumerate(HELDIN + HELDOUT)
        }

        def average(names) -> dict:
            keys = [k for k in envs[names[0]] if all(envs[n][k] is not None for n in names)]
            return {k: sum(envs[n][k] for n in names) / len(names) for k in keys}

        split_envs = {"heldin_envs": list(HELDIN), "heldout_envs": list(HELDOUT)}
        averages = {"heldin": average(HELDIN), "heldout": average(HELDOUT)}
        return {"k1": {"mode": mode, "rl_order": None, "envs": envs, **split_envs, **averages}}

    return {
        "seeds": [0],
        "heldin": list(HELDIN),
        "heldout": list(HELDOUT),
        "runs": {"adaplan": {"0": run("adaplan", 20.0)}, "react": {"0": run("react", 0.0)}},
    }


def test_the_pilotrl_demo_report_fits_80_columns():
    report = pilotrl_report.report_markdown(pilotrl_demo_results())
    assert "First plans" in report and "Paired by seed" in report and "Table 10" in report  # all the demo's tables
    assert "| SFT (ReAct) | 80.0 | 100.0 | 90.0 |" in report  # held-out success: babyai, maze, their average
    assert_fits(report)


def test_one_pilotrl_runs_tables_fit_80_columns():
    """`coalign show` of one run prints the same tables for its one seed."""
    assert_fits(pilotrl_report.run_markdown(pilotrl_demo_results()["runs"]["adaplan"]["0"]))


def _web(acc: float, metric: str) -> dict:
    return {**metrics(acc, acc, 0.0, 2.0), "metric": metric, "grounding_ppl_gold_subgoals": 1.5, "lumos_exact": None}


def test_the_evaluation_tables_of_train_and_eval_fit_80_columns():
    """`coalign train` and `eval` print `eval_table`: a mixed run's sets, web ones with their metric, fit whole."""
    from coalign.reports.tables import eval_table

    maths, web = metrics(0.345, 0.625, 0.225, 3.56), _web(0.171, "step_success_rate")
    heldin = {
        "sets": {"suite-heldin": {"n": 200, **maths}, "web-suite-heldin": {"n": 100, **web}},
        "average": maths,
        "families": {"suite-heldin": "maths", "web-suite-heldin": "web"},
        "family_average": {"maths": maths, "web": web},
    }
    results = {"heldin": heldin, "heldout": split("suite-heldout", metrics(0.005, 0.45, 0.015, 14.95))}
    console = Console(width=WIDTH, file=io.StringIO(), record=True, color_system=None)
    console.print(eval_table(results, title="MOAT round2: evaluation (%)"))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= WIDTH and "…" not in "\n".join(lines)
    rows = {line.split()[0]: line.split() for line in lines if line.strip().startswith(("suite", "web", "average"))}
    web_row = ["web-suite-heldin", "100", "17.1", "-", "17.1", "0.0", "0.0", "100.0", "1.500", "2.000"]
    assert rows["web-suite-heldin"] == web_row and "ppl|gold" in "\n".join(lines)  # held-in keeps the web column
    assert rows["suite-heldout"] == ["suite-heldout", "200", "0.5", "0.5", "45.0", "1.5", "44.5", "100.0", "14.950"]
    assert "web-suite-heldin the step success rate" in " ".join(lines)
