"""Model text as one environment action: every text environment and AdaPlan's turn parser read actions so.

Model text is untrusted input: it is cut and squeezed here, before any environment parses it.
"""

from __future__ import annotations

MAX_ACTION_CHARS = 2000  # longer model text is cut before parsing: no environment needs more


def clean_action(text: str) -> str:
    """Model text as an action: the first non-empty line, cut to MAX_ACTION_CHARS, whitespace squeezed,
    control characters dropped."""
    text = str(text)[:MAX_ACTION_CHARS]
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = "".join(ch for ch in line if ch.isprintable())
    return " ".join(line.split())
