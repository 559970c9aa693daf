"""A first run as a new user meets it (issue 49), in headless Chromium: the voice list tells the
truth, messages are short and stay with their tab, and a model that cannot load says how to run
offline and leaves nothing to click that cannot work.

The studio runs in-process on the tiny model with the shared preset clips and no downloads
(`studio_helpers.studio`): 11 presets can speak, the 6 whose only source is the ONNX release's
manifest cannot. The load failure is `python app.py` as a user starts it, without the weights.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import httpx
import openai
import pytest
from support.e2e_helpers import REPO_ROOT, free_port
from support.server_helpers import stop_process
from support.studio_helpers import open_page

from studio.main import RUN_OFFLINE

pytestmark = pytest.mark.e2e

MANIFEST_ONLY = ["Sora", "Kaze", "Nami", "Tsuki", "Hana", "Kumo"]


def test_the_page_offers_only_voices_that_can_speak_and_says_why_the_others_cannot(browser_context, studio):
    page, _ = open_page(browser_context, studio.url)
    listed = httpx.get(studio.url + "api/voices", timeout=10).json()["voices"]
    speaking = [v["name"] for v in listed if v["available"]]
    assert sorted(v["name"] for v in listed if not v["available"]) == sorted(MANIFEST_ONLY)
    reason = next(v["unavailable_reason"] for v in listed if v["name"] == "Sora")
    info = page.inner_text("#voice-select")
    assert f"{len(speaking)} voices in 3 languages." in info
    assert f"Not available here: {', '.join(MANIFEST_ONLY)} ({reason})." in info
    page.get_by_role("tab", name="Voice audition").click()
    boxes = page.locator("#audition-voices label")
    labels = [boxes.nth(i).inner_text() for i in range(boxes.count())]
    assert len(labels) == len(speaking) and not any(name in label for label in labels for name in MANIFEST_ONLY)
    assert "Not available here: Sora" in page.inner_text("#audition-voices")


def test_an_error_is_one_short_sentence_and_stays_with_its_tab(browser_context, studio):
    """The player's message of a refused request is the server's sentence as is (no "(field: voice)"
    tacked on); the page's message goes when another tab is opened."""
    page, frame = open_page(browser_context, studio.url)
    shown = frame.evaluate("""async () => {
        const { errorMessage } = await import('/player/player/source.js');
        const resp = await fetch('/api/tts/stream', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                     body: JSON.stringify({text: 'Hello.', voice: 'Sora'})});
        return [resp.status, (await errorMessage(resp)).message];
    }""")
    assert shown[0] == 400
    assert shown[1].startswith("voice 'Sora' is unavailable: it needs the ONNX release's browser_poc_manifest.json")
    assert shown[1].endswith("; choose another voice") and "(field" not in shown[1]

    page.get_by_role("tab", name="Voice audition").click()
    page.locator("#audition-voices input[type=checkbox]:checked").evaluate_all("els => els.forEach(e => e.click())")
    page.click("#audition-btn")
    page.wait_for_selector("#tts-message:has-text('Pick at least one voice')", timeout=10_000)
    page.get_by_role("tab", name="Speak").click()
    page.wait_for_function("document.querySelector('#tts-message').innerText.trim() === ''", timeout=10_000)


def test_a_model_that_cannot_load_says_how_to_run_offline_and_disables_generate(browser_context, tmp_path):
    """`python app.py` with the official checkpoints, which cannot be downloaded here (an empty
    Hugging Face cache, offline): the header says what happened and the README's offline recipe,
    without the Hub's exception; Generate and Compare are disabled; the API's 500 tells the official
    SDK not to retry."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "GRADIO_ANALYTICS_ENABLED": "False", "MOSS_TTS_CACHE_DIR": str(tmp_path / "cache")}
    log_path = tmp_path / "app.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        health: dict = {}
        while time.monotonic() < deadline and not (health.get("status") == "failed" and health.get("page") == "served"):
            assert process.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.HTTPError, ValueError):
                health = httpx.get(url + "health", timeout=5).json()
            time.sleep(0.25)
        assert health.get("status") == "failed" and health.get("page") == "served", health

        page = browser_context.new_page()
        page.goto(url)
        page.wait_for_selector("#model-status:has-text('could not be loaded')", timeout=30_000)
        status = page.inner_text("#model-status")
        assert ("The model could not be loaded: the LM checkpoint OpenMOSS-Team/MOSS-TTS-Nano could not be "
                "downloaded from Hugging Face (HF_HUB_OFFLINE=1 is set and it is not in the Hugging Face cache). "
                + RUN_OFFLINE) in status
        for raw in ("Error", "Traceback", "http", str(tmp_path)):
            assert raw not in status, raw
        page.wait_for_function("document.querySelector('#generate-btn').disabled", timeout=10_000)
        page.get_by_role("tab", name="Voice audition").click()
        page.wait_for_function("document.querySelector('#audition-btn')?.disabled", timeout=10_000)

        sent: list[str] = []
        with httpx.Client(event_hooks={"request": [lambda r: sent.append(r.url.path)]}, timeout=30) as http:
            sdk = openai.OpenAI(base_url=url + "v1", api_key="x", max_retries=2, http_client=http)
            with pytest.raises(openai.InternalServerError) as failed:
                sdk.audio.speech.create(model="tts-1", voice="alloy", input="Hello!")
        assert sent == ["/v1/audio/speech"]  # x-should-retry: false, so no retry
        assert RUN_OFFLINE in failed.value.body["message"]
        assert "Traceback" not in log_path.read_text()
    finally:
        stop_process(process)

