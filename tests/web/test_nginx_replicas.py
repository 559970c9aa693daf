"""Two replicas behind a real nginx (Debian's package), configured by docs/nginx-replicas.conf as
documented: readiness through /health, streams unbuffered, a saved voice usable through either
replica, and a replica killed mid-stream costing only its own streams, whose clients see the
connection end with an incomplete body (an error), not a hang.

Both replicas are `python app.py` with the tiny checkpoints on one cache folder; nginx listens on
a loopback port. Without nginx the module skips, or fails when CI requires everything to run
(MOSS_TTS_REQUIRE_BROWSER; scripts/test.sh installs nginx as root).
"""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from support.e2e_helpers import free_port
from support.replica_helpers import ReplicaApp, find_nginx, nginx_proxy, start_replica
from support.server_helpers import wait_until_ready

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
LONG_TEXT = "A replica may go away in the middle of a sentence, and its listeners must learn it at once. " * 4


@pytest.fixture(scope="module")
def replicas(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    find_nginx()  # skip or fail before starting anything
    work = tmp_path_factory.mktemp("replicas")
    cache, ports = work / "cache", (free_port(), free_port())
    with start_replica(data_dir, cache, work / "a.log", ports[0], "--max-active-streams", "4") as a, \
            start_replica(data_dir, cache, work / "b.log", ports[1], "--max-active-streams", "4") as b:
        apps = {f"127.0.0.1:{port}": ReplicaApp(p, f"http://127.0.0.1:{port}", work / f"{n}.log")
                for p, port, n in zip((a, b), ports, "ab")}
        for app in apps.values():
            wait_until_ready(app, 300)
        with nginx_proxy(work / "nginx", free_port(), tuple(apps)) as url:
            yield {"url": url, "apps": apps}


def _clip(data_dir: Path) -> bytes:
    audio, rate = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    out = io.BytesIO()
    sf.write(out, audio[: int(1.5 * rate)], rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


@pytest.mark.timeout(600)
def test_readiness_and_a_saved_voice_through_either_replica(replicas, data_dir: Path) -> None:
    url, apps = replicas["url"], replicas["apps"]
    with httpx.Client(base_url=url, timeout=120) as proxy:
        health = proxy.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ready"
        made = proxy.post("/v1/audio/voices", data={"name": "Behind the proxy"},
                          files={"audio_sample": ("v.wav", _clip(data_dir), "audio/wav")})
        assert made.status_code == 200, made.text
        voice = made.json()["id"]
        served_by = set()
        for _ in range(4):  # round robin: both replicas answer, each with the voice the other saved
            r = proxy.post("/v1/audio/speech", json={"input": "Either one.", "voice": voice,
                                                     "response_format": "pcm", "max_frames": 3, "seed": 1})
            assert r.status_code == 200 and r.headers["x-voice"] == voice and r.content
            served_by.add(r.headers["x-upstream"])
        assert served_by == set(apps)
    for app in apps.values():  # and directly, replica by replica
        with httpx.Client(base_url=app.url, timeout=120) as direct:
            assert voice in {v["id"] for v in direct.get("/v1/audio/voices").json()["data"]}
    with httpx.Client(base_url=url, timeout=120) as proxy, \
            proxy.stream("POST", "/v1/audio/speech", json={"input": LONG_TEXT, "stream_format": "audio",
                                                            "response_format": "pcm", "max_frames": 60}) as r:
        assert r.status_code == 200  # (nginx takes the X-Accel-Buffering header for itself)
        pieces = list(r.iter_raw())
        assert len(pieces) > 1  # unbuffered: the chunks came through one by one, not as one body


@pytest.mark.timeout(600)
def test_a_replica_killed_mid_stream_costs_only_its_own_streams(replicas) -> None:
    url, apps = replicas["url"], replicas["apps"]
    body = {"input": LONG_TEXT, "stream_format": "audio", "response_format": "pcm", "max_frames": 600, "seed": 3}
    with httpx.Client(base_url=url, timeout=httpx.Timeout(120, read=90),
                      limits=httpx.Limits(max_keepalive_connections=0)) as proxy:
        streams = []
        for _ in range(4):
            r = proxy.send(proxy.build_request("POST", "/v1/audio/speech", json=body), stream=True)
            assert r.status_code == 200, r.read()
            pieces = r.iter_raw()
            assert next(pieces)  # audio is flowing
            streams.append((r.headers["x-upstream"], r, pieces))
        upstreams = [s[0] for s in streams]
        assert set(upstreams) == set(apps), upstreams  # two on each replica
        victim = upstreams[0]
        apps[victim].process.send_signal(signal.SIGKILL)
        outcomes = {}
        for index, (upstream, response, pieces) in enumerate(streams):
            try:
                for _ in pieces:
                    pass
                outcomes[index] = (upstream, "complete")
            except httpx.RemoteProtocolError:  # the body ended before its last chunk: a clean error
                outcomes[index] = (upstream, "broken")
            finally:
                response.close()
        for upstream, outcome in outcomes.values():
            assert outcome == ("broken" if upstream == victim else "complete"), outcomes
        after = proxy.post("/v1/audio/speech", json={"input": "Still here.", "response_format": "pcm",
                                                     "max_frames": 3})
        assert after.status_code == 200 and after.headers["x-upstream"] != victim
