"""`coalign pretrain` end to end on a miniature base, its sittings, and shipped bases by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import ConfigError
from coalign.core.console import make_console
from coalign.core.errors import RunError
from coalign.core.runs import file_sha256
from coalign.models import bases
from coalign.models.load import load_tokenizer, train_tokenizer
from coalign.pretraining.pretrain import pretrain
from coalign.pretraining.settings import load_pretrain_config

CONSOLE = make_console()


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pretrain") / "mini"
    pretrain(load_pretrain_config("mini"), folder, CONSOLE)
    return folder


def test_mini_base_pretrains_end_to_end(mini_run: Path) -> None:
    config = load_pretrain_config("mini")
    progress = json.loads((mini_run / "progress.json").read_text())
    assert progress["steps"] == config.train.max_steps
    assert progress["tokens_seen"] == config.train.max_steps * config.train.batch_size * config.train.seq_len
    history = json.loads(
        (mini_run / "trainer" / f"checkpoint-{config.train.max_steps}" / "trainer_state.json").read_text()
    )
    losses = [row["loss"] for row in history["log_history"] if "loss" in row]
    assert losses[-1] < losses[0]  # it learned something, even in 12 steps
    assert {"eval_copy_loss", "eval_mixed_loss"} <= set(progress["losses"])
    assert (mini_run / "loss.png").stat().st_size > 0
    recipe = json.loads((mini_run / "base" / "recipe.json").read_text())
    assert recipe["parameters"] > 0 and recipe["corpus"]["documents"] >= config.corpus.documents
    bases.verify_base(mini_run / "base")


def test_sittings_add_up_to_one_run(mini_run: Path, tmp_path: Path) -> None:
    """Two sittings (5 steps, then the rest) end on the same weights, byte for byte, as one."""
    config = load_pretrain_config("mini")
    first = pretrain(config, tmp_path / "split", CONSOLE, steps=5)
    assert first["steps"] == 5 and not (tmp_path / "split" / "base").exists()
    last = pretrain(config, tmp_path / "split", CONSOLE)
    assert [(s["from"], s["to"]) for s in last["sittings"]] == [(0, 5), (5, config.train.max_steps)]
    weights = "base/model.safetensors"
    assert file_sha256(tmp_path / "split" / weights) == file_sha256(mini_run / weights)


def test_a_base_continues_from_another(mini_run: Path, tmp_path: Path) -> None:
    """`init_from` starts from the parent's weights and tokenizer (no new tokenizer, no random init), on a
    corpus of its own seed, and the recipe chains the parent's hashes and the tokens seen in all."""
    from coalign.models.load import load_model

    config = load_pretrain_config(
        "mini", {"init_from": str(mini_run), "model": None, "seed": 1, "train": {"max_steps": 4}}
    )
    pretrain(config, tmp_path / "more", CONSOLE)
    init, parent = tmp_path / "more" / "models" / "init", mini_run / "base"
    assert (init / "tokenizer.json").read_text() == (parent / "tokenizer.json").read_text()
    start, before = load_model(init).state_dict(), load_model(parent).state_dict()
    assert all(start[k].equal(before[k]) for k in before)
    recipe = json.loads((tmp_path / "more" / "base" / "recipe.json").read_text())
    first = json.loads((parent / "recipe.json").read_text())
    assert recipe["init_from"]["files_sha256"] == first["files_sha256"]
    assert recipe["tokens_seen_in_all"] == recipe["tokens_seen"] + first["tokens_seen"]
    assert recipe["corpus"]["seed"] == 1
    bases.verify_base(tmp_path / "more" / "base")
    with pytest.raises(RunError, match="neither a shipped base"):
        bases.finished_base(tmp_path / "nowhere")


def test_a_run_folder_refuses_another_config(mini_run: Path) -> None:
    with pytest.raises(SystemExit, match="different pretraining config"):
        pretrain(load_pretrain_config("mini", {"train": {"learning_rate": 1.0}}), mini_run, CONSOLE)


def test_digits_are_single_tokens_in_the_base_tokenizer(mini_run: Path) -> None:
    tokenizer = load_tokenizer(mini_run / "base")
    assert tokenizer.tokenize("90817") == list("90817")
    assert tokenizer.decode(tokenizer("R1 = Calculator(4067 * 12)")["input_ids"]) == "R1 = Calculator(4067 * 12)"
    scratch = train_tokenizer(["x 4067 y"] * 20, 300)
    assert "4067" in scratch.tokenize("4067")  # from-scratch runs keep whole numbers as before


def test_split_words_makes_a_copied_word_the_same_tokens_wherever_it_stands() -> None:
    texts = ["Thought: get 2 wood log for the plank\nAction: get 2 wood log\n"] * 30 + ["the wood log is here"] * 30
    crossing, split = train_tokenizer(texts, 320, digits=True), train_tokenizer(texts, 320, digits=True, words=True)

    def tokens_of(tokenizer, text: str, start: int, length: int) -> list[str]:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        pieces = zip(encoded.input_ids, encoded.offset_mapping)
        return [i for i, (a, b) in pieces if a < start + length and b > start]

    text = texts[0]
    inside, at_end = text.find("wood log"), text.rfind("wood log")
    assert tokens_of(split, text, inside, 8) == tokens_of(split, text, at_end, 8)
    assert tokens_of(crossing, text, inside, 8) != tokens_of(crossing, text, at_end, 8)
    assert not any(" " in t.replace("Ġ", " ").strip(" ") for t in split.convert_ids_to_tokens(split(text).input_ids))
    assert split.decode(split(text).input_ids) == text


@pytest.mark.parametrize(
    ("line", "named"), [("split_words: true", "split_words"), ("model: {hidden_size: 64}", "model")]
)
def test_a_continued_base_keeps_its_parents_tokenizer_and_shape(tmp_path: Path, line: str, named: str) -> None:
    path = tmp_path / "more.yaml"
    path.write_text(f"name: x\ninit_from: coalign-base-2\n{line}\n")
    with pytest.raises(ConfigError, match=named):
        load_pretrain_config(path)
    path.write_text("name: x\ninit_from: coalign-base-2\n")
    assert load_pretrain_config(path).model is None
    path.write_text("name: x\n")
    assert load_pretrain_config(path).model is not None  # a new base's default shape


def test_bad_pretraining_config_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntrain:\n  seq_len: 64\n  max_step: 3\n")
    with pytest.raises(ConfigError, match=r"bad.yaml, line 4: field 'train.max_step': unknown key"):
        load_pretrain_config(path)
    with pytest.raises(ConfigError, match="no bundled pretraining config"):
        load_pretrain_config("no-such-base")


def test_shipping_and_finding_a_base_by_name(mini_run: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bases, "BASES", tmp_path / "bases")
    assert bases.starting_point("scratch") is None and bases.starting_point("tiny") is None
    assert bases.starting_point("mini") == "mini"  # not shipped: a path or hub id, as given
    shipped = bases.ship_base(mini_run / "base", "mini")
    assert bases.shipped_bases() == ["mini"]
    assert bases.starting_point("mini") == str(shipped)
    (shipped / "model.safetensors").write_bytes(b"tampered")
    with pytest.raises(RunError, match="does not match the sha256"):
        bases.starting_point("mini")


def test_a_missing_model_folder_is_named_while_a_hub_id_passes_as_given(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "no-such-model"), "./runs/x/checkpoints/sft", "a/b/c", "~/nothing-here"):
        with pytest.raises(RunError, match="no such model folder"):
            bases.starting_point(missing)
    assert bases.starting_point("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert bases.starting_point(str(tmp_path)) == str(tmp_path)


def test_shipping_refuses_unfinished_and_oversized_bases(mini_run: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bases, "BASES", tmp_path / "bases")
    with pytest.raises(RunError, match="not a finished base"):
        bases.ship_base(mini_run / "models" / "init", "mini")
    monkeypatch.setattr(bases, "MAX_BYTES", 1000)
    with pytest.raises(RunError, match="a shipped base is at most"):
        bases.ship_base(mini_run / "base", "mini")
    assert not (tmp_path / "bases" / "mini").exists()


def test_cli_pretrains_in_sittings(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["pretrain", "mini", "--run-dir", str(tmp_path / "r"), "--steps", "4"])
    assert first.exit_code == 0, first.output
    assert "step 4 of 12" in first.output
    bad = runner.invoke(app, ["pretrain", "mini", "--run-dir", str(tmp_path / "r"), "--set", "train.seq_len=2"])
    assert bad.exit_code == 2 and "train.seq_len" in bad.output


def test_the_corpus_contamination_check_is_run_and_recorded(mini_run: Path) -> None:
    report = json.loads((mini_run / "corpus" / "leakage.json").read_text())
    assert report["verbatim"]["n"] == 13 and report["skeleton"]["n"] == 8
    assert {"suite-heldout:question", "qa-suite-heldout:question"} <= set(report["verbatim"]["sets"])
    recorded = json.loads((mini_run / "base" / "recipe.json").read_text())["leakage"]
    assert recorded["verbatim"]["leaked"] == 0 and recorded["skeleton"]["leaked"] == 0
    assert recorded["verbatim"]["checked"] > 0


@pytest.mark.parametrize("name", ["coalign-base", "coalign-base-2", "coalign-base-4"])
def test_the_shipped_bases_are_whole_small_and_their_recipes_hold(name: str) -> None:
    from coalign.models.load import load_model

    folder = Path(bases.starting_point(name))  # checks every file against the recipe's sha256
    assert sum(f.stat().st_size for f in folder.iterdir()) <= bases.MAX_BYTES
    recipe = json.loads((folder / "recipe.json").read_text())
    config = load_pretrain_config(folder / "pretrain.yaml")
    assert recipe["steps"] == config.train.max_steps and recipe["corpus"]["seed"] == config.seed
    assert recipe["leakage"]["verbatim"]["sets_with_leaks"].keys() <= {"gsm8k-test:question"}  # GSM8K's own
    assert recipe["leakage"]["skeleton"]["leaked"] == 0
    shape = json.loads((folder / "config.json").read_text())
    assert (config.model is None) == bool(config.init_from)  # a continued base claims no shape of its own
    if config.model is not None:  # a base made from scratch records the shape it trained
        trained = (shape["hidden_size"], shape["num_attention_heads"])
        assert (config.model.hidden_size, config.model.num_heads) == trained
    if config.init_from:  # continued from another base: its tokens counted, and a shipped one's bytes checked
        parent = recipe["init_from"]
        assert recipe["tokens_seen_in_all"] == recipe["tokens_seen"] + parent["tokens_seen_in_all"]
        if bases.base_path(config.init_from):
            shipped = json.loads((Path(bases.starting_point(config.init_from)) / "recipe.json").read_text())
            assert parent["files_sha256"] == shipped["files_sha256"]
            assert parent["tokens_seen_in_all"] == shipped.get("tokens_seen_in_all", shipped["tokens_seen"])
    tokenizer = load_tokenizer(folder)
    assert tokenizer.tokenize("2026") == list("2026")
    model = load_model(folder)
    ids = tokenizer("Copy: 41 7 Dravo\nCopy:", return_tensors="pt")
    assert model.generate(**ids, max_new_tokens=4, do_sample=False).shape[1] > ids["input_ids"].shape[1]


def test_the_bundled_configs_start_from_shipped_bases() -> None:
    from coalign.config import BUNDLED, load_config

    assert {"coalign-base", "coalign-base-2", "coalign-base-4"} <= set(bases.shipped_bases())
    for path in sorted(BUNDLED.glob("tiny*.yaml")):
        run = load_config(path.stem)
        starts = [run.pilotrl.model] if run.recipe == "pilotrl" else [run.models.planner, run.models.grounder]
        assert set(starts) <= {"coalign-base-2", "coalign-base-4"}, path.name
    tiny = load_config("tiny").models  # the maths team: base-2 plans better, base-4 copies subgoals better
    assert (tiny.planner, tiny.grounder) == ("coalign-base-2", "coalign-base-4")


def test_models_can_name_one_start_for_both_agents(tmp_path: Path) -> None:
    from coalign.config import load_config

    path = tmp_path / "both.yaml"
    path.write_text("name: both\nrecipe: pilotrl\nmodels: scratch\n")
    models = load_config(path).models
    assert (models.planner, models.grounder) == ("scratch", "scratch")
    split = load_config("tiny", {"models": {"planner": "scratch"}}).models
    assert (split.planner, split.grounder) == ("scratch", "coalign-base-4")
