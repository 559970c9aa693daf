"""Is this a ZeroGPU Space? (No torch here: the web server asks before it imports the engine.)"""

from __future__ import annotations

from tts_core.env import env_str

ZEROGPU_ENV = "SPACES_ZERO_GPU"  # set by Hugging Face on ZeroGPU hardware (read by `spaces` too)


def on_zerogpu_space() -> bool:
    """True on ZeroGPU hardware, spelled as the `spaces` package reads the variable (1/t/true)."""
    return (env_str(ZEROGPU_ENV) or "").lower() in ("1", "t", "true", "yes", "on")
