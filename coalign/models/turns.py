"""A multi-turn conversation as token ids built by appending turns, with a mask of the model's own tokens.

Training and rollouts of an agent that acts in an environment see one long conversation: the task, then
model turns and observations in turn. Observations are attended to but never trained on, so each token
carries a flag: 1 on the model's turns (its text and the end-of-turn token), 0 on everything the
environment or the prompt wrote. Ids are built turn by turn, never by re-tokenizing the whole history:
a chat template need not render a conversation as the concatenation of its turns, and a rollout must
train on exactly the tokens it generated.

Without a chat template a conversation is Lumos's serialisation (`formats.lumos.lumos_chat`): the user turn
`<|user|>\\n{text}\\n<|assistant|>\\n`, the model's `{text}</s>`, a later user turn `\\n<|user|>...`; the
segments concatenate to `formats.lumos_iterative.chat_prompt` exactly. With a chat template each turn is the
text the template adds for it, which must extend what it rendered before (checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coalign.formats.lumos import ASSISTANT_TAG, EOS, USER_TAG, FormatError
from coalign.models.load import messages_as_text

Message = dict[str, str]


@dataclass(frozen=True)
class Segment:
    text: str
    trainable: bool


def _lumos_segments(messages: Sequence[Message]) -> list[Segment]:
    out = []
    for i, message in enumerate(messages):
        if message["role"] == "user":
            lead = "" if i == 0 else "\n"
            out.append(Segment(f"{lead}{USER_TAG}{message['content']}\n{ASSISTANT_TAG}", False))
        else:
            out.append(Segment(f"{message['content']}{EOS}", True))
    return out


def _template_segments(tokenizer, messages: Sequence[Message]) -> list[Segment]:
    out, before = [], ""
    for i, message in enumerate(messages):
        user = message["role"] == "user"
        text = tokenizer.apply_chat_template(list(messages[: i + 1]), tokenize=False, add_generation_prompt=user)
        if not text.startswith(before):
            raise FormatError(
                f"the chat template does not render turn {i + 1} as an extension of the turns before it; "
                "coalign builds multi-turn ids by appending turns and cannot use this template"
            )
        out.append(Segment(text[len(before) :], not user))
        before = text
    return out


def segments(tokenizer, messages: Sequence[Message]) -> list[Segment]:
    """The conversation's text, turn by turn, with which parts the model wrote. A conversation ending on a
    user turn ends with the prompt for the model's next turn. Contents go in as text
    (`load.messages_as_text`)."""
    roles = [m["role"] for m in messages]
    if not roles or roles[0] != "user" or any(a == b for a, b in zip(roles, roles[1:])):
        raise FormatError(f"a conversation starts with a user turn and alternates, got roles {roles}")
    messages = messages_as_text(tokenizer, messages)
    if getattr(tokenizer, "chat_template", None):
        return _template_segments(tokenizer, messages)
    return _lumos_segments(messages)


def encode_segment(tokenizer, text: str, first: bool) -> list[int]:
    """Ids of one segment; the tokenizer's own special tokens (a BOS) only before the first."""
    return tokenizer(text, add_special_tokens=first)["input_ids"]


def encode(tokenizer, messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """(input ids, mask) of a conversation: the mask is 1 on the tokens of the model's turns."""
    ids: list[int] = []
    mask: list[int] = []
    for i, segment in enumerate(segments(tokenizer, messages)):
        piece = encode_segment(tokenizer, segment.text, first=i == 0)
        ids += piece
        mask += [int(segment.trainable)] * len(piece)
    return ids, mask
