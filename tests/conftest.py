"""Shared fixtures: small corpora, stores on temporary paths, the fast test embedder, and a model
endpoint.

``chat_server``: a real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol.
Tests script its answers: ``server.script(fn)`` where ``fn(request) -> Reply`` sees the request
body and its number, or ``server.queue(reply, …)`` for answers in order. Every request is kept
(``server.requests``), so tests can assert exactly how many calls were made.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import hypothesis
import pytest
import torch  # noqa: F401  (loaded once, first: see _process_settings)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# How many examples a property test draws, by $HYPOTHESIS_PROFILE: "ci" (the default, and what
# ./scripts/test.sh runs the whole suite with) or "fast"/"dev" (./scripts/test.sh --fast). A test
# that sets max_examples itself keeps its own count.
hypothesis.settings.register_profile("ci", max_examples=20)
hypothesis.settings.register_profile("fast", max_examples=3)
hypothesis.settings.register_profile("dev", parent=hypothesis.settings.get_profile("fast"))
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")


# -- test tiers ---------------------------------------------------------------------------------

# A test that uses one of these fixtures carries the marker, whatever its module says: the fast
# tier (./scripts/test.sh --fast) deselects it. pyproject.toml lists the markers.
FIXTURE_MARKERS = {"s3_endpoint": "s3", "postgres": "postgres", "minilm": "minilm", "minilm_sample_store": "minilm",
                   "minilm_vectors": "minilm"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in fixtures:
                item.add_marker(marker)
    items[:] = in_starting_order(items)


def in_starting_order(items: list) -> list:
    """The tests in the order they start: the first that reads ``minilm_sample_store`` (the
    suite's one MiniLM build of the sample, minutes on one worker) first, the others that read it
    last, every other test in its place. Where its module is collected, the build started six
    minutes into a run; and a worker that reaches a reader while another builds waits on the
    build's lock."""
    readers = [item for item in items if "minilm_sample_store" in getattr(item, "fixturenames", ())]
    if not readers:
        return items
    later = {id(item) for item in readers}
    return [readers[0], *(item for item in items if id(item) not in later), *readers[1:]]


# -- what a test may not leave behind -----------------------------------------------------------


_PYTEST_OWN_VARIABLES = {"PYTEST_CURRENT_TEST"}  # pytest sets it at each phase of every test
# Set once by a library as it is first loaded (torch's compiler and OpenMP set-up when transformers'
# models first load, an allocator setting when polars first loads): counted when a test changes or
# removes them, not when a first load sets them.
_SET_ON_FIRST_LOAD = {"KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR", "_RJEM_MALLOC_CONF"}


def _process_settings() -> dict:
    """The process-wide settings a test could change and forget: the environment, the thread pools
    of BLAS and OpenMP (threadpoolctl), and torch's intra-op threads. torch is loaded before the
    first test (below), so that a test which first loads it cannot hide a change of its threads."""
    from threadpoolctl import threadpool_info

    settings = {
        "environment": {k: v for k, v in os.environ.items() if k not in _PYTEST_OWN_VARIABLES},
        "thread pools": sorted((p["user_api"], p["filepath"], p["num_threads"]) for p in threadpool_info()),
    }
    settings["torch threads"] = sys.modules["torch"].get_num_threads()
    return settings


def _differences(before: dict, after: dict) -> list[str]:
    said = []
    env_before, env_after = before["environment"], after["environment"]
    for name in sorted(set(env_before) | set(env_after)):
        if name in _SET_ON_FIRST_LOAD and name not in env_before:
            continue
        if env_before.get(name) != env_after.get(name):
            said.append(f"environment variable {name}: {env_before.get(name)!r} -> {env_after.get(name)!r}")
    pools_before = {(api, path): n for api, path, n in before["thread pools"]}
    for api, path, n in after["thread pools"]:
        if (api, path) in pools_before and pools_before[(api, path)] != n:
            said.append(f"{api} threads of {os.path.basename(path)}: {pools_before[(api, path)]} -> {n}")
    if before["torch threads"] != after["torch threads"]:
        said.append(f"torch threads: {before['torch threads']} -> {after['torch threads']}")
    return said


def _restore(before: dict) -> None:
    from threadpoolctl import ThreadpoolController

    for name in set(os.environ) - set(before["environment"]) - _PYTEST_OWN_VARIABLES:
        del os.environ[name]
    os.environ.update(before["environment"])
    controller = ThreadpoolController()
    for _api, path, n in before["thread pools"]:  # each library as it was: two BLAS libraries may differ
        controller.select(filepath=path).limit(limits=n)
    sys.modules["torch"].set_num_threads(before["torch threads"])


@pytest.fixture(autouse=True)
def leaves_process_settings_as_found():
    """Fails a test that leaves the environment, BLAS/OpenMP threads or torch's threads changed
    (set them with ``monkeypatch``, or in a context that restores them), and restores them, so that
    the tests after it run as they would alone. Set up before any other fixture of the test, it is
    torn down after them: what ``monkeypatch`` undoes is not counted."""
    before = _process_settings()
    yield
    after = _process_settings()
    changed = _differences(before, after)
    if changed:
        _restore(before)
        pytest.fail("the test left process settings changed: " + "; ".join(changed), pytrace=False)


@pytest.fixture
def store(tmp_path):
    from lightfoot_pipeline.store.store import Store

    return Store(str(tmp_path / "store"))


@pytest.fixture(scope="session")
def hashing_embedder():
    from lightfoot_pipeline.models.embedder import HashingEmbedder

    return HashingEmbedder(dim=32)


@pytest.fixture(scope="session")
def sample_dir():
    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir

    return bundled_sample_dir()


@pytest.fixture(scope="session")
def sample_documents(sample_dir):
    from lightfoot_pipeline.ingest.dataset import load_corpus

    return load_corpus(sample_dir)


@pytest.fixture(scope="session")
def sample_records(sample_dir):
    from lightfoot_pipeline.ingest.dataset import load_recorded_extractions

    return load_recorded_extractions(sample_dir)


@pytest.fixture(scope="session")
def sample_store_built(tmp_path_factory, sample_documents, sample_records, hashing_embedder):
    """The directory of a store of the whole bundled sample (recorded extractions, the hashing
    embedder of ``hashing_embedder``, the default index settings), built once per session. Tests
    read it, or copy it (``shutil.copytree``) to change the copy: none may write to it."""
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.store.store import Store

    root = tmp_path_factory.mktemp("sample-store") / "store"
    operations.ingest(Store(str(root)), sample_documents, ReplayExtractor(sample_records), hashing_embedder)
    return root


@pytest.fixture(scope="session")
def minilm():
    from lightfoot_pipeline.models.embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.fixture(scope="session")
def minilm_sample_store(tmp_path_factory, sample_dir, minilm):
    """The directory of a store of the whole bundled sample built with the packaged MiniLM (recorded
    extractions, default settings), with its snapshot exported: the one MiniLM build of the suite.
    Tests read it or copy it (``shutil.copytree``); none may write to it.

    Under pytest-xdist the workers share it: the first to need it builds it in the run's common
    temporary directory while holding a file lock, and the others wait for it and read it.
    """
    from filelock import FileLock

    from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.store.store import Store

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above each worker's own
    root, built = shared / "minilm-sample" / "store", shared / "minilm-sample" / "built"
    with FileLock(str(shared / "minilm-sample.lock")):
        if not built.exists():
            store = Store(str(root))
            ensure_dataset_indexed(store, sample_dir, minilm)
            export_snapshot(store, minilm)
            built.write_text("built\n")
    return root


@pytest.fixture(scope="session")
def minilm_vectors(minilm_sample_store, minilm):
    """MiniLM with the vectors of ``minilm_sample_store``: a text the session's build embedded comes
    from its vector caches (the same vector MiniLM gives it, whatever the batch), any other is
    embedded. Builds of the sample's documents with it index for real and embed nothing twice."""
    from lightfoot_pipeline.evaluation.ablation import ReusedVectors
    from lightfoot_pipeline.store.store import Store

    reused = ReusedVectors(minilm)
    reused.add_store(Store(str(minilm_sample_store)))
    return reused


# -- a chat-completions endpoint ----------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer: a completion with ``content``, or an HTTP error ``status``."""

    content: str | None = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (longer than the client timeout = a timeout)
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens); None: derived from lengths
    body: str | None = None  # a raw body, sent as is


@dataclass
class Request:
    number: int
    path: str
    headers: dict
    body: dict

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages", [])

    @property
    def user_text(self) -> str:
        return "\n".join(m["content"] for m in self.messages if m.get("role") == "user")

    @property
    def response_format(self) -> str | None:
        fmt = self.body.get("response_format")
        return fmt.get("type") if isinstance(fmt, dict) else None


def minified(record: dict) -> str:
    """A record as the prompt asks for it: one line of minified JSON."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class _Listener(ThreadingHTTPServer):
    request_queue_size = 128  # tests open dozens of connections at once (the default backlog is 5)


class LoopbackServer:
    """An endpoint a test plays on 127.0.0.1 (its ``/v1`` base URL), served by a daemon thread
    that ``start`` starts and ``stop`` ends."""

    def _listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = _Listener(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class ChatServer(LoopbackServer):
    """Tests reach the reply type as ``chat_server.Reply`` (conftest modules are not importable)."""

    Reply = Reply

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._script: Callable[[Request], Reply] = lambda request: Reply(content='{"entities":[],"facts":[]}')
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the server was answering at once
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                with server._lock:
                    request = Request(next(server._counter), self.path, dict(self.headers.items()), body)
                    server.requests.append(request)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server._script(request)
                    if reply.delay:
                        time.sleep(reply.delay)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                if reply.body is not None:
                    payload = reply.body.encode()
                elif reply.status != 200:
                    payload = json.dumps({"error": {"message": f"scripted status {reply.status}",
                                                    "type": "scripted", "code": None}}).encode()
                else:
                    prompt = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
                    tokens_in, tokens_out = reply.usage or (prompt, len(reply.content or "") // 4)
                    payload = json.dumps({
                        "id": f"chatcmpl-{request.number}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "scripted"),
                        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                  "total_tokens": tokens_in + tokens_out},
                    }).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, str(value))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._listen(Handler)

    def script(self, fn: Callable[[Request], Reply]) -> None:
        self._script = fn

    def queue(self, *replies: Reply, then: Reply | None = None) -> None:
        """Answer with these replies in order, then with ``then`` (default: the last one)."""
        pending = list(replies)
        last = then or replies[-1]
        lock = threading.Lock()

        def next_reply(request: Request) -> Reply:
            with lock:
                return pending.pop(0) if pending else last

        self._script = next_reply

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.max_in_flight = 0

    @property
    def count(self) -> int:
        return len(self.requests)

    @staticmethod
    def minified(record: dict) -> str:
        return minified(record)


@pytest.fixture
def chat_server():
    server = ChatServer().start()
    yield server
    server.stop()


@pytest.fixture
def batch_server():
    """A provider's Batch API (``/v1/files``, ``/v1/batches``) on 127.0.0.1: tests/batch_server.py."""
    from tests.batch_server import BatchServer

    server = BatchServer().start()
    yield server
    server.stop()


# -- document files, built in the test -----------------------------------------------------------


class DocumentFiles:
    """Builders of real files of each type that ``lightfoot sync`` reads (fpdf2, python-docx)."""

    @staticmethod
    def pdf(pages: list[str], title: str | None = None, password: str | None = None) -> bytes:
        """A PDF with one page per text (paragraphs apart by blank lines); encrypted with ``password``."""
        from fpdf import FPDF

        pdf = FPDF()
        pdf.set_font("Helvetica", size=11)
        if title:
            pdf.set_title(title)
        if password:
            pdf.set_encryption(owner_password="owner-" + password, user_password=password)
        for text in pages:
            pdf.add_page()
            for paragraph in text.split("\n\n"):
                pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(6)
        return bytes(pdf.output())

    @staticmethod
    def docx(sections: list[tuple[int, str, list[str]]], title: str | None = None) -> bytes:
        """A Word document: (heading level, heading, paragraphs) per section, with a Title paragraph."""
        import io

        import docx

        document = docx.Document()
        if title:
            document.add_heading(title, level=0)
        for level, heading, paragraphs in sections:
            document.add_heading(heading, level=level)
            for paragraph in paragraphs:
                document.add_paragraph(paragraph)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    @staticmethod
    def html(title: str, sections: list[tuple[str, list[str]]], chrome: str = "SITE-CHROME") -> bytes:
        """A page with navigation, a header, a sidebar and a footer around its article, each saying ``chrome``."""
        body = "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p}</p>" for p in ps) for h, ps in sections)
        return (
            f"<!DOCTYPE html><html><head><title>{title}</title><style>.{chrome} {{}}</style>"
            f"<script>var x = '{chrome}';</script></head><body>"
            f"<header><a href='/'>{chrome} home</a></header>"
            f"<nav><ul><li><a href='/a'>{chrome} menu</a></li></ul></nav>"
            f"<div role='navigation'>{chrome} breadcrumbs</div>"
            f"<main><article><h1>{title}</h1>{body}</article></main>"
            f"<aside>{chrome} related links</aside><footer>{chrome} copyright</footer></body></html>"
        ).encode()

    @staticmethod
    def markdown(title: str, sections: list[tuple[str, list[str]]]) -> bytes:
        body = "".join(f"## {h}\n\n" + "".join(f"{p}\n\n" for p in ps) for h, ps in sections)
        return f"# {title}\n\n{body}".encode()


@pytest.fixture
def document_files():
    """Builders of PDF, Word, HTML and Markdown files: ``document_files.pdf([...])`` and so on."""
    return DocumentFiles
