"""The Gradio page's file hole (issue 14, findings 1, 2 and 7): file inputs accept only what
Gradio's upload route received; server paths, devices and URLs named by a client are refused
before anything is opened, hashed, copied or fetched; upload answers and page events carry no
server path and no object repr. Runs against `inproc` (create_app under uvicorn in this process).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from support.reliability_common import REPO_ROOT, assert_clean, error_of, run_coro

from bench.lib.reliability_attacks import EVENT_ROUTES, file_data, file_events, post_file_payload

pytestmark = pytest.mark.slow

HANDLE = "gradio-upload/"


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _payloads(data_dir: Path, file_url: str, folder: Path) -> list[str]:
    """Server files of every kind (a device, secrets, the app, the weights, a real clip, a missing
    file), URLs (a local server standing for the internet, a public name, other schemes) and
    spellings that try to leave Gradio's upload folder."""
    return ["/dev/zero", "/etc/passwd", "/proc/self/environ", str(REPO_ROOT / "app.py"),
            str(data_dir / "parity" / "tiny_lm" / "model.safetensors"), str(data_dir / "presets" / "en_2.wav"),
            "/no/such/clip.wav", f"{file_url}/clip.wav", "https://example.com/clip.wav", "file:///etc/passwd",
            "//example.com/clip.wav", "../../../../etc/passwd", f"{folder}/../../../etc/passwd",
            f"{HANDLE}{'0' * 64}/../../../../etc/passwd", f"{HANDLE}..%2f..%2fetc/passwd", "C:\\Windows\\win.ini"]


@pytest.mark.timeout(240)
def test_every_file_input_refuses_server_paths_and_urls(inproc, data_dir, file_server, gradio_dir) -> None:
    """The payloads of findings 1-2 on every event with a file input, through every event route:
    one and the same 400 whether the file exists or not (no oracle), no copy in Gradio's cache, no
    outbound request, and the server answers /health throughout (the /dev/zero payload used to
    wedge the event loop for good)."""
    events = file_events(inproc.url)
    assert events, "the page has no file input: this test would prove nothing"
    before, hits = _files(gradio_dir), len(file_server.hits)
    answers: set[str] = set()
    with httpx.Client(base_url=inproc.url, timeout=20) as client:
        for path in _payloads(data_dir, file_server.url, gradio_dir):
            for event in events:
                for route in EVENT_ROUTES:
                    if route in ("call", "run", "api") and not event.api_name:
                        continue
                    r = post_file_payload(client, event, path, route)
                    assert r.status_code == 400, (path, event, route, r.status_code, r.text[:300])
                    assert error_of(r)["code"] == "file_not_uploaded"
                    answers.add(r.text)
            assert client.get("/health", timeout=5).status_code == 200, path
        event = events[0]
        hidden = '{"path": "/etc/passwd", "meta": {"_type": "gradio\\u002eFile\\u0044ata"}}'  # no "FileData" bytes
        data = ", ".join(hidden if kind == "audio" else "null" for kind in event.input_types)
        escaped = f'{{"fn_index": {event.fn_index}, "session_hash": "e", "data": [{data}]}}'.encode()
        r = client.post("/gradio_api/run/predict", content=escaped, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and error_of(r)["code"] == "file_not_uploaded", r.text[:300]  # JSON escapes
        answers.add(r.text)
    assert len(answers) == 1, answers  # the same words for an existing file, a missing one and a URL
    assert_clean(answers.pop(), data_dir)
    assert _files(gradio_dir) - before == set()  # nothing copied into Gradio's cache
    assert file_server.hits[hits:] == []  # nothing fetched


@pytest.mark.timeout(60)
def test_gradio_checks_file_inputs_itself_once_launched(inproc) -> None:
    """The second layer, Gradio's own: the mounted page counts as launched, so Gradio's file guard
    refuses a path outside its upload folder even without ours (mount_gradio_app alone left it off)."""
    from gradio import processing_utils
    from gradio.context import LocalContext
    from gradio.exceptions import InvalidPathError

    demo = inproc.app.state.page
    assert demo.has_launched and not demo.show_error
    assert demo.delete_cache and demo.delete_cache[1] > 0
    assert str(REPO_ROOT) in demo.blocked_paths and "/etc" in demo.blocked_paths
    audio = next(b for b in demo.blocks.values() if b.get_block_name() == "audio")

    async def move(path: str) -> None:
        LocalContext.blocks.set(demo)  # as Gradio does while it processes an event (this task only)
        await processing_utils.async_move_files_to_cache(file_data(path), audio, check_in_upload_folder=True)

    for path in ("/etc/passwd", str(REPO_ROOT / "app.py"), "/dev/zero"):  # /dev/zero last: it would hang
        with pytest.raises(InvalidPathError):
            run_coro(move(path))


def test_uploads_are_answered_with_handles_not_paths(inproc, inproc_client, clip_wav, gradio_dir, file_server,
                                                     data_dir) -> None:
    """Finding 7: Gradio's upload route answered absolute server paths. Now a handle comes back,
    and the page uses it like Gradio's path: to preview the file and in its events."""
    r = inproc_client.post("/gradio_api/upload", files={"files": ("my clip.wav", clip_wav, "audio/wav")})
    assert r.status_code == 200, r.text
    (handle,) = r.json()
    assert handle.startswith(HANDLE) and not handle.startswith("/") and str(gradio_dir) not in r.text, r.text
    assert_clean(r.text, data_dir)
    preview = inproc_client.get(f"/gradio_api/file={handle}")
    assert preview.status_code == 200 and preview.content == clip_wav
    describe = next(e for e in file_events(inproc.url) if len(e.input_types) == 1)
    answer = post_file_payload(inproc_client, describe, handle, "run/predict")
    assert answer.status_code == 200 and "ind-ok" in answer.json()["data"][0], answer.text
    hits = len(file_server.hits)
    for name in (f"{file_server.url}/clip.wav", "https://example.com/a.wav", f"{HANDLE}{'0' * 64}/../x"):
        assert inproc_client.get(f"/gradio_api/file={name}").status_code in (403, 404), name
    assert file_server.hits[hits:] == []  # Gradio's file route would have fetched the URL


def test_gradio_errors_carry_no_repr_or_path(inproc_client, data_dir) -> None:
    """Gradio's processing errors quote the failing value, the component's internals and the
    original exception ("Expected a `FileData | None`, but ... was: {'path': ...} ... Original
    error: RuntimeError: ..."); with show_error off the page gets none of them. (Messages a
    component raises as gr.Error on purpose are still shown: they echo the client's own value.)"""
    config = inproc_client.get("/config").json()
    for fn_index in range(len(config["dependencies"])):
        for data in ([{"not": "a value"}] * 20, [None], [object.__name__] * 3):
            r = inproc_client.post("/gradio_api/run/predict", json={"fn_index": fn_index, "data": data,
                                                                    "session_hash": "s"})
            assert_clean(r.text, data_dir)
            if r.status_code >= 400:
                assert "Original error" not in r.text and "the value passed" not in r.text, (fn_index, r.text[:300])


def _status_event(config: dict) -> int:
    """The page event (with no inputs) that writes the model status line (#model-status)."""
    status = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "model-status")
    return next(d.get("id", i) for i, d in enumerate(config["dependencies"])
                if status in d["outputs"] and not d["inputs"] and d.get("backend_fn"))


@pytest.mark.timeout(120)
def test_page_status_shows_no_checkpoint_path_while_loading_or_failed(data_dir, tmp_path) -> None:
    """Finding 7: the page's status line quoted the loader's progress ("locating LM checkpoint
    /srv/...") and load errors verbatim. The page, /health and errors now get them path-free."""
    from support.reliability_servers import GuardedServer

    from studio.app import create_app
    from studio.service import SynthesizerService
    from studio.settings import ServerSettings

    secret = str(tmp_path / "private" / "checkpoints" / "lm")
    release = threading.Event()

    def factory(report):
        report(f"locating LM checkpoint {secret}…")
        release.wait(60)
        raise RuntimeError(f"Error(s) in loading state_dict from {secret}/model.safetensors")

    service = SynthesizerService(factory)
    settings = ServerSettings(lm_id=secret, codec_id=secret)
    app = create_app(service, settings)
    with GuardedServer(app, settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        refresh = _status_event(client.get("/config").json())
        seen = []
        for state in ("loading", "failed"):
            if state == "failed":
                release.set()
                deadline = time.monotonic() + 30
                while service.state.value != "failed" and time.monotonic() < deadline:
                    time.sleep(0.05)
            page = client.post("/gradio_api/run/predict", json={"fn_index": refresh, "data": [],
                                                                "session_hash": "p"})
            health = client.get("/health")
            assert health.status_code == 503 and health.json()["status"] == state, health.text
            for text in (page.text, health.text, client.get("/").text):
                assert secret not in text and str(tmp_path) not in text, text[:500]
            seen.append(page.json()["data"][0])
        assert "lm" in seen[0] and "model.safetensors" in seen[1], seen  # named by the last part only
        r = client.post("/v1/audio/speech", json={"input": "Hi."})
        assert r.status_code == 500 and secret not in r.text and "model.safetensors" in error_of(r)["message"]
