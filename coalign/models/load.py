"""Causal LMs at the edges: load any Hugging Face model, or make a tiny one from scratch.

Every later step loads a checkpoint folder with the same Auto classes, whether it holds a
7B hub model or the tiny model made here, so nothing downstream knows the difference.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from peft import PeftModel
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BitsAndBytesConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from coalign.config import TinySpec
from coalign.core.errors import RunError
from coalign.formats.lumos import ASSISTANT_TAG, EOS, LUMOS_SPECIALS, USER_TAG, lumos_generation_prompt, plain_text
from coalign.formats.lumos_iterative import chat_prompt
from coalign.models.bases import starting_point

SPECIAL_TOKENS = ["<unk>", "<s>", EOS, "<pad>", USER_TAG.strip(), ASSISTANT_TAG.strip()]
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
ADAPTER_CONFIG = "adapter_config.json"


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, digits: bool = False, words: bool = False
) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the given texts, merging across spaces (unless `words`), numbers kept apart.

    Byte level means any input (unicode, NUL bytes) encodes. Merges may cross spaces, so
    text repeated across the corpus (the tool preamble, "to find how many") becomes a few
    tokens: sequences are about 4x shorter than with word-level pre-tokenization, which makes
    training on a CPU fast and attention easy to learn. Each run of digits and each newline
    is its own pre-token, so a number is the same token wherever it stands (` 27`, `(27`) and
    copying an operand into an action is a one-token lookup; a prompt ending in a newline
    never merges with the completion after it.

    `digits`: every digit its own token, as Llama and Qwen split them, so that no number is ever an unseen
    token: the pretrained base's tokenizer (a from-scratch run sees all its numbers in training anyway).

    `words`: no merge crosses a word boundary (GPT-2's split, as Llama's and Qwen's tokenizers do: a word
    with the space before it, a run of punctuation), so a word is the same tokens wherever it stands. Across
    spaces, `wood log` inside a sentence and at the end of a line are different tokens, and an agent that
    copies a plan step into its action must copy across that difference (`benchmarks/token_identity.py`).
    """
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d|\n" if digits else r"\d+|\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=words),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token=EOS,
        pad_token="<pad>",
        additional_special_tokens=SPECIAL_TOKENS[4:],
        clean_up_tokenization_spaces=False,
    )


def llama_sizes(spec: TinySpec) -> dict:
    """LlamaConfig's names for the sizes of `spec` but its vocabulary (its tokenizer's)."""
    return {
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": spec.max_positions,
    }


def llama_parameters(shape: dict) -> int:
    """Parameters of a Llama-shaped model from its config's sizes (transformers' names): embeddings (and an untied
    head), each layer's attention and gated MLP; norms left out (a fraction of a per cent)."""
    hidden, layers = int(shape["hidden_size"]), int(shape["num_hidden_layers"])
    heads = int(shape["num_attention_heads"])
    head = int(shape.get("head_dim") or hidden // heads)
    kv = int(shape.get("num_key_value_heads") or heads) * head
    embeddings = int(shape["vocab_size"]) * hidden * (1 if shape.get("tie_word_embeddings", True) else 2)
    mlp = 3 * hidden * int(shape["intermediate_size"])
    return embeddings + layers * (2 * hidden * heads * head + 2 * hidden * kv + mlp)


def make_tiny_model(
    texts: Iterable[str],
    out_dir: str | Path,
    spec: TinySpec = TinySpec(),
    seed: int = 0,
    digits: bool = False,
    words: bool = False,
) -> Path:
    """Train a tokenizer on `texts` (`digits`, `words`: see `train_tokenizer`), initialise a small Llama, save both."""
    tokenizer = train_tokenizer(texts, spec.vocab_size, digits, words)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        **llama_sizes(spec),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def model_source(path_or_id: str | Path) -> str:
    """What transformers loads for `path_or_id`: a local folder as it is, else the name resolved as every command
    resolves one (`bases.starting_point`: a shipped base's folder, or a hub id found in the cache or on the hub
    in one request), so a missing folder or an unreachable hub is one clear RunError, never a retry storm."""
    folder = Path(path_or_id).expanduser()
    if folder.is_dir():
        return str(folder)
    return str(starting_point(str(path_or_id), scratch=False, look_up=True))


def load_tokenizer(path_or_id: str | Path, trust_remote_code: bool = False):
    """Tokenizer padded on the left (batched generation) with a pad token guaranteed."""
    tokenizer = AutoTokenizer.from_pretrained(model_source(path_or_id), trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def longest_in_tokens(tokenizer, texts: Iterable[str]) -> int:
    """Tokens of the longest of `texts`, special tokens not added (0 for none): what a generation limit must hold."""
    return max((len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts), default=0)


def check_safetensors(path_or_id: str | Path) -> None:
    """RunError for a local folder without safetensors weights, naming any pickle weights it holds.

    Unpickling a checkpoint can run any code it carries, so coalign never loads one; transformers
    would refuse too (`use_safetensors=True`), but without saying why or what to do.
    """
    folder = Path(path_or_id)
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for pattern in PICKLE_WEIGHTS for p in folder.glob(pattern))
    found = f"only pickle weights ({', '.join(pickles)})" if pickles else "no safetensors weights"
    raise RunError(
        f"{folder} holds {found}. coalign loads safetensors only, since unpickling a file can run code it "
        "carries; convert weights you trust with save_pretrained(folder, safe_serialization=True)"
    )


def is_adapter(path_or_id: str | Path) -> bool:
    """A LoRA stage's checkpoint saved with `lora.merge: false`: an adapter over the base it names."""
    return (Path(path_or_id) / ADAPTER_CONFIG).is_file()


def adapter_base(folder: str | Path) -> str:
    """The base an adapter folder names. A local base is recorded relative to the adapter (see
    `training.save_adapter`), so a moved run folder still loads; a hub id or absolute path stands as it is."""
    base = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    local = Path(folder) / base
    if local.is_dir():
        return str(local.resolve())
    if base.startswith("."):  # ours, and not there: a hub id never starts so
        raise RunError(f"{folder} is a LoRA adapter whose base model {base} (relative to it) is missing")
    return base


def load_model(
    path_or_id: str | Path,
    trust_remote_code: bool = False,
    dtype: str = "auto",
    quantize: bool = False,
    trainable_adapter: bool = False,
):
    """Any causal LM from a local folder or a hub id; safetensors weights only (no pickle), and the model's
    own Python code only when `trust_remote_code` (the config's `models.trust_remote_code`, off by default).

    An adapter folder (`is_adapter`) loads as its base with the adapter merged in, a plain model like any
    other (generation, scoring, full fine-tuning), or with `trainable_adapter` as a PEFT model whose adapter
    trains on. `quantize`: the base's linear layers in 4 bits (NF4 with bf16 compute, QLoRA's recipe)."""
    path_or_id = model_source(path_or_id)
    check_safetensors(path_or_id)
    if is_adapter(path_or_id):
        base = load_model(adapter_base(path_or_id), trust_remote_code, dtype, quantize)
        model = PeftModel.from_pretrained(base, str(path_or_id), is_trainable=trainable_adapter)
        return model if trainable_adapter else model.merge_and_unload()
    four_bit = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
    )
    model = AutoModelForCausalLM.from_pretrained(
        path_or_id,
        trust_remote_code=trust_remote_code,
        dtype=dtype,
        use_safetensors=True,
        **({"quantization_config": four_bit} if quantize else {}),
    )
    model.eval()
    return model


def inference_device() -> torch.device:
    """Where a loaded model generates and scores: this process's GPU when there is one (each process of a
    multi-process run has its own, `LOCAL_RANK`), else the CPU. The trainers place the models they train."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def special_strings(tokenizer) -> frozenset[str]:
    """Spellings that text in this tokenizer's prompts must not hold: its special tokens (its own and its
    added special ones, e.g. a chat template's `<|im_end|>`), and Lumos's tags where the prompts are in
    Lumos's format (no chat template; with one, text such as `<|user|>` is no control token and stays)."""
    added = [t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special]
    lumos = () if getattr(tokenizer, "chat_template", None) else LUMOS_SPECIALS
    return frozenset([*getattr(tokenizer, "all_special_tokens", ()), *added, *lumos])


def as_text(tokenizer, text: str) -> str:
    """`text` (a task, an observation, a model's output) as it goes into this tokenizer's prompts: with no
    spelling of a special token left in it (`formats.lumos.plain_text`)."""
    return plain_text(text, special_strings(tokenizer))


def messages_as_text(tokenizer, messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """`messages` with every content `as_text`, the tokenizer's special spellings looked up once."""
    specials = special_strings(tokenizer)
    return [{**m, "content": plain_text(m["content"], specials)} for m in messages]


def render_prompt(tokenizer, user: str | Sequence[dict[str, str]]) -> str:
    """The text a model continues from: its chat template when it has one, else Lumos's format.

    `user` is one user turn, or a conversation so far (role/content messages ending with a user turn:
    Lumos's iterative formulation), rendered the same way for training and for generation. Every turn's
    content goes in as text (`as_text`): a task that spells `</s>` gets no end-of-turn token from it.
    """
    messages = [{"role": "user", "content": user}] if isinstance(user, str) else list(user)
    messages = messages_as_text(tokenizer, messages)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return lumos_generation_prompt(messages[0]["content"]) if isinstance(user, str) else chat_prompt(messages)


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
