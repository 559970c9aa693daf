"""The voice library shared by several processes (replicas on one volume): nothing lost, nothing
half-written, the limit held across processes.

First the library itself, from four real processes (multiprocessing, spawn) saving, listing and
deleting at once on one folder; then two real `python app.py` servers on one cache folder doing the
same over HTTP, each seeing the other's voices.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from support.e2e_helpers import free_port
from support.replica_helpers import ReplicaApp, start_replica
from support.server_helpers import wait_until_ready

from tts_core.errors import InvalidRequestError
from tts_core.voices.library import VoiceLibrary

CODES = np.arange(64, dtype=np.int64).reshape(4, 16)


def _worker(folder: str, worker: int, saves: int, max_voices: int, deletes: bool, start, out) -> None:
    """One process: save `saves` voices (deleting every third one it made when `deletes`), listing
    in between; all workers begin together (`start`, a barrier)."""
    library = VoiceLibrary(Path(folder), max_voices=max_voices)
    made, deleted, refused = [], [], 0
    start.wait()
    for index in range(saves):
        sample = f"worker {worker} voice {index} ".encode() * 2000  # ~40 KB: a write takes a while
        try:
            voice = library.add(name=f"W{worker} v{index}", sample=sample, codes=CODES, fingerprint="codec-a",
                                sample_seconds=1.0)
            made.append((voice.id, sample.decode()))
        except InvalidRequestError:
            refused += 1
        library.list()  # reading while others write must never fail or see half a voice
        if deletes and made and index % 3 == 2:
            deleted.append(library.delete(made[-1][0]).id)
    out.put({"made": made, "deleted": deleted, "refused": refused})


def _run_workers(folder: Path, workers: int, saves: int, max_voices: int, deletes: bool = True) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    queue, start = context.Queue(), context.Barrier(workers)
    processes = [context.Process(target=_worker, args=(str(folder), w, saves, max_voices, deletes, start, queue))
                 for w in range(workers)]
    for process in processes:
        process.start()
    results = [queue.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    return results


def _check_folder(folder: Path, expected: dict[str, str]) -> None:
    """Exactly the expected voices, each complete, and no staging or trash left behind."""
    library = VoiceLibrary(folder)
    listed = {voice.id for voice in library.list()}
    assert listed == set(expected)
    for voice_id, sample in expected.items():
        assert library.sample(voice_id) == sample.encode()
        assert json.loads((folder / voice_id / "voice.json").read_text())["id"] == voice_id
        assert (library.codes(voice_id, "codec-a") == CODES).all()
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    assert leftovers == []


def test_four_processes_saving_listing_deleting_lose_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "library"
    results = _run_workers(folder, workers=4, saves=9, max_voices=64)
    deleted = {voice_id for r in results for voice_id in r["deleted"]}
    expected = {voice_id: sample for r in results for voice_id, sample in r["made"] if voice_id not in deleted}
    assert sum(len(r["made"]) for r in results) == 36 and len(deleted) == 12
    _check_folder(folder, expected)


def test_the_limit_holds_across_processes(tmp_path: Path) -> None:
    """4 processes, started together, each saving 3 voices against a limit of 4: exactly 4 are
    saved and 8 refused with the library's clear 400 (without a lock shared by the processes, they
    all counted the same free places and saved more)."""
    folder = tmp_path / "library"
    results = _run_workers(folder, workers=4, saves=3, max_voices=4, deletes=False)
    expected = {voice_id: sample for r in results for voice_id, sample in r["made"]}
    assert len(expected) == 4 and sum(r["refused"] for r in results) == 8
    _check_folder(folder, expected)


# ---- two servers, one cache folder ----------------------------------------------------------------


def _clip(data_dir: Path, seconds: float) -> bytes:
    audio, rate = sf.read(data_dir / "presets" / "en_2.wav", dtype="float32", always_2d=True)
    out = io.BytesIO()
    sf.write(out, audio[: int(seconds * rate)], rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_two_servers_on_one_cache_folder_save_list_and_delete_concurrently(data_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ports = [free_port(), free_port()]
    clips = [_clip(data_dir, 1.0 + 0.25 * i) for i in range(6)]
    with start_replica(data_dir, cache, tmp_path / "a.log", ports[0]) as a, \
            start_replica(data_dir, cache, tmp_path / "b.log", ports[1]) as b:
        apps = [ReplicaApp(p, f"http://127.0.0.1:{port}", tmp_path / f"{n}.log") for p, port, n in zip((a, b), ports, "ab")]
        for app in apps:
            wait_until_ready(app, 240)
        made: list[list[tuple[str, bytes]]] = [[], []]
        errors: list[BaseException] = []

        def client(index: int) -> None:
            try:
                with httpx.Client(base_url=apps[index].url, timeout=120) as http:
                    for n, clip in enumerate(clips):
                        r = http.post("/v1/audio/voices", data={"name": f"Replica {index} voice {n}"},
                                      files={"audio_sample": ("v.wav", clip, "audio/wav")})
                        assert r.status_code == 200, r.text
                        made[index].append((r.json()["id"], clip))
                        assert r.json()["id"] in {v["id"] for v in http.get("/v1/audio/voices").json()["data"]}
                        if n % 2 == 1:  # delete every second one, while the other replica saves
                            gone = made[index].pop()[0]
                            assert http.delete(f"/v1/audio/voices/{gone}").status_code == 200
            except BaseException as exc:  # re-raised in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(i,)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors[0]
        expected = dict(made[0] + made[1])
        assert len(expected) == 6
        for app in apps:  # each replica lists the other's voices, complete, and speaks with them
            with httpx.Client(base_url=app.url, timeout=120) as http:
                assert {v["id"] for v in http.get("/v1/audio/voices").json()["data"]} == set(expected)
                for voice_id, clip in expected.items():
                    assert http.get(f"/v1/audio/voices/{voice_id}/sample").content == clip
                spoken = http.post("/v1/audio/speech", json={"input": "Either replica.", "voice": made[0][0][0],
                                                             "response_format": "pcm", "max_frames": 3})
                assert spoken.status_code == 200 and spoken.headers["x-voice"] == made[0][0][0]
    library = cache / "voices" / "library"
    assert not [p for p in library.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
