"""Configs: bundled ones validate; a wrong key or type is an error naming file, line and key."""

import pytest

from coalign.config import BUNDLED, ConfigError, load_config
from coalign.tasks.sources import load_sources


@pytest.mark.parametrize("name", sorted(p.stem for p in BUNDLED.glob("*.yaml")))
def test_bundled_configs_validate(name):
    config = load_config(name)
    assert config.data.train if config.recipe != "pilotrl" else config.pilotrl.heldin and config.data is None


def test_six_column_config_evaluates_every_family_held_in_and_held_out():
    """tiny-six gives the paper's six columns: maths, QA and web sets on both splits."""
    config = load_config("tiny-six")
    for sources in (config.data.train, config.data.heldin, config.data.heldout):
        tasks = load_sources([s.model_copy(update={"n": 3}) for s in sources])
        assert {t.family for t in tasks} == {"maths", "qa", "web"}


def test_paper_config_holds_the_papers_sft_settings():
    sft = load_config("paper").grounder_sft
    assert (sft.learning_rate, sft.epochs, sft.max_length, sft.warmup_ratio) == (2e-5, 2, 1024, 0.03)
    assert sft.batch_size * sft.grad_accum == 128


def test_unknown_key_names_file_line_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: 10}\nplanner_sft:\n  lernrate: 0.1\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and "line 6" in message and "planner_sft.lernrate" in message
    assert "unknown key" in message


def test_wrong_type_names_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: ten}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "data.train.0.n" in str(err.value) and "line 4" in str(err.value)


def test_composed_stories_go_to_the_planner_only_and_are_validated(tmp_path):
    from coalign.moat.sft_data import grounder_data, planner_data, planner_examples
    from coalign.tasks.maths_suite import COMPOSED, generate_suite

    train = generate_suite("train", 30)
    plain, config = load_config("tiny", {"seed": 3}), load_config("tiny", {"seed": 3, "data": {"composed_stories": 40}})
    assert plain.data.composed_stories == 0 and planner_data(plain, train) == planner_data(config, train)[:30]
    stories = generate_suite(COMPOSED, 40, seed=3)
    assert planner_data(config, train)[30:] == [e for t in stories for e in planner_examples(t)]
    assert grounder_data(config, train) == grounder_data(plain, train)
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: 4}\n  composed_stories: -2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "data.composed_stories" in str(err.value) and "line 5" in str(err.value)


def test_a_config_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: x\nrecipe: moat\nnote: caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "line 3" in str(err.value) and "UTF-8" in str(err.value)


def test_a_config_path_that_is_a_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)


def test_a_folder_named_as_a_bundled_config_does_not_hide_it(tmp_path, monkeypatch):
    """`coalign bench smol-suite --run-dir smol-suite`, run again from the same folder: the name is the config."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert load_config("tiny").name == "tiny"


@pytest.mark.parametrize("text", ["[]\n", "false\n", "0\n", "''\n"])
def test_a_falsy_yaml_document_is_not_taken_for_an_empty_config(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"line 1: a config is a mapping of keys, got"):
        load_config(path)


@pytest.mark.parametrize("value", [float("inf"), "inf", "1e400", float("nan")])
def test_a_float_setting_that_is_not_finite_is_refused(value):
    with pytest.raises(ConfigError, match=r"line \d+: field 'planner_sft.epochs': Input should be a finite number"):
        load_config("tiny", {"planner_sft": {"epochs": value}})


def test_source_missing_path_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train:\n    - {kind: gsm8k}\n")
    with pytest.raises(ConfigError, match="needs 'path'"):
        load_config(path)


def test_overrides_apply_on_top():
    config = load_config("tiny", {"planner_sft": {"epochs": 1}})
    assert config.planner_sft.epochs == 1


def test_config_changes_name_dotted_keys_with_old_and_new_values():
    from coalign.config import config_changes

    old = "moat:\n  k: 4\n  critic: execution\ndata:\n  train:\n  - {kind: suite, n: 10}\nseed: 0\n"
    new = "seed: 0\nmoat:\n  k: 8\n  critic: execution\n  tasks: 50\ndata:\n  train:\n  - {kind: suite, n: 20}\n"
    assert config_changes(old, new) == ["moat.k: 4 -> 8", "moat.tasks: <unset> -> 50", "data.train[0].n: 10 -> 20"]
    assert config_changes(old, old.replace("k: 4", "k:    4")) == []


def test_resume_with_a_changed_config_is_refused_unless_forced(tmp_path):
    from coalign.config import config_to_yaml
    from coalign.core.runs import Run
    from coalign.training.setup import record_config

    run = Run(tmp_path)
    first = load_config("tiny")
    record_config(run, first)
    run.mark_done("planner_sft", [])  # made under the first config
    changed = load_config("tiny", {"seed": 3, "moat": {"k": 8}})
    with pytest.raises(SystemExit) as refused:
        record_config(run, changed)
    message = str(refused.value)
    assert "seed: 0 -> 3" in message and "moat.k: 4 -> 8" in message and "--force" in message
    assert (tmp_path / "config.yaml").read_text() == config_to_yaml(first)
    record_config(run, changed, force=True)
    assert (tmp_path / "config.yaml").read_text() == config_to_yaml(changed)
    kept = (tmp_path / "config.history" / "001.yaml").read_text()
    assert kept.startswith("# replaced by a forced resume") and "#   moat.k: 4 -> 8\n" in kept
    assert kept.endswith(config_to_yaml(first))
    record_config(run, first, force=True)
    assert sorted(p.name for p in (tmp_path / "config.history").iterdir()) == ["001.yaml", "002.yaml"]


def test_a_folder_with_no_finished_stage_takes_a_changed_config(tmp_path):
    """A start that failed after saving its config (a bad data row found at loading) is retried with the config
    fixed, without --force: nothing in the folder was made under the old one."""
    from coalign.config import config_to_yaml
    from coalign.core.runs import Run
    from coalign.training.setup import record_config

    run = Run(tmp_path)
    record_config(run, load_config("tiny"))
    fixed = load_config("tiny", {"data": {"skip_bad_rows": True}})
    record_config(run, fixed)
    assert (tmp_path / "config.yaml").read_text() == config_to_yaml(fixed)
    assert not (tmp_path / "config.history").exists()


def test_empty_training_set_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train: []\n")
    with pytest.raises(ConfigError, match=r"line 3: field 'data.train': List should have at least 1 item"):
        load_config(path)


def test_skip_bad_rows_is_off_unless_set():
    assert not load_config("tiny").data.skip_bad_rows
    assert load_config("tiny", {"data": {"skip_bad_rows": True}}).data.skip_bad_rows


def test_k_of_one_is_refused_while_stage1_needs_pairs():
    with pytest.raises(ConfigError, match=r"field 'moat': .*k must be >= 2 when stage1 is on"):
        load_config("tiny", {"moat": {"k": 1}})
    assert load_config("tiny", {"moat": {"k": 1, "stage1": False}}).moat.k == 1


def test_a_ppl_gap_over_summed_nll_is_refused():
    with pytest.raises(ConfigError, match=r"field 'moat': .*pair_gap_on 'ppl' needs a per-token score"):
        load_config("tiny", {"moat": {"score_reduction": "sum", "pair_gap_on": "ppl"}})
    assert load_config("tiny", {"moat": {"score_reduction": "sum"}}).moat.pair_gap_on == "nll"


LLM = {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}


@pytest.mark.parametrize(
    ("options", "critic", "problem"),
    [
        ({**LLM, "api_key": "sk-live-123"}, "llm", "critic_options.api_key: a secret in the config"),
        ({**LLM, "Authorization": "Bearer x"}, "llm", "critic_options.Authorization: a secret"),
        ({**LLM, "base_url": "https://user:sk-live-123@api.example.com/v1"}, "llm", "must not hold credentials"),
        ({**LLM, "base_url": "https://api.example.com/v1?key=sk-live-123"}, "llm", "must not hold credentials"),
        ({**LLM, "max_call": 3}, "llm", r"unknown llm critic option\(s\) \['max_call'\]"),
        ({"base_url": "http://x"}, "llm", "missing 1 required positional argument: 'model'"),
        (LLM, "execution", "critic_options apply to critic 'llm' only"),
    ],
)
def test_critic_options_that_leak_a_secret_or_do_not_fit_are_refused(options, critic, problem):
    with pytest.raises(ConfigError, match=problem) as err:
        load_config("tiny", {"moat": {"critic": critic, "critic_options": options}})
    assert "sk-live-123" not in str(err.value)


def test_llm_critic_options_that_fit_are_accepted():
    options = {**LLM, "api_key_env": "MY_KEY", "max_calls": 100, "max_seconds": 600, "timeout_s": 30}
    assert load_config("tiny", {"moat": {"critic": "llm", "critic_options": options}}).moat.critic_options == options


def test_recipe_names_come_from_the_registry():
    from coalign.registry import REGISTRY, load_config

    for name in REGISTRY:
        assert load_config("tiny", {"recipe": name}).recipe == name
    with pytest.raises(ConfigError, match=r"field 'recipe': .*unknown recipe 'pilot'; known: lumos, moat"):
        load_config("tiny", {"recipe": "pilot"})


def test_grpo_stages_come_from_the_curriculum(tmp_path):
    """The config sits below PilotRL, which defines the stages: the registry's loader hands them in, and a stage
    it does not know, or one of the other mode, is refused naming the file, line and field."""
    from coalign.registry import load_config

    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nrecipe: pilotrl\npilotrl:\n  rl:\n    order: [executor, four]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}, line 4: field 'pilotrl.rl': Value error, unknown GRPO stage 'four'; "
        "the stages are executor, planner, joint, all, vanilla, planner_isolated"
    )
    path.write_text("name: x\nrecipe: pilotrl\npilotrl:\n  rl:\n    order: [vanilla]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}, line 3: field 'pilotrl': Value error, GRPO stage 'vanilla' runs react episodes, not pilotrl.mode "
        "adaplan: set pilotrl.rl: null (the SFT alone) or a pilotrl.rl.order of adaplan stages (executor, planner, "
        "joint, all, planner_isolated)"
    )
    assert load_config(path, {"pilotrl": {"mode": "react"}}).pilotrl.rl.order == ["vanilla"]


def test_a_bounded_pilotrl_context_is_read_and_refused_beside_a_kl_term():
    """`pilotrl.history` bounds SFT episodes, evaluation and GRPO's rollouts; the KL term's reference log-probs
    are not computed per turn, so a bounded context with rl.beta > 0 is refused with what to set."""
    from coalign.config import GRPOSettings, PilotRLSettings
    from coalign.pilotrl.recipe import training_episodes

    settings = PilotRLSettings(history=0, heldin=["crafting"], train_tasks=2)
    rows = training_episodes(settings, seed=0)
    assert [r["turn"] for r in rows if r["seed"] == 0] == list(range(sum(r["seed"] == 0 for r in rows)))
    assert all(len(r["messages"]) == 2 for r in rows) and len(rows) > 2
    assert "history" not in PilotRLSettings().model_dump()  # run folders from before it still match
    assert PilotRLSettings(history=1, rl=GRPOSettings()).rl.beta == 0
    with pytest.raises(ValueError, match="rl.beta: 0"):
        PilotRLSettings(history=1, rl=GRPOSettings(beta=0.1))


def test_critic_subgoals_is_saved_only_when_corrected_and_replaces_a_key_old_run_folders_hold(tmp_path):
    import yaml

    from coalign.config import config_to_yaml
    from coalign.core.runs import Run
    from coalign.training.setup import record_config

    today = load_config("tiny")
    assert today.moat.critic_subgoals == "original" and "critic_subgoals" not in config_to_yaml(today)
    corrected = load_config("tiny", {"moat": {"critic_subgoals": "corrected"}})
    assert yaml.safe_load(config_to_yaml(corrected))["moat"]["critic_subgoals"] == "corrected"
    old = yaml.safe_load(config_to_yaml(today))
    old["moat"]["use_corrected_subgoals"] = False  # as every run folder saved its config before the setting
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert load_config(tmp_path / "old.yaml") == today
    run = Run(tmp_path / "run")
    run.path("config.yaml").write_text((tmp_path / "old.yaml").read_text())
    run.mark_done("planner_sft", [])  # made under the old config
    record_config(run, today)  # resumes: no SystemExit
    assert run.path("config.yaml").read_text() == config_to_yaml(today)
    with pytest.raises(SystemExit, match=r"moat.critic_subgoals: <unset> -> corrected"):
        record_config(run, corrected)
    with pytest.raises(ConfigError, match=r"use_corrected_subgoals is now critic_subgoals"):
        load_config("tiny", {"moat": {"use_corrected_subgoals": True}})
    with pytest.raises(ConfigError, match=r"moat.critic_subgoals"):
        load_config("tiny", {"moat": {"critic_subgoals": "gold"}})


def test_the_dpo_sweep_settings_are_saved_only_when_set_so_old_run_folders_resume():
    import yaml

    from coalign.config import config_to_yaml

    saved = yaml.safe_load(config_to_yaml(load_config("tiny")))["moat"]
    assert "pairs_per_task" not in saved and "dpo_held_aside" not in saved
    swept = load_config("tiny", {"moat": {"k": 4, "pairs_per_task": 2, "dpo_held_aside": 0.25}})
    saved = yaml.safe_load(config_to_yaml(swept))["moat"]
    assert (saved["pairs_per_task"], saved["dpo_held_aside"]) == (2, 0.25)
    with pytest.raises(ConfigError, match="pairs_per_task 3 needs k >= 6"):
        load_config("tiny", {"moat": {"k": 4, "pairs_per_task": 3}})
    with pytest.raises(ConfigError, match="moat.dpo_held_aside"):
        load_config("tiny", {"moat": {"dpo_held_aside": 1}})
