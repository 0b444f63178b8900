"""`pip install` into this interpreter's environment, run by uv with pip's own index settings.

`make install` spent about 90 s in pip's resolver and unzipping (vLLM's CPU build alone, 46 s), uv about 40 s.
uv reads neither pip.conf nor PIP_* variables, so the settings `pip config list` shows (its files and the
environment, e.g. a local wheel folder holding the CPU build of torch, an index mirror, a constraints file, a
proxy's certificate) are handed to it here: both resolve against the same places. Run it with the venv's python:
`python scripts/pip_install.py [uv pip install options] requirement...`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip's options and uv's names for them; a list option's values are separated by whitespace in pip's config
LISTS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
# where pip reads an option, weakest first: the [global] section, the [install] section, a PIP_* variable
SECTIONS = ("global", "install", ":env:")


def pip_settings(listing: str) -> dict[str, str]:
    """The install command's settings from `pip config list` output (`section.key='value'` lines)."""
    found: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        section, dot, key = name.rpartition(".")
        if sep and dot and section in SECTIONS:
            found.setdefault(key, {})[section] = ast.literal_eval(value)
    return {key: by[max(by, key=SECTIONS.index)] for key, by in found.items()}


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's arguments and environment for pip's settings: the best version over all indexes (pip's rule, not uv's
    first index that has the package), and pip's certificate bundle for TLS."""
    args = ["--index-strategy", "unsafe-best-match"]
    for key, option in LISTS.items():
        for value in settings.get(key, "").split():
            args += [option, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    env = {"SSL_CERT_FILE": settings["cert"]} if "cert" in settings else {}
    return args, env


def main(argv: list[str]) -> int:
    from uv import find_uv_bin  # installed into this venv by `make install` first

    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    args, env = uv_options(pip_settings(listing))
    command = [find_uv_bin(), "pip", "install", "--python", sys.executable, *args, *argv]
    return subprocess.run(command, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
