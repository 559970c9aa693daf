"""Bench inputs: prompts and made-up voices (the random full-size models live in `tts_core.tiny`)."""

from __future__ import annotations

import numpy as np

from tts_core.tiny import build_random_models, save_random_checkpoint

__all__ = ["build_random_models", "make_prompt", "save_random_checkpoint", "voice_codes"]


def make_prompt(lm_config, rows: int, seed: int = 0) -> np.ndarray:
    """A voice-clone-shaped prompt of `rows` rows: 78 template rows, reference frames, text ids
    (for driving a `Runner` directly; the bench itself builds prompts through the Synthesizer)."""
    rng = np.random.default_rng(seed)
    ref_frames = max(1, (rows - 78) * 3 // 4)
    head = np.full((14, 17), 1024, np.int64)
    head[:, 0] = rng.integers(20, 16000, 14)
    head[-1, 0] = lm_config.audio_start_id
    ref = np.concatenate([np.full((ref_frames, 1), lm_config.audio_user_slot_id),
                          rng.integers(0, 1024, (ref_frames, 16))], axis=1)
    tail = np.full((rows - 14 - ref_frames, 17), 1024, np.int64)
    tail[:, 0] = rng.integers(20, 16000, len(tail))
    tail[0, 0] = lm_config.audio_end_id
    tail[-1, 0] = lm_config.audio_start_id
    return np.concatenate([head, ref, tail]).astype(np.int64)


def voice_codes(num_frames: int, seed: int) -> np.ndarray:
    """Reference-audio codes [num_frames, 16] of a made-up voice: a new seed is a new voice."""
    return np.random.default_rng(seed).integers(0, 1024, (num_frames, 16), dtype=np.int64)
