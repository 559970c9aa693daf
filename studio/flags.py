"""The web server's command line (`python app.py`, `python -m tts_core serve`) and the one
`StudioConfig` it builds (`parse_config`).

Every flag has an environment twin, named in its help and read through `tts_core.env`; the model
flags are the ones `python -m tts_core say` takes (`tts_core.cli.add_model_flags`). Defaults that
follow the machine (encoder processes, ZeroGPU hardware) are resolved here; those that follow the
device (stream slots, threads, the cache folder) when the model loads (`tts_core.loader`).
"""

from __future__ import annotations

import argparse
import sys

from tts_core.cli import add_model_flags, model_load_config
from tts_core.config import EngineConfig
from tts_core.env import env_flag, env_float, env_int, env_str

from .settings import PageConfig, ServerSettings, StudioConfig

DESCRIPTION = """MOSS-TTS-Nano Studio: serves the Gradio page, the streaming route and the OpenAI API.

Every flag has an environment twin (in brackets below). The server is up at once; the model loads
in the background, then the page is built while the API already serves. Hugging Face Spaces: binds
0.0.0.0:7860 there."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The parser, its defaults read from the environment now (a malformed variable: ValueError)."""
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_model_flags(p)
    p.add_argument("--host", default=env_str("MOSS_TTS_HOST", "0.0.0.0" if env_str("SPACE_ID") else "127.0.0.1"),
                   help="bind address (0.0.0.0 on Hugging Face Spaces) [MOSS_TTS_HOST]")
    p.add_argument("--port", type=int, default=env_int("PORT", 7860), help="[PORT]")
    p.add_argument("--max-active-streams", type=int, default=env_int("MOSS_TTS_MAX_ACTIVE"),
                   help="streams decoded together per engine (default: one per usable CPU core, "
                        "256 per GPU) [MOSS_TTS_MAX_ACTIVE]")
    p.add_argument("--max-queue", type=int, default=env_int("MOSS_TTS_MAX_QUEUE"),
                   help="requests waiting for a slot before new ones get 503 [MOSS_TTS_MAX_QUEUE]")
    p.add_argument("--max-text-chars", type=int, default=env_int("MOSS_TTS_MAX_TEXT_CHARS"),
                   help="longest accepted text [MOSS_TTS_MAX_TEXT_CHARS]")
    p.add_argument("--allow-remote-audio", action="store_true", default=env_flag("MOSS_TTS_ALLOW_REMOTE_AUDIO"),
                   help="accept http(s) URLs as ref_audio [MOSS_TTS_ALLOW_REMOTE_AUDIO]")
    p.add_argument("--max-upload-mb", type=float, default=env_float("MOSS_TTS_MAX_UPLOAD_MB"),
                   help="largest reference clip upload, MiB (default 10) [MOSS_TTS_MAX_UPLOAD_MB]")
    p.add_argument("--max-ref-audio-s", type=float, default=env_float("MOSS_TTS_MAX_REF_AUDIO_S"),
                   help="longest reference clip accepted, seconds (default 60) [MOSS_TTS_MAX_REF_AUDIO_S]")
    p.add_argument("--cors-allow-origins", default=env_str("MOSS_TTS_CORS_ALLOW_ORIGINS", ""),
                   help="comma-separated origins allowed cross-site (default: same-origin only) "
                        "[MOSS_TTS_CORS_ALLOW_ORIGINS]")
    p.add_argument("--devices", default=env_str("MOSS_TTS_DEVICES"),
                   help="several GPUs, one engine each, e.g. cuda:0,cuda:1 (default: all visible with "
                        "--device auto/cuda) [MOSS_TTS_DEVICES]")
    p.add_argument("--quantize", choices=["auto", "fp32", "fp16", "int8"], default=env_str("MOSS_TTS_QUANTIZE", "auto"),
                   help="CPU weight precision: auto measures and takes the most faithful mode that runs in real "
                        "time here; fp32 is bit-faithful; fp16 / int8 are faster (ignored on CUDA) [MOSS_TTS_QUANTIZE]")
    p.add_argument("--enforce-eager", action="store_true", default=env_flag("MOSS_TTS_ENFORCE_EAGER"),
                   help="GPU: no CUDA graphs (debugging) [MOSS_TTS_ENFORCE_EAGER]")
    p.add_argument("--defer-compile", action=argparse.BooleanOptionalAction,
                   default=env_flag("MOSS_TTS_DEFER_COMPILE", True),
                   help="GPU: serve at once on the plain step while torch.compile and CUDA graphs are built in the "
                        "background (--no-defer-compile builds them before serving) [MOSS_TTS_DEFER_COMPILE]")
    p.add_argument("--ui", action=argparse.BooleanOptionalAction, default=env_flag("MOSS_TTS_UI", True),
                   help="serve the Gradio page at / (built once the model is ready, while the API already "
                        "answers); --no-ui serves the API alone, e.g. for replicas behind a proxy [MOSS_TTS_UI]")
    p.add_argument("--zerogpu", action=argparse.BooleanOptionalAction, default=_tristate("MOSS_TTS_ZEROGPU"),
                   help="ZeroGPU mode: this process never touches CUDA; the page generates in @spaces.GPU calls "
                        "(forked workers; a local harness with the same contract where Spaces is absent); the API "
                        "uses this process's CPU engine. Default: on when SPACES_ZERO_GPU says this is ZeroGPU "
                        "hardware [MOSS_TTS_ZEROGPU]")
    p.add_argument("--browser-build", default=env_str("MOSS_TTS_BROWSER_BUILD"),
                   help="an export-web build to serve at /browser, offered on the page as the 'This browser' "
                        "engine [MOSS_TTS_BROWSER_BUILD]")
    p.add_argument("--encoder-processes", type=int, default=env_int("MOSS_TTS_ENCODER_PROCESSES"),
                   help="worker processes that encode mp3/opus/aac/flac streams, so their encoding uses every "
                        "core (PyAV's mp3 encoder holds the interpreter lock); 0 encodes in the server's process "
                        "(default: usable CPUs - 2, - 1 on 2-3 CPUs) [MOSS_TTS_ENCODER_PROCESSES]")
    p.add_argument("--log-level", default=env_str("MOSS_TTS_LOG_LEVEL", "INFO"), help="[MOSS_TTS_LOG_LEVEL]")
    return p


def parse_config(argv: list[str] | None = None, prog: str | None = None) -> StudioConfig:
    """The configuration from `argv` and the environment; a malformed flag or variable exits with
    one line, as argparse does."""
    try:
        parser = build_parser(prog)
    except ValueError as exc:  # a malformed environment variable
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    args = parser.parse_args(argv)
    try:
        return studio_config(args)
    except ValueError as exc:  # a value out of range: named like a bad flag
        parser.error(str(exc))


def studio_config(args: argparse.Namespace) -> StudioConfig:
    given = {"max_active_streams": args.max_active_streams, "max_queue": args.max_queue,
             "max_text_chars": args.max_text_chars, "enforce_eager": args.enforce_eager or None,
             "defer_compile": args.defer_compile}
    engine = EngineConfig(**{k: v for k, v in given.items() if v is not None})
    devices = tuple(d.strip() for d in args.devices.split(",") if d.strip()) if args.devices else None
    load = model_load_config(args, devices=devices, quantize=args.quantize)
    server = ServerSettings(
        host=args.host, port=args.port, log_level=args.log_level.upper(), max_text_chars=engine.max_text_chars,
        allow_remote_audio=args.allow_remote_audio, lm_id=load.lm, codec_id=load.codec,
        browser_build=args.browser_build,
        cors_allow_origins=tuple(o.strip() for o in args.cors_allow_origins.split(",") if o.strip()),
        encoder_processes=_encoder_processes(args.encoder_processes),
        **({"max_upload_bytes": int(args.max_upload_mb * 2**20)} if args.max_upload_mb else {}),
        **({"max_ref_audio_s": args.max_ref_audio_s} if args.max_ref_audio_s else {}),
    )
    return StudioConfig(engine=engine, load=load, server=server, page=PageConfig(ui=args.ui, zerogpu=_zerogpu(args)))


def _tristate(name: str) -> bool | None:
    """A yes/no variable that may be unset (None: decide automatically)."""
    return env_flag(name) if env_str(name) is not None else None


def _zerogpu(args: argparse.Namespace) -> bool:
    """--zerogpu / --no-zerogpu when given, else whether Hugging Face says this is ZeroGPU hardware."""
    from .zerogpu.env import on_zerogpu_space

    return args.zerogpu if args.zerogpu is not None else on_zerogpu_space()


def _encoder_processes(given: int | None) -> int:
    """--encoder-processes when given, else `encoder_pool.default_encoder_processes()`."""
    from tts_core.audio.encoder_pool import default_encoder_processes

    if given is None:
        return default_encoder_processes()
    if given < 0:
        raise ValueError(f"--encoder-processes must be >= 0, got {given}")
    return given
