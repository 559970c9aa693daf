"""The clone tab's "Clip check": the clip doctor's verdict, the chosen window drawn on the clip's
waveform, and the window the clone will use (which the visitor may change).

An upload or recording is analysed once (`clip_report.check`); what redraws needs only the small
`ClipView` kept in a `gr.State` (the waveform's outline, the figures), never the audio again.
The clone itself is cut to the window in `requests.form_body` (`PageForm.ref_window`).
"""

from __future__ import annotations

import html
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tts_core.errors import TTSError

from ..api.clip_report import check
from ..errors import scrub_paths
from .indicators import mark

WAVE_POINTS = 240  # columns of the drawn waveform
WAVE_WIDTH, WAVE_HEIGHT = 480, 64


@dataclass(frozen=True, slots=True)
class ClipView:
    """What the "Clip check" region shows about one clip."""

    duration_s: float
    outline: tuple[float, ...]  # peak |amplitude| per column, 0..1
    analysis: dict  # ClipAnalysis.as_dict()


def outline(wav: np.ndarray, points: int = WAVE_POINTS) -> tuple[float, ...]:
    """The peak magnitude of `wav` [C, n] in `points` equal columns, scaled to the loudest column."""
    mono = np.abs(wav).max(axis=0)
    edges = np.linspace(0, len(mono), points + 1).astype(int)
    peaks = np.array([mono[a:b].max() if b > a else 0.0 for a, b in itertools.pairwise(edges)])
    top = float(peaks.max()) or 1.0
    return tuple(round(float(p) / top, 3) for p in peaks)


def analyse_upload(path: str | None, max_bytes: int) -> tuple[ClipView | None, str]:
    """The view of the clip at `path` and the region's HTML (a message when it cannot be analysed)."""
    if not path:
        return None, ""
    file = Path(path)
    if file.stat().st_size > max_bytes:
        return None, region(f"<p>{mark('warn')} The clip is larger than {max_bytes >> 20} MB: nothing was measured.</p>")
    try:
        clip = check(file.read_bytes())
    except TTSError as exc:
        return None, region(f"<p>{mark('warn')} {html.escape(scrub_paths(exc.message) or '')}</p>")
    view = ClipView(clip.wav.shape[1] / clip.sample_rate, outline(clip.wav), clip.analysis.as_dict())
    return view, render(view, tuple(view.analysis["window"]))


def chosen_window(view: ClipView | None, start, end) -> tuple[float, float] | None:
    """The window from the two number boxes, clamped to the clip; None when they do not make one."""
    if view is None or start is None or end is None:
        return None
    start, end = max(0.0, float(start)), min(view.duration_s, float(end))
    return (start, end) if end > start else None


def region(body: str) -> str:
    return f'<section role="region" aria-label="Clip check" class="clip-check">{body}</section>'


def render(view: ClipView, window: tuple[float, float] | None) -> str:
    """The region: verdict, waveform with the window shaded, the figures."""
    a = view.analysis
    good = a["verdict"] == "good"
    verdict = (f"{mark('ok')} Good: clean speech, ready to clone." if good
               else f"{mark('warn')} " + html.escape(a["verdict"][:1].upper() + a["verdict"][1:]) + ".")
    shown = window or (0.0, view.duration_s)
    label = (f"Waveform of the {view.duration_s:.1f} s clip; the clone uses {shown[0]:.2f} s to {shown[1]:.2f} s"
             + ("" if window else " (the whole clip)"))
    return region(
        f'<p class="clip-verdict" data-good="{str(good).lower()}">{verdict}</p>'
        f"{_waveform(view, shown, label)}"
        f'<p class="clip-figures">Speech {a["speech_seconds"]:.1f} s · SNR {a["snr_db"]:.0f} dB · '
        f'clipped {a["clipped_fraction"]:.2%} · music/steady sound {a["nonspeech_fraction"]:.0%} · '
        f'suggested window <span class="clip-auto">{a["window"][0]:.2f}–{a["window"][1]:.2f} s</span></p>')


def _waveform(view: ClipView, window: tuple[float, float], label: str) -> str:
    mid, step = WAVE_HEIGHT / 2, WAVE_WIDTH / max(1, len(view.outline))
    bars = " ".join(f"M{i * step + step / 2:.1f} {mid - p * (mid - 2):.1f}V{mid + p * (mid - 2):.1f}"
                    for i, p in enumerate(view.outline))
    scale = WAVE_WIDTH / max(view.duration_s, 1e-6)
    x0, x1 = window[0] * scale, window[1] * scale
    return (f'<svg class="clip-wave" role="img" aria-label="{html.escape(label)}" viewBox="0 0 {WAVE_WIDTH} '
            f'{WAVE_HEIGHT}" preserveAspectRatio="none" data-start="{window[0]:.3f}" data-end="{window[1]:.3f}">'
            f'<rect class="clip-window" x="{x0:.1f}" y="0" width="{max(1.0, x1 - x0):.1f}" height="{WAVE_HEIGHT}"/>'
            f'<path class="clip-bars" d="{bars}"/></svg>')
