"""Security of the real app: SSRF (remote `ref_audio`), names and paths that must never escape,
no traces or paths in any answer, same-origin CORS. Runs against `inproc` (create_app in this
process, remote audio allowed for one local file server) and `python app.py` (`app_proc`)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from support.reliability_common import REPO_ROOT, assert_clean, error_of, port_of, run_coro

from bench.lib.reliability_clients import raw_http
from studio.errors import install_error_handlers, sanitize_health, scrub_paths
from studio.limits import netguard
from studio.limits.guards import install_http_guards
from studio.settings import ServerSettings
from tts_core.errors import InvalidRequestError, ModelLoadError

pytestmark = pytest.mark.slow

def test_remote_audio_off_by_default(app_proc) -> None:
    r = httpx.post(app_proc.url + "/v1/audio/speech",
                   json={"input": "Hi.", "ref_audio": "http://127.0.0.1:9/clip.wav"}, timeout=30)
    assert r.status_code == 400 and error_of(r)["code"] == "remote_audio_disabled"


@pytest.mark.timeout(60)
def test_remote_audio_refuses_non_public_addresses(inproc, inproc_client, file_server) -> None:
    """Only the exact exempt host:port is fetched; loopback by another name or port, private,
    link-local, multicast and unspecified addresses are refused without a connection."""
    port = file_server.port
    refused = [
        f"http://localhost:{port}/clip.wav", f"http://LOCALHOST.:{port}/clip.wav", f"http://[::1]:{port}/clip.wav",
        f"http://2130706433:{port}/clip.wav", f"http://0x7f.0.0.1:{port}/clip.wav", f"http://127.1:{port}/clip.wav",
        f"http://127.0.0.2:{port}/clip.wav", f"http://[::ffff:127.0.0.1]:{port}/clip.wav",
        f"http://0.0.0.0:{port}/clip.wav", f"{inproc.url}/health",
        "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/a.wav", "http://172.16.0.1/a.wav",
        "http://192.168.1.1/a.wav", "http://100.64.0.1/a.wav", "http://[fe80::1]/a.wav", "http://[fc00::1]/a.wav",
        "http://224.0.0.1/a.wav", "http://[ff02::1]/a.wav", "http://[::]/a.wav",
        f"http://user:pw@127.0.0.1:{port}/clip.wav",
    ]
    hits = len(file_server.hits)
    for url in refused:
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": url})
        assert r.status_code == 400, (url, r.status_code, r.text)
        # Refused by the address check, which runs before any connection is made.
        assert error_of(r)["code"] == "remote_audio_refused", (url, r.text)
    for url in ("ftp://127.0.0.1/a.wav", "gopher://127.0.0.1:70/", "dict://127.0.0.1:11211/"):
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": url})
        assert r.status_code == 400 and error_of(r)["code"] == "unsupported_url", url
    assert len(file_server.hits) == hits, file_server.hits[hits:]  # nothing reached the local server


@pytest.mark.timeout(90)
def test_remote_audio_exempt_host_limits(inproc, inproc_client, file_server) -> None:
    """The exempt local server: a clip is fetched and cloned; redirects are re-checked; size,
    time and status limits hold."""
    base = file_server.url
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": f"{base}/clip.wav",
                                                     "max_frames": 2, "response_format": "wav"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF", r.text[:300]
    r = inproc_client.post("/api/tts/stream", json={"text": "Hi.", "ref_audio": f"{base}/redirect?to={base}/clip.wav",
                                                    "max_frames": 2})
    assert r.status_code == 200, r.text[:300]
    hits = len(file_server.hits)
    r = inproc_client.post("/v1/audio/speech", json={
        "input": "Hi.", "ref_audio": f"{base}/redirect?to=http://localhost:{file_server.port}/clip.wav"})
    assert r.status_code == 400 and error_of(r)["code"] == "remote_audio_refused"
    assert file_server.hits[hits:] == [f"/redirect?to=http://localhost:{file_server.port}/clip.wav"]
    for path, status, code in (("/big", 413, "ref_audio_too_large"), ("/big-chunked", 413, "ref_audio_too_large"),
                               ("/missing", 400, "ref_audio_fetch")):
        r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": base + path})
        assert r.status_code == status and error_of(r)["code"] == code, (path, r.text)
    r = inproc_client.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": f"{base}/slow"})
    assert r.status_code == 400 and error_of(r)["code"] == "ref_audio_fetch", r.text
    # Cut by the configured total download time (a server without that bound would hang here).
    assert f"longer than {inproc.settings.remote_audio_timeout_s:g} s" in error_of(r)["message"], r.text


def test_public_address_rules() -> None:
    import ipaddress

    refused = ["127.0.0.1", "127.255.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.0.1", "169.254.169.254",
               "100.64.0.1", "0.0.0.0", "224.0.0.251", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1",
               "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1",
               "2001:db8::1", "192.0.2.1", "198.18.0.1", "240.0.0.1"]
    allowed = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]
    for text in refused:
        assert not netguard.is_public_address(ipaddress.ip_address(text)), text
    for text in allowed:
        assert netguard.is_public_address(ipaddress.ip_address(text)), text
    target = netguard.parse_url("http://127.0.0.1:8080/a.wav")
    assert netguard.is_exempt(target, ["127.0.0.1:8080"]) and netguard.is_exempt(target, ["127.0.0.1"])
    assert not netguard.is_exempt(target, ["127.0.0.1:8081"]) and not netguard.is_exempt(target, ["localhost:8080"])
    assert not netguard.is_exempt(netguard.parse_url("http://localhost:8080/"), ["127.0.0.1:8080"])
    for bad in ("http://u@example.com/", "http:///x", "http://example.com:99999/", "ftp://example.com/",
                "http://exa mple.com/", "http://example.com\\@evil/", "http://" + "a" * 3000):
        with pytest.raises(netguard.FetchRefused):
            netguard.parse_url(bad)


def test_voice_names_and_paths_never_escape(inproc, inproc_client, data_dir, tmp_path) -> None:
    from studio.api.requests import UploadStore
    from tts_core.voices import VoiceBank, load_catalog

    for name in ("../../../../etc/passwd", "Cedar/../../app", "..", "%2e%2e%2fapp.py", "C:\\x", "\x00"):
        for route, body in (("/v1/audio/speech", {"input": "Hi.", "voice": name}),
                            ("/api/tts/stream", {"text": "Hi.", "voice": name})):
            r = inproc_client.post(route, json=body)
            assert r.status_code in (400, 404), (name, route, r.status_code)
            assert_clean(r.text, data_dir)
    for path in ("/api/voices/..%2F..%2Fapp.py/clip", "/api/voices/%2e%2e/clip", "/api/voices/Cedar%2F..%2Fx/clip"):
        r = inproc_client.get(path)
        assert r.status_code == 404, (path, r.status_code)
    secrets_markers = (b"root:x:0:0", b"MOSS-TTS-Nano Studio: `python app.py`")
    for path in ("/player/../app.py", "/player/%2e%2e/app.py", "/player/..%2fapp.py", "/player/..%5capp.py",
                 "/gradio_api/file=/etc/passwd", f"/gradio_api/file={REPO_ROOT}/app.py", "/file=/etc/passwd",
                 f"/gradio_api/file={data_dir}/presets/en_2.wav", "/static/../../app.py", "/assets/../../app.py"):
        status, reply = raw_http(port_of(inproc), f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert not any(marker in reply for marker in secrets_markers), path
        assert status in (400, 403, 404, 405), (path, status)
    # Cache keys and codec fingerprints are validated before a path is built from them.
    bank = VoiceBank(load_catalog(), voices_dir=None, cache_dir=tmp_path, encoder=None, codec_fingerprint="ok",
                     allow_download=False)
    for key in ("../../etc/passwd", "a" * 63, "/" + "a" * 63, "A" * 64, "a" * 64 + "/.."):
        with pytest.raises(ValueError):
            bank.code_cache.get(key)
    for fingerprint in ("..", "../x", "a/b", "", "."):
        with pytest.raises(ValueError):
            VoiceBank(load_catalog(), voices_dir=None, cache_dir=tmp_path, encoder=None,
                      codec_fingerprint=fingerprint, allow_download=False)
    with pytest.raises(InvalidRequestError):
        UploadStore().get("../../etc/passwd")
    assert list(tmp_path.iterdir()) == []


def test_no_paths_or_traces_in_responses(app_proc, inproc_client, data_dir) -> None:
    for path in ("/health", "/v1/models", "/v1/voices", "/api/voices", "/v1/models/nope", "/nope", "/openapi.json"):
        assert_clean(httpx.get(app_proc.url + path, timeout=30).text, data_dir)
    health = httpx.get(app_proc.url + "/health", timeout=30).json()
    assert health["lm"] == "local checkpoint" and health["codec"] == "local checkpoint"
    bad_requests = [
        ("/v1/audio/speech", b"{not json"), ("/v1/audio/speech", b"[]"), ("/api/tts/stream", b'{"text": 5}'),
        ("/api/tts/stream", b'{"text": "hi", "mode": "other"}'), ("/v1/audio/speech", b'{"input": "x", "seed": -1}'),
        ("/v1/audio/speech", b'{"input": "x", "top_k": 1e30}'), ("/api/tts/stream", b'{"text": "x", "max_frames": 0}'),
    ]
    for route, body in bad_requests:
        r = inproc_client.post(route, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (route, body, r.status_code, r.text)
        error_of(r)
        assert_clean(r.text, data_dir)


def test_model_load_failure_reveals_no_path(data_dir) -> None:
    """A failed load's message names the path in the log, never in a response."""
    from studio.app import create_app
    from studio.service import SynthesizerService

    secret = str(data_dir / "private" / "models")

    def factory(report):
        raise ModelLoadError(f"could not load the model from --lm {secret} (OSError: {secret}/config.json missing)")

    service = SynthesizerService(factory)
    service.start(background=False)
    settings = ServerSettings(lm_id=secret, codec_id=secret)
    app = create_app(service, settings)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [await client.get("/health"), await client.get("/v1/voices"),
                    await client.post("/v1/audio/speech", json={"input": "Hi."}),
                    await client.post("/api/tts/stream", json={"text": "Hi."})]

    responses = run_coro(run())
    for r in responses:
        assert_clean(r.text, data_dir)
    assert responses[0].json()["status"] == "failed" and "config.json" in responses[0].json()["error"]
    assert [r.status_code for r in responses[1:]] == [500, 500, 500]
    assert "the model failed to load" in error_of(responses[1])["message"]


def test_unexpected_errors_are_generic() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret at /srv/secret/key.pem")

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/boom")

    r = run_coro(run())
    assert r.status_code == 500 and "secret" not in r.text and "Traceback" not in r.text
    assert error_of(r)["type"] == "server_error"


def test_scrub_paths() -> None:
    assert scrub_paths("--lm /srv/models/lm failed: '/srv/models/lm/config.json'") == "--lm lm failed: 'config.json'"
    assert scrub_paths("see GET /v1/voices and /api/voices") == "see GET /v1/voices and /api/voices"
    assert scrub_paths("https://huggingface.co/OpenMOSS-Team/MOSS-TTS-Nano") == (
        "https://huggingface.co/OpenMOSS-Team/MOSS-TTS-Nano")
    assert scrub_paths(r"C:\Users\me\lm.bin and ~/.cache/hf and file:///etc/shadow") == "lm.bin and hf and shadow"
    assert scrub_paths("pcm/wav, 3/4, a / b") == "pcm/wav, 3/4, a / b"
    health = sanitize_health({"lm": "/x/tiny_lm", "codec": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
                              "error": "at /x/y/z", "stats": {"n": 1}})
    assert health == {"lm": "local checkpoint", "codec": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
                      "error": "at z", "stats": {"n": 1}}


def test_same_origin_by_default(inproc, inproc_client) -> None:
    """No Access-Control-Allow-Origin for another site, on our routes and on Gradio's, even when
    the server is reached under a public name (where Gradio alone would reflect any Origin)."""
    evil = {"Origin": "https://evil.example"}
    for path in ("/v1/models", "/health", "/api/voices", "/config", "/gradio_api/info"):
        for host in ("127.0.0.1", "tts.example.org"):
            r = inproc_client.get(path, headers={**evil, "Host": host})
            assert "access-control-allow-origin" not in r.headers, (path, host, dict(r.headers))
    preflight = {**evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for path in ("/v1/audio/speech", "/api/tts/stream", "/gradio_api/queue/join"):
        r = inproc_client.options(path, headers={**preflight, "Host": "tts.example.org"})
        assert "access-control-allow-origin" not in r.headers and r.status_code >= 400, (path, r.status_code)
    # A page on another site can still send a "simple" text/plain POST; it is refused, not synthesised.
    r = inproc_client.post("/v1/audio/speech", content=b'{"input": "Hi."}', headers={**evil, "Content-Type": "text/plain"})
    assert r.status_code == 400


def test_cors_allow_list_is_exact() -> None:
    app = FastAPI()
    install_http_guards(app, ServerSettings(cors_allow_origins=("https://ok.example",)))

    @app.get("/x")
    def x() -> dict:
        return {}

    async def run(origin: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get("/x", headers={"Origin": origin})

    assert run_coro(run("https://ok.example")).headers["access-control-allow-origin"] == "https://ok.example"
    assert "access-control-allow-origin" not in run_coro(run("https://evil.example")).headers
    with pytest.raises(ValueError):
        ServerSettings(cors_allow_origins=("*",))
