"""Hostile clients of issue 14, shared by the tests (which assert) and
`python -m bench.reliability.figures` (which measures): idle connections, stalled uploads, Gradio file-input payloads naming server files
or URLs, and all of them at once. Every one of them is bounded in count and stops when told."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from studio.settings import ServerSettings

# Just under the default body cap: four of these used to reserve the whole in-flight budget.
STALLED_BYTES = ServerSettings().body_limit_bytes - 1
FILE_TYPES = ("audio", "file", "image", "video", "uploadbutton", "model3d", "gallery", "dataframe")
# Defaults Gradio accepts for the other inputs of an event (its preprocess must not fail first).
_PLAIN_VALUES = {"textbox": "", "markdown": "", "dropdown": None, "state": None, "checkbox": False,
                 "slider": 0, "number": 0, "radio": None, "checkboxgroup": [], "html": ""}


def file_data(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}, "orig_name": path.rsplit("/", 1)[-1]}


@dataclass(frozen=True, slots=True)
class FileEvent:
    """One event of the page with at least one file input (found in Gradio's /config)."""

    fn_index: int
    api_name: str | None
    input_types: tuple[str, ...]
    trigger_id: int | None

    def data(self, path: str) -> list:
        return [file_data(path) if kind in FILE_TYPES else _PLAIN_VALUES.get(kind) for kind in self.input_types]


def file_events(url: str) -> list[FileEvent]:
    """Every event of the page whose inputs include a file component."""
    config = httpx.get(url + "/config", timeout=30).json()
    kinds = {c["id"]: c["type"] for c in config["components"]}
    events = []
    for index, dep in enumerate(config["dependencies"]):
        types = tuple(kinds[i] for i in dep["inputs"])
        if any(t in FILE_TYPES for t in types):
            trigger = dep["targets"][0][0] if dep.get("targets") else None
            events.append(FileEvent(dep.get("id", index), dep.get("api_name"), types, trigger))
    return events


def post_file_payload(client: httpx.Client, event: FileEvent, path: str, route: str) -> httpx.Response:
    """Post `path` as every file input of `event` through one of Gradio's event routes."""
    session = uuid.uuid4().hex[:10]
    data = event.data(path)
    if route == "run/predict":
        return client.post("/gradio_api/run/predict", json={"fn_index": event.fn_index, "data": data,
                                                            "session_hash": session})
    if route == "queue/join":
        return client.post("/gradio_api/queue/join", json={"fn_index": event.fn_index, "data": data,
                                                           "session_hash": session, "event_data": None,
                                                           "trigger_id": event.trigger_id})
    return client.post(f"/gradio_api/{route}/{event.api_name}", json={"data": data, "session_hash": session})


EVENT_ROUTES = ("run/predict", "queue/join", "call", "run", "api")


@dataclass
class HeldSockets:
    """Keeps `count` connections open on 127.0.0.1:`port`, each sending `opening` (maybe nothing)
    and then nothing more; a connection the server closes is opened again (an attacker would).
    Runs in a thread: `with HeldSockets(port, 1000): ...`."""

    port: int
    count: int
    opening: bytes = b""
    reopen: bool = True
    opened: int = 0  # connections made in all
    closed_by_server: int = 0
    refused_503: int = 0  # closed with a 503 answer (the connection cap)
    failures: int = 0  # connects that failed
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def _connect(self, selector: selectors.BaseSelector) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if self.opening:
                sock.sendall(self.opening)
            sock.setblocking(False)
        except OSError:
            self.failures += 1
            return
        self.opened += 1
        selector.register(sock, selectors.EVENT_READ)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            for _ in range(self.count):
                if self._stop.is_set():
                    break
                self._connect(selector)
            self._ready.set()
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.2):
                    sock = key.fileobj
                    try:
                        data = sock.recv(4096)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if data.startswith(b"HTTP/1.1 503"):
                        self.refused_503 += 1
                    selector.unregister(sock)
                    sock.close()
                    self.closed_by_server += 1
                    if self.reopen and not self._stop.is_set():
                        self._connect(selector)
        finally:
            self._ready.set()
            for key in list(selector.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()
            selector.close()

    @property
    def open_now(self) -> int:
        return self.opened - self.closed_by_server

    def __enter__(self) -> HeldSockets:
        self._thread = threading.Thread(target=self._run, name="held-sockets", daemon=True)
        self._thread.start()
        self._ready.wait(120)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


def stalled_upload_head(content_length: int, route: str = "/v1/audio/speech") -> bytes:
    """Headers of a POST announcing a large body, which then never comes."""
    return (f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {content_length}\r\n\r\n").encode()


@dataclass
class FilePayloadFlood:
    """Posts the /dev/zero payload to every file event, round after round, in a thread."""

    url: str
    path: str = "/dev/zero"
    statuses: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            events = file_events(self.url)
            while not self._stop.is_set():
                for event in events:
                    for route in ("run/predict", "queue/join"):
                        try:
                            self.statuses.append(post_file_payload(client, event, self.path, route).status_code)
                        except httpx.HTTPError:
                            self.statuses.append(0)
                self._stop.wait(0.2)

    def __enter__(self) -> FilePayloadFlood:
        self._thread = threading.Thread(target=self._run, name="file-payload-flood", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)


@contextlib.contextmanager
def combined_attack(url: str, *, idle: int = 1000, stalled: int = 4, stalled_bytes: int = STALLED_BYTES):
    """Issue 14's combined attack: `stalled` stalled uploads + `idle` idle connections + the
    /dev/zero payload on every file event, all at once, until the block ends."""
    port = int(url.rsplit(":", 1)[1])
    with HeldSockets(port, stalled, opening=stalled_upload_head(stalled_bytes)) as uploads, \
            HeldSockets(port, idle) as idlers, FilePayloadFlood(url) as flood:
        deadline = time.monotonic() + 30
        while not flood.statuses and time.monotonic() < deadline:  # the payloads are on their way
            time.sleep(0.05)
        yield {"uploads": uploads, "idle": idlers, "flood": flood}
