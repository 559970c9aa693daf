"""The one reader of environment variables: flags, numbers, strings (used by app, CLI, engine).

Every boolean variable accepts the same spellings, case-insensitive: 1/true/yes/on and
0/false/no/off (empty or unset = the default). Anything else is an error that names the variable,
so a typo such as `MOSS_TTS_ENFORCE_EAGER=ture` fails loudly instead of being read as "off".
"""

from __future__ import annotations

import os

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_flag(name: str, value: str | None, default: bool = False) -> bool:
    """The boolean meaning of `value` (the text of variable `name`)."""
    word = (value or "").strip().lower()
    if not word:
        return default
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{name}={value!r} is not a yes/no value: use 1/true/yes/on or 0/false/no/off")


def env_flag(name: str, default: bool = False) -> bool:
    """A yes/no environment variable (see the module doc for the spellings)."""
    return parse_flag(name, os.environ.get(name), default)


def env_str(name: str, default: str | None = None) -> str | None:
    """A string variable; empty counts as unset."""
    value = os.environ.get(name, "").strip()
    return value or default


def env_int(name: str, default: int | None = None) -> int | None:
    value = env_str(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def env_float(name: str, default: float | None = None) -> float | None:
    value = env_str(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None
