"""MOSS-TTS-Nano Studio: `python app.py` serves the Gradio page, the streaming route and the OpenAI API.

Every flag has an environment twin (see --help). The server is up at once; the model loads in the
background and the page shows its progress. Hugging Face Spaces: binds 0.0.0.0:7860 there.
"""

from __future__ import annotations

import argparse
import logging
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported anywhere
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# Torch work happens in several threads here (loader, engine, request workers), each with its own
# OpenMP team; spinning idle teams starved the engine on a 2-core box (RTF 4.3 instead of 0.2).
# Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

logger = logging.getLogger("moss_tts_app")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--lm", default=env("MOSS_TTS_LM", "OpenMOSS-Team/MOSS-TTS-Nano"),
                   help="LM: Hugging Face repo id or local directory [MOSS_TTS_LM]")
    p.add_argument("--codec", default=env("MOSS_TTS_CODEC", "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"),
                   help="codec: Hugging Face repo id or local directory [MOSS_TTS_CODEC]")
    p.add_argument("--tokenizer", default=env("MOSS_TTS_TOKENIZER"),
                   help="SentencePiece tokenizer.model (default: the one in the LM dir) [MOSS_TTS_TOKENIZER]")
    p.add_argument("--voices-dir", default=env("MOSS_TTS_VOICES_DIR"),
                   help="directory of preset reference clips [MOSS_TTS_VOICES_DIR]")
    p.add_argument("--device", default=env("MOSS_TTS_DEVICE", "auto"), help="auto, cpu, cuda, cuda:1 [MOSS_TTS_DEVICE]")
    p.add_argument("--dtype", default=env("MOSS_TTS_DTYPE", "auto"), help="auto, float32, bfloat16 [MOSS_TTS_DTYPE]")
    p.add_argument("--host", default=env("MOSS_TTS_HOST", "0.0.0.0" if env("SPACE_ID") else "127.0.0.1"),
                   help="bind address (0.0.0.0 on Hugging Face Spaces) [MOSS_TTS_HOST]")
    p.add_argument("--port", type=int, default=env("PORT", "7860"), help="[PORT]")
    p.add_argument("--max-active-streams", type=int, default=env("MOSS_TTS_MAX_ACTIVE"),
                   help="streams decoded together [MOSS_TTS_MAX_ACTIVE]")
    p.add_argument("--max-queue", type=int, default=env("MOSS_TTS_MAX_QUEUE"),
                   help="requests waiting for a slot before new ones get 503 [MOSS_TTS_MAX_QUEUE]")
    p.add_argument("--max-text-chars", type=int, default=env("MOSS_TTS_MAX_TEXT_CHARS"),
                   help="longest accepted text [MOSS_TTS_MAX_TEXT_CHARS]")
    p.add_argument("--allow-remote-audio", action="store_true", default=_env_flag("MOSS_TTS_ALLOW_REMOTE_AUDIO"),
                   help="accept http(s) URLs as ref_audio [MOSS_TTS_ALLOW_REMOTE_AUDIO]")
    p.add_argument("--max-upload-mb", type=float, default=env("MOSS_TTS_MAX_UPLOAD_MB"),
                   help="largest reference clip upload, MiB (default 10) [MOSS_TTS_MAX_UPLOAD_MB]")
    p.add_argument("--max-ref-audio-s", type=float, default=env("MOSS_TTS_MAX_REF_AUDIO_S"),
                   help="longest reference clip accepted, seconds (default 60) [MOSS_TTS_MAX_REF_AUDIO_S]")
    p.add_argument("--cors-allow-origins", default=env("MOSS_TTS_CORS_ALLOW_ORIGINS", ""),
                   help="comma-separated origins allowed cross-site (default: same-origin only) "
                        "[MOSS_TTS_CORS_ALLOW_ORIGINS]")
    p.add_argument("--devices", default=env("MOSS_TTS_DEVICES"),
                   help="several GPUs, one engine each, e.g. cuda:0,cuda:1 (default: all visible with "
                        "--device auto/cuda) [MOSS_TTS_DEVICES]")
    p.add_argument("--quantize", choices=["int8"], default=env("MOSS_TTS_QUANTIZE") or None,
                   help="CPU only: int8 linear layers, faster, slightly different audio [MOSS_TTS_QUANTIZE]")
    p.add_argument("--enforce-eager", action="store_true", default=_env_flag("MOSS_TTS_ENFORCE_EAGER"),
                   help="GPU: no CUDA graphs (debugging; TTS_NO_CUDA_GRAPH=1 also works) [MOSS_TTS_ENFORCE_EAGER]")
    p.add_argument("--log-level", default=env("MOSS_TTS_LOG_LEVEL", "INFO"), help="[MOSS_TTS_LOG_LEVEL]")
    return p.parse_args(argv)


def engine_config(args: argparse.Namespace):
    from tts_core.config import EngineConfig

    given = {"max_active_streams": args.max_active_streams, "max_queue": args.max_queue,
             "max_text_chars": args.max_text_chars, "enforce_eager": args.enforce_eager or None}
    return EngineConfig(**{k: v for k, v in given.items() if v is not None})


def _load_hint(args: argparse.Namespace, exc: BaseException) -> str:
    hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    offline = " HF_HUB_OFFLINE=1 is set, so nothing is downloaded." if _env_flag("HF_HUB_OFFLINE") else ""
    return (f"could not load the model from --lm {args.lm} / --codec {args.codec} "
            f"({type(exc).__name__}: {exc}). Check the network connection to huggingface.co, or that "
            f"HF_HOME ({hf_home}) holds the weights, or pass local directories with --lm and --codec.{offline}")


def make_factory(args: argparse.Namespace):
    """Builds the Synthesizer in the service's loader thread; every failure becomes one clear line."""

    def factory(report):
        from tts_core.errors import ModelLoadError, TTSError

        report(f"importing the engine (device {args.device})")
        try:
            from tts_core import Synthesizer  # torch is imported here, off the server's start-up path

            return Synthesizer.from_pretrained(
                lm=args.lm, codec=args.codec, device=args.device, dtype=args.dtype, tokenizer=args.tokenizer,
                voices_dir=args.voices_dir, engine_config=engine_config(args), report=report,
                devices=args.devices, quantize=args.quantize,
            )
        except TTSError:
            raise
        except ImportError as exc:
            raise ModelLoadError(f"a runtime dependency is missing ({exc}); run pip install -r requirements.txt") from None
        except Exception as exc:  # network, cache, file or format problem: one line, details at debug level
            logger.debug("model load failed", exc_info=True)
            raise ModelLoadError(_load_hint(args, exc)) from None

    return factory


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import uvicorn

    from tts_core.server import ServerSettings, create_app
    from tts_core.service import SynthesizerService

    settings = ServerSettings(
        max_text_chars=engine_config(args).max_text_chars, allow_remote_audio=args.allow_remote_audio,
        lm_id=args.lm, codec_id=args.codec,
        cors_allow_origins=tuple(o.strip() for o in args.cors_allow_origins.split(",") if o.strip()),
        **({"max_upload_bytes": int(args.max_upload_mb * 2**20)} if args.max_upload_mb else {}),
        **({"max_ref_audio_s": args.max_ref_audio_s} if args.max_ref_audio_s else {}),
    )
    service = SynthesizerService(make_factory(args))
    app = create_app(service, settings)  # the app's lifespan starts loading the model in the background
    logger.info("serving on http://%s:%d (model loads in the background)", args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)


if __name__ == "__main__":
    main()
