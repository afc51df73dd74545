"""The query service under a bounded, hostile load on loopback.

    python benchmarks/serve_load.py [--store URI] [--embedder minilm|hashing:DIM] [--requests 2000]
                                    [--clients 32] [--stalled 200] [--bodies 10] [--body-mb 100]
                                    [--workers 2] [--json OUT.json]

It first times the service's query path without HTTP (``retrieval_alone``: two threads in this
process), for comparison. Then it starts ``lightfoot serve`` on 127.0.0.1 (a free port, a random
token, answers off, no reranker) over the bundled sample (built into ``--store`` first if the
store lacks it: recorded extractions, no model call), warms it up, and then, all at once:

- ``--clients`` clients send ``--requests`` authenticated retrieval queries (the sample's dev
  questions) over kept-alive connections, as fast as they are answered;
- ``--stalled`` connections stall: half send nothing, half send part of their headers and stop.
  A stalled connection that the server closes is opened again, so the number stays up for the
  whole run;
- ``--bodies`` clients each send a body of ``--body-mb`` MB (half with ``Content-Length``, half
  chunked), as fast as the server takes it;
- a prober, in a process of its own, asks ``GET /health`` every 50 ms on a fresh connection and
  reads the server's RSS; a second one probes a trivial asyncio server in another process, to
  show what the machine's own scheduling adds;
- unauthenticated and wrongly authenticated queries are sent.

With ``--isolation`` it measures instead what one client can take from the others, in one run
against one server (rate limits off, so that only the connection bound and the pools are
measured; each client on an address of its own in 127.0.0.0/8):

- ``--clients`` authenticated query clients and a ``/health`` prober for ``--phase-s`` seconds,
  alone and then beside a connection flood: a process holding ``--flood`` sockets from one address,
  each reopened as soon as the server closes it (the server keeps ``--max-connections-per-client``
  of them and refuses the rest at once). It reports the authenticated p50 and the ``/health`` p99
  in both phases and their ratios (target: within 3x);
- one ``/query`` client alone, and beside four clients opening document after document as the
  page does (``/explain/doc``, then ``/explain/doc/preview``: a deletion preview, never the same
  twice): its p50 in both and the ratio (target: within 2x); and one ``/explain/doc`` client
  alone, a new document each time, whose p50 beside the lone query's is what an explanation
  costs (target: within 3x).

With ``--descriptors`` it measures what a flood of idle sockets takes from others through the
server's file descriptors (``descriptor_flood``): the server starts with a limit of
``--fd-limit`` open files (1,024: soft and hard, so that it cannot raise it), ``--flood`` idle
sockets are opened from 127.0.0.2 and held, and ``--fd-queries`` authenticated queries, each on
a connection of its own, are sent from 127.0.0.1 alone and then beside the flood, with
``/health`` asked after each. It reports the failures (target: 0) and both p50s and their ratio
(target: within 3x).

It checks that every authenticated query got 200, every unauthenticated one 401, every big body
413 (or a closed connection) without the server reading it, ``/health`` answered within 50 ms
(p99 and the slowest probe), and the server's RSS after the load (and at its peak) within 200 MB
of its idle RSS. It prints requests/s, p50/p95 latency, the server's CPU time a request and the
RSS figures, writes them with ``--json``, and exits 1 if a check failed. Everything runs on
loopback and stops by itself (``--timeout``, default 600 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HOST = "127.0.0.1"
HEALTH_LIMIT_MS = 50.0
RSS_LIMIT_MB = 200.0
CHUNK = b"x" * 65536


# -- a minimal HTTP/1.1 client over asyncio streams ---------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def request_bytes(method: str, path: str, body: bytes = b"", token: str | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Load:
    """The load's shared state: the server address, its token, and what was measured."""

    def __init__(self, port: int, token: str, questions: list[str]) -> None:
        self.port = port
        self.token = token
        self.questions = questions
        self.next_question = 0
        self.latencies_ms: list[float] = []
        self.statuses: dict[int, int] = {}
        self.errors: list[str] = []
        self.stalled_open = 0
        self.stalled_closed_by_server = 0
        self.bodies: list[dict] = []
        self.unauthenticated: dict[int, int] = {}
        self.done = asyncio.Event()

    def question(self) -> str:
        question = self.questions[self.next_question % len(self.questions)]
        self.next_question += 1
        return question


async def query_client(load: Load, count: int) -> None:
    reader, writer = await asyncio.open_connection(HOST, load.port)
    try:
        for _ in range(count):
            body = json.dumps({"question": load.question(), "answer": False, "top_k": 10}).encode()
            started = time.perf_counter()
            for attempt in range(2):  # a kept-alive connection the server closed is opened again once
                try:
                    writer.write(request_bytes("POST", "/query", body, load.token))
                    await writer.drain()
                    status, headers, payload = await read_response(reader)
                    break
                except (asyncio.IncompleteReadError, ConnectionError) as err:
                    writer.close()
                    if attempt:
                        raise RuntimeError(f"query connection lost twice: {err!r}") from None
                    reader, writer = await asyncio.open_connection(HOST, load.port)
            load.latencies_ms.append((time.perf_counter() - started) * 1000.0)
            load.statuses[status] = load.statuses.get(status, 0) + 1
            if status != 200:
                load.errors.append(f"query {status}: {payload[:200]!r}")
            elif not json.loads(payload)["passages"]:
                load.errors.append("query answered with no passages")
            if headers.get("connection", "").lower() == "close":
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, load.port)
    finally:
        writer.close()


async def stalled_connection(load: Load, partial: bool) -> None:
    """One connection kept stalled until the load is done; reopened when the server closes it."""
    while not load.done.is_set():
        try:
            reader, writer = await asyncio.open_connection(HOST, load.port)
        except OSError as err:
            load.errors.append(f"stalled connection refused: {err!r}")
            await asyncio.sleep(0.5)
            continue
        load.stalled_open += 1
        try:
            if partial:
                writer.write(f"POST /query HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: appl".encode())
                await writer.drain()
            done = asyncio.ensure_future(load.done.wait())
            closed = asyncio.ensure_future(reader.read(1))
            await asyncio.wait({done, closed}, return_when=asyncio.FIRST_COMPLETED)
            if closed.done():
                load.stalled_closed_by_server += 1
            for future in (done, closed):
                future.cancel()
        except ConnectionError:
            load.stalled_closed_by_server += 1
        finally:
            load.stalled_open -= 1
            writer.close()


async def big_body(load: Load, megabytes: int, chunked: bool) -> None:
    """Send a body of ``megabytes`` MB as fast as the server takes it; record what came back."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, load.port)
    total = megabytes * 1024 * 1024
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    writer.write((f"POST /query HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {load.token}\r\n"
                  f"Content-Type: application/json\r\n{framing}\r\n\r\n").encode())
    response = asyncio.ensure_future(read_response(reader))
    sent = 0
    outcome = {"chunked": chunked, "bytes_offered": total}
    try:
        while sent < total and not response.done():
            piece = CHUNK[: min(len(CHUNK), total - sent)]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            sent += len(piece)
        if chunked and sent >= total:
            writer.write(b"0\r\n\r\n")
        status, _, _ = await asyncio.wait_for(response, 30)
        outcome["status"] = status
    except (ConnectionError, asyncio.IncompleteReadError) as err:
        outcome["status"] = None
        outcome["closed"] = type(err).__name__
        if response.done() and not response.exception():
            outcome["status"] = response.result()[0]
    finally:
        response.cancel()
        writer.close()
    outcome.update(bytes_written_before_refusal=sent, seconds=round(time.perf_counter() - started, 3))
    load.bodies.append(outcome)


async def unauthenticated(load: Load, n: int) -> None:
    for i in range(n):
        reader, writer = await asyncio.open_connection(HOST, load.port)
        try:
            token = None if i % 2 == 0 else "wrong-" + secrets.token_hex(16)
            writer.write(request_bytes("POST", "/query", json.dumps({"question": "who?"}).encode(), token))
            await writer.drain()
            status, _, _ = await read_response(reader)
            load.unauthenticated[status] = load.unauthenticated.get(status, 0) + 1
        finally:
            writer.close()
        await asyncio.sleep(0.05)


# -- probes from threads of their own (blocking sockets, away from the load's event loop) ---------


def health_once(port: int) -> float:
    started = time.perf_counter()
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(request_bytes("GET", "/health"))
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    elapsed = (time.perf_counter() - started) * 1000.0
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"/health answered {data[:80]!r}")
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for process {pid}")


def control_server(ready, stop) -> None:
    """A trivial asyncio HTTP server answering every request with ``{"status": "ok"}``: probed beside
    the service, it shows what the machine's own scheduling adds to a probe's latency."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 16\r\n"
                         b"connection: close\r\n\r\n{\"status\": \"ok\"}")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, HOST, 0)
        ready.send(server.sockets[0].getsockname()[1])
        while not stop.is_set():
            await asyncio.sleep(0.1)
        server.close()

    asyncio.run(serve())


def sample(port: int, pid: int | None, interval_s: float, stop, results) -> None:
    """Every ``interval_s`` until ``stop`` is set: /health's latency and the server's RSS. Runs in a
    process of its own, so that the load's event loop never delays a probe."""
    health_ms, slow, rss, failures = [], [], [], []
    started = time.monotonic()
    while not stop.wait(interval_s):
        try:
            health_ms.append(health_once(port))
            if health_ms[-1] >= HEALTH_LIMIT_MS:
                slow.append([round(time.monotonic() - started, 2), round(health_ms[-1], 1)])
        except (OSError, RuntimeError) as err:
            failures.append(repr(err))
        if pid is not None:
            rss.append(rss_mb(pid))
    results.send({"health_ms": health_ms, "slow": slow, "rss": rss, "failures": failures})


# -- the run ---------------------------------------------------------------------------------------


def retrieval_alone(store_uri: str, questions: list[str], threads: int, n: int = 300) -> dict:
    """What retrieval allows, without HTTP: the service's own query path (retrieval and JSON
    encoding) from ``threads`` threads in this process, and its CPU time per query."""
    from concurrent.futures import ThreadPoolExecutor

    from lightfoot_pipeline.service.app import encode
    from lightfoot_pipeline.service.queries import open_service
    from lightfoot_pipeline.store.store import Store

    service = open_service(Store(store_uri), answers=False)

    def one(i: int) -> None:
        encode(service.query(questions[i % len(questions)], answer=False))

    for i in range(20):
        one(i)
    clock, cpu = time.perf_counter(), time.process_time()
    for i in range(n // 3):
        one(i)
    sequential_ms = (time.perf_counter() - clock) * 1000.0 / (n // 3)
    cpu_ms = (time.process_time() - cpu) * 1000.0 / (n // 3)
    with ThreadPoolExecutor(threads) as pool:
        clock, cpu = time.perf_counter(), time.process_time()
        list(pool.map(one, range(n)))
        elapsed = time.perf_counter() - clock
        threaded_cpu_ms = (time.process_time() - cpu) * 1000.0 / n
    service.close()
    return {"threads": threads, "queries": n, "requests_per_s": round(n / elapsed, 1),
            "sequential_ms_per_query": round(sequential_ms, 2), "cpu_ms_per_query_sequential": round(cpu_ms, 2),
            "cpu_ms_per_query_threads": round(threaded_cpu_ms, 2)}


def prepare_store(store_uri: str, embedder_spec: str) -> None:
    from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.store.store import Store

    store = Store(store_uri)
    embedder = load_embedder("all-MiniLM-L6-v2" if embedder_spec == "minilm" else embedder_spec)
    built = ensure_dataset_indexed(store, bundled_sample_dir(), embedder)
    if built["built"]:
        print(f"built the sample into {store_uri} in {built['seconds']}s", file=sys.stderr)
    export_snapshot(store, embedder)


def start_server(store_uri: str, token: str, args, extra: list[str] = (),
                 fd_limit: int | None = None) -> tuple[subprocess.Popen, int]:
    """``lightfoot serve`` in a process of its own; ``fd_limit``: its soft and hard limit on open files."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY",
                        "LIGHTFOOT_SERVE_TOKENS_FILE", "LIGHTFOOT_SERVE_ANSWERS")}
    env.update(LIGHTFOOT_SERVE_TOKEN=token, LIGHTFOOT_RERANKER="none", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    command = [sys.executable, "-m", "lightfoot_pipeline.cli", "serve", "--store", store_uri, "--host", HOST,
               "--port", "0", "--workers", str(args.workers), "--poll", "30", *extra]
    if fd_limit:  # set in the child before the service runs (no preexec_fn: this process may hold threads)
        command[1:3] = ["-c", "import resource, runpy, sys; n = int(sys.argv.pop(1)); "
                              "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                              "runpy.run_module('lightfoot_pipeline.cli', run_name='__main__', alter_sys=True)",
                        str(fd_limit)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line.startswith("serving snapshot"):
        process.kill()
        raise SystemExit(f"the server did not start: {line}{process.stderr.read()[-3000:]}")
    port = int(line.split(" on ")[1].split()[0].rsplit(":", 1)[1])
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
    return process, port


async def run_load(load: Load, args) -> float:
    per_client = [args.requests // args.clients + (1 if i < args.requests % args.clients else 0)
                  for i in range(args.clients)]
    stalled = [asyncio.ensure_future(stalled_connection(load, partial=i % 2 == 1)) for i in range(args.stalled)]
    while load.stalled_open < args.stalled:
        await asyncio.sleep(0.01)
    bodies = [asyncio.ensure_future(big_body(load, args.body_mb, chunked=i % 2 == 1)) for i in range(args.bodies)]
    started = time.perf_counter()
    await asyncio.gather(unauthenticated(load, 20), *[query_client(load, n) for n in per_client if n], *bodies)
    elapsed = time.perf_counter() - started
    load.done.set()
    await asyncio.gather(*stalled)
    return elapsed


def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


# -- isolation: a flood of connections, and explain clients, beside ordinary clients ---------------


def flood_process(port: int, sockets: int, source: str, stop, results) -> None:
    """Hold ``sockets`` connections from ``source``, each reopened as soon as the server closes it."""

    async def one(counts: dict) -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
            except OSError:
                counts["connect_errors"] += 1
                await asyncio.sleep(0.05)
                continue
            counts["opened"] += 1
            try:
                while not stop.is_set():  # idle: read until the server closes (a refusal, or its header timer)
                    try:
                        data = await asyncio.wait_for(reader.read(4096), 0.5)
                    except TimeoutError:
                        continue
                    if not data:
                        break
                    counts["refusals" if data.startswith(b"HTTP/1.1 429") else "other"] += 1
            except ConnectionError:
                pass
            finally:
                writer.close()

    async def run() -> dict:
        counts = {"opened": 0, "refusals": 0, "other": 0, "connect_errors": 0}
        await asyncio.gather(*[one(counts) for _ in range(sockets)])
        return counts

    results.send(asyncio.run(run()))


async def timed_client(port: int, source: str, make: callable, seconds: float, latencies: list, statuses: dict,
                       limit: int | None = None) -> None:
    """Requests from ``make()`` (bytes) over one kept-alive connection from ``source`` for ``seconds``
    (or ``limit`` requests, if fewer)."""
    reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline and (limit is None or len(latencies) < limit):
            started = time.perf_counter()
            writer.write(make())
            await writer.drain()
            status, headers, _ = await read_response(reader)
            latencies.append((time.perf_counter() - started) * 1000.0)
            statuses[status] = statuses.get(status, 0) + 1
            if headers.get("connection", "").lower() == "close":
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    finally:
        writer.close()


def health_prober(port: int, source: str, seconds: float) -> list[float]:
    """/health on a fresh connection from ``source`` every 20 ms for ``seconds`` (a thread of its own)."""
    out, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        with socket.create_connection((HOST, port), timeout=10, source_address=(source, 0)) as sock:
            sock.sendall(request_bytes("GET", "/health"))
            data = b""
            while not data.endswith(b"}"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        if not data.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"/health answered {data[:80]!r}")
        out.append((time.perf_counter() - started) * 1000.0)
        time.sleep(0.02)
    return out


def query_phase(port: int, token: str, questions: list[str], clients: int, seconds: float) -> dict:
    """``clients`` query clients (127.0.0.10, .11, …) and a /health prober (127.0.0.3) together."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    counter = iter(range(10**9))

    def make() -> bytes:
        body = json.dumps({"question": questions[next(counter) % len(questions)], "answer": False}).encode()
        return request_bytes("POST", "/query", body, token)

    health: list[float] = []
    prober = threading.Thread(target=lambda: health.extend(health_prober(port, "127.0.0.3", seconds)))
    prober.start()

    async def run() -> None:
        await asyncio.gather(*[timed_client(port, f"127.0.0.{10 + i}", make, seconds, latencies, statuses)
                               for i in range(clients)])

    asyncio.run(run())
    prober.join()
    return {"queries": len(latencies), "statuses": {str(k): v for k, v in statuses.items()},
            "query_p50_ms": percentile(latencies, 50), "query_p95_ms": percentile(latencies, 95),
            "health_n": len(health), "health_p50_ms": percentile(health, 50), "health_p99_ms": percentile(health, 99)}


def explain_phase(port: int, token: str, questions: list[str], doc_ids: list[str], explainers: int,
                  seconds: float) -> dict:
    """One query client (127.0.0.20) beside ``explainers`` /explain/doc clients (127.0.0.21, …)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    explained: list[float] = []
    explain_statuses: dict[int, int] = {}
    counter, docs = iter(range(10**9)), iter(range(10**9))

    def query() -> bytes:
        body = json.dumps({"question": questions[next(counter) % len(questions)], "answer": False}).encode()
        return request_bytes("POST", "/query", body, token)

    def explain() -> bytes:  # as the page opens a document: its explanation, then its deletion's dry run
        step = next(docs)
        doc_id = doc_ids[(step // 2) % len(doc_ids)]
        route = "/explain/doc" if step % 2 == 0 else "/explain/doc/preview"
        return request_bytes("GET", f"{route}?doc_id={doc_id}", token=token)

    async def run() -> None:
        await asyncio.gather(timed_client(port, "127.0.0.20", query, seconds, latencies, statuses),
                             *[timed_client(port, f"127.0.0.{21 + i}", explain, seconds, explained, explain_statuses)
                               for i in range(explainers)])

    asyncio.run(run())
    return {"queries": len(latencies), "statuses": {str(k): v for k, v in statuses.items()},
            "query_p50_ms": percentile(latencies, 50), "explains": len(explained),
            "explain_statuses": {str(k): v for k, v in explain_statuses.items()},
            "explain_p50_ms": percentile(explained, 50)}


def explain_cost_phase(port: int, token: str, doc_ids: list[str], seconds: float) -> dict:
    """One client (127.0.0.30) asking /explain/doc for document after document, never the same
    twice (so never from the per-commit cache): what an explanation costs, beside a query's cost.

    The service keeps the store buckets it has read (``Store.keep_buckets``); 40 other documents
    explained first warm them, as a service that has run a while has them."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    warm_up: list[float] = []
    warm = iter(range(len(doc_ids) - 40, len(doc_ids)))
    asyncio.run(timed_client(port, "127.0.0.30", lambda: request_bytes(
        "GET", f"/explain/doc?doc_id={doc_ids[next(warm)]}", token=token), seconds, warm_up, {}, limit=40))
    docs = iter(range(10**9))

    def explain() -> bytes:
        return request_bytes("GET", f"/explain/doc?doc_id={doc_ids[next(docs) % len(doc_ids)]}", token=token)

    asyncio.run(timed_client(port, "127.0.0.30", explain, seconds, latencies, statuses))
    return {"explains": len(latencies), "statuses": {str(k): v for k, v in statuses.items()},
            "explain_p50_ms": percentile(latencies, 50), "explain_p95_ms": percentile(latencies, 95)}


# -- descriptors: idle sockets from one address, beside authenticated queries from another ------------

FLOOD_SCRIPT = """
import resource, socket, sys
port, count, source = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 256)), hard))
held, failed = [], 0
for _ in range(count):
    sock = socket.socket()
    try:
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        held.append(sock)
    except OSError:
        sock.close()
        failed += 1
print(len(held), failed, flush=True)
sys.stdin.read()  # idle until told to stop
"""


def fresh_request(port: int, data: bytes, source: str = HOST, timeout: float = 30.0) -> tuple[int | None, float, str]:
    """One request on a connection of its own from ``source``: (status or None, ms, error)."""
    started = time.perf_counter()
    try:
        with socket.create_connection((HOST, port), timeout=timeout, source_address=(source, 0)) as sock:
            sock.sendall(data)
            received = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
        status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None
        return status, (time.perf_counter() - started) * 1000.0, "" if status else f"no response: {received[:80]!r}"
    except OSError as err:
        return None, (time.perf_counter() - started) * 1000.0, f"{type(err).__name__}: {err}"


def query_round(port: int, token: str, questions: list[str], n: int) -> dict:
    """``n`` authenticated retrieval queries from 127.0.0.1, each on a fresh connection, and
    ``/health`` after each: statuses, failures and the query p50."""
    latencies, statuses, failures, health = [], {}, [], {}
    for i in range(n):
        body = json.dumps({"question": questions[i % len(questions)], "answer": False}).encode()
        status, ms, error = fresh_request(port, request_bytes("POST", "/query", body, token))
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status == 200:
            latencies.append(ms)
        else:
            failures.append(error or f"status {status}")
        probe = fresh_request(port, request_bytes("GET", "/health"))[0]
        health[str(probe)] = health.get(str(probe), 0) + 1
    return {"queries": n, "statuses": statuses, "failures": len(failures), "failure_examples": failures[:3],
            "health_statuses": health, "query_p50_ms": percentile(latencies, 50),
            "query_p95_ms": percentile(latencies, 95)}


def descriptor_flood(store_uri: str, questions: list[str], *, flood: int = 1000, fd_limit: int = 1024,
                     queries: int = 40, workers: int = 2, timeout: float = 300.0) -> dict:
    """The server under a limit of ``fd_limit`` open files; ``queries`` authenticated queries from
    127.0.0.1 alone, then beside ``flood`` idle sockets from 127.0.0.2 (held open, never reopened)."""
    token = secrets.token_urlsafe(32)
    process, port = start_server(store_uri, token, argparse.Namespace(workers=workers),
                                 extra=["--client-rate", "0", "--token-rate", "0"], fd_limit=fd_limit)
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    flooder = None
    try:
        query_round(port, token, questions, 5)  # warm-up
        alone = query_round(port, token, questions, queries)
        flooder = subprocess.Popen([sys.executable, "-c", FLOOD_SCRIPT, str(port), str(flood), "127.0.0.2"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        opened, connect_failures = (int(x) for x in flooder.stdout.readline().split())
        time.sleep(0.5)  # the server has accepted what it will
        server_fds = len(os.listdir(f"/proc/{process.pid}/fd"))
        beside = query_round(port, token, questions, queries)
        server_fds_after = len(os.listdir(f"/proc/{process.pid}/fd"))
    finally:
        watchdog.cancel()
        if flooder is not None:
            flooder.stdin.close()
            flooder.wait(timeout=30)
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    ratio = round(beside["query_p50_ms"] / alone["query_p50_ms"], 2) if alone["query_p50_ms"] and \
        beside["query_p50_ms"] else None
    return {"fd_limit": fd_limit, "flood_sockets": flood, "flood_opened": opened,
            "flood_connect_failures": connect_failures, "server_fds_with_flood": server_fds,
            "server_fds_after_queries": server_fds_after, "alone": alone, "beside_flood": beside,
            "query_p50_ratio": ratio, "load_average_1m": round(os.getloadavg()[0], 2)}


def descriptors(args, store_uri: str, questions: list[str]) -> int:
    figures = descriptor_flood(store_uri, questions, flood=args.flood, fd_limit=args.fd_limit,
                               queries=args.fd_queries, workers=args.workers, timeout=args.timeout)
    alone, beside = figures["alone"], figures["beside_flood"]
    checks = {
        "0 authenticated failures beside the flood": alone["failures"] == beside["failures"] == 0,
        "/health answered 200 throughout": set(alone["health_statuses"]) == set(beside["health_statuses"]) == {"200"},
        "authenticated p50 beside the flood within 3x": (figures["query_p50_ratio"] or 99) <= 3.0,
    }
    figures.update(checks=checks, embedder=args.embedder, cpus=os.cpu_count(), server_workers=args.workers)
    print(f"under a limit of {figures['fd_limit']} open files: {figures['flood_opened']} idle sockets from "
          f"127.0.0.2 ({figures['flood_connect_failures']} failed to connect; the server held "
          f"{figures['server_fds_with_flood']} descriptors with them)")
    print(f"  {alone['queries']} queries alone: p50 {alone['query_p50_ms']} ms, {alone['failures']} failed; "
          f"beside the flood: p50 {beside['query_p50_ms']} ms, {beside['failures']} failed "
          f"({beside['failure_examples']}); ratio {figures['query_p50_ratio']}x")
    return report_checks(args, figures, checks)


def report_checks(args, figures: dict, checks: dict[str, bool]) -> int:
    """Print each check, write the figures to ``--json`` if asked, and the exit code: 0 if all held."""
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(checks.values()) else 1


def isolation(args, store_uri: str, questions: list[str]) -> int:
    from urllib.parse import quote

    from lightfoot_pipeline.store.store import Store
    from lightfoot_pipeline.store.tables import DOCUMENTS

    doc_ids = [quote(d) for d in Store(store_uri).read(DOCUMENTS.name).get_column("doc_id").to_list()]
    token = secrets.token_urlsafe(32)
    process, port = start_server(store_uri, token, args, extra=["--client-rate", "0", "--token-rate", "0"])
    watchdog = threading.Timer(args.timeout, process.kill)
    watchdog.start()
    try:
        warm = Load(port, token, questions)
        asyncio.run(query_client(warm, 20))
        quiet = query_phase(port, token, questions, args.clients, args.phase_s)
        context = multiprocessing.get_context("spawn")
        stop, (receiving, sending) = context.Event(), context.Pipe(duplex=False)
        flooder = context.Process(target=flood_process, args=(port, args.flood, "127.0.0.9", stop, sending))
        flooder.start()
        time.sleep(2.0)  # the flood at full size
        flooded = query_phase(port, token, questions, args.clients, args.phase_s)
        stop.set()
        flood_counts = receiving.recv()
        flooder.join(30)
        alone = explain_phase(port, token, questions, doc_ids, 0, args.phase_s)
        explained = explain_cost_phase(port, token, doc_ids, args.phase_s)
        beside = explain_phase(port, token, questions, doc_ids, 4, args.phase_s)
    finally:
        watchdog.cancel()
        process.terminate()
        process.wait(timeout=30)

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    figures = {
        "quiet": quiet, "flooded": flooded, "flood": {"sockets": args.flood, **flood_counts},
        "query_p50_ratio_flood": ratio(flooded["query_p50_ms"], quiet["query_p50_ms"]),
        "health_p99_ratio_flood": ratio(flooded["health_p99_ms"], quiet["health_p99_ms"]),
        "query_alone": alone, "query_beside_explains": beside,
        "query_p50_ratio_explains": ratio(beside["query_p50_ms"], alone["query_p50_ms"]),
        "explain_alone": explained,
        "explain_over_query_p50": ratio(explained["explain_p50_ms"], alone["query_p50_ms"]),
        "cpus": os.cpu_count(), "server_workers": args.workers, "embedder": args.embedder,
    }
    checks = {
        "every query answered 200": set(quiet["statuses"]) == set(flooded["statuses"]) == {"200"}
        and set(alone["statuses"]) == set(beside["statuses"]) == {"200"},
        "authenticated p50 with the flood within 3x": (figures["query_p50_ratio_flood"] or 99) <= 3.0,
        "/health p99 with the flood within 3x": (figures["health_p99_ratio_flood"] or 99) <= 3.0,
        "/query p50 beside four explain clients within 2x": (figures["query_p50_ratio_explains"] or 99) <= 2.0,
        "/explain/doc p50 alone within 3x a query's": (figures["explain_over_query_p50"] or 99) <= 3.0
        and set(explained["statuses"]) == {"200"},
    }
    figures["checks"] = checks
    print(f"{args.clients} authenticated clients, {args.phase_s:g}s a phase (server workers {args.workers}, "
          f"embedder {args.embedder}, {os.cpu_count()} CPUs)")
    print(f"  without the flood: query p50 {quiet['query_p50_ms']} ms ({quiet['queries']} queries), "
          f"/health p99 {quiet['health_p99_ms']} ms ({quiet['health_n']} probes)")
    print(f"  with {args.flood} flood sockets from one address ({flood_counts['opened']} opened, "
          f"{flood_counts['refusals']} refused with 429): query p50 {flooded['query_p50_ms']} ms "
          f"({flooded['queries']} queries), /health p99 {flooded['health_p99_ms']} ms; ratios "
          f"{figures['query_p50_ratio_flood']}x, {figures['health_p99_ratio_flood']}x")
    print(f"  one /query client alone: p50 {alone['query_p50_ms']} ms; beside four /explain/doc clients "
          f"({beside['explains']} explained, p50 {beside['explain_p50_ms']} ms, {beside['explain_statuses']}): "
          f"p50 {beside['query_p50_ms']} ms; ratio {figures['query_p50_ratio_explains']}x")
    print(f"  one /explain/doc client alone, a new document each time: p50 {explained['explain_p50_ms']} ms "
          f"({explained['explains']} explained); {figures['explain_over_query_p50']}x a query's p50")
    return report_checks(args, figures, checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="store holding (or to hold) the bundled sample")
    parser.add_argument("--embedder", default="minilm", help="minilm (default) or hashing:DIM for a new store")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--stalled", type=int, default=200)
    parser.add_argument("--bodies", type=int, default=10)
    parser.add_argument("--body-mb", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="the server's retrieval threads")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the run gives up")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--skip-alone", action="store_true",
                        help="do not first measure retrieval alone, in this process, for comparison")
    parser.add_argument("--isolation", action="store_true",
                        help="measure what a connection flood and explain clients take from other clients instead")
    parser.add_argument("--flood", type=int, default=1000, help="--isolation: the flood's sockets")
    parser.add_argument("--phase-s", type=float, default=12.0, help="--isolation: seconds a phase")
    parser.add_argument("--descriptors", action="store_true",
                        help="measure what idle sockets under a low open-file limit take from other clients instead")
    parser.add_argument("--fd-limit", type=int, default=1024, help="--descriptors: the server's open-file limit")
    parser.add_argument("--fd-queries", type=int, default=40, help="--descriptors: queries alone and beside")
    args = parser.parse_args()
    if min(args.requests, args.clients) < 1 or min(args.stalled, args.bodies, args.body_mb) < 0:
        parser.error("--requests and --clients must be positive, the others not negative")

    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_questions

    work = None
    store_uri = args.store
    if store_uri is None:
        work = tempfile.TemporaryDirectory(prefix="lightfoot-serve-load-")
        store_uri = str(Path(work.name) / "store")
    prepare_store(store_uri, args.embedder)
    questions = [q.question for q in load_questions(bundled_sample_dir() / "questions-dev.jsonl")]
    if args.isolation:
        return isolation(args, store_uri, questions)
    if args.descriptors:
        return descriptors(args, store_uri, questions)
    alone = None if args.skip_alone else retrieval_alone(store_uri, questions, args.workers)
    token = secrets.token_urlsafe(32)
    process, port = start_server(store_uri, token, args)
    watchdog = threading.Timer(args.timeout, process.kill)
    watchdog.start()
    try:
        warm = Load(port, token, questions)
        asyncio.run(query_client(warm, 20))
        if warm.errors:
            raise SystemExit(f"warm-up failed: {warm.errors[:3]}")
        idle_health = [health_once(port) for _ in range(20)]
        time.sleep(0.5)
        rss_idle = rss_mb(process.pid)
        context = multiprocessing.get_context("spawn")
        stop, (receiving, sending) = context.Event(), context.Pipe(duplex=False)
        sampler = context.Process(target=sample, args=(port, process.pid, 0.05, stop, sending), daemon=True)
        control_port, control_ready = context.Pipe(duplex=False)
        control = context.Process(target=control_server, args=(control_ready, stop), daemon=True)
        control.start()
        control_receiving, control_sending = context.Pipe(duplex=False)
        control_sampler = context.Process(target=sample, args=(control_port.recv(), None, 0.05, stop,
                                                               control_sending), daemon=True)
        load = Load(port, token, questions)
        load_before = os.getloadavg()[0]
        sampler.start()
        control_sampler.start()
        server_cpu, client_cpu = cpu_seconds(process.pid), time.process_time()
        elapsed = asyncio.run(asyncio.wait_for(run_load(load, args), args.timeout))
        server_cpu, client_cpu = cpu_seconds(process.pid) - server_cpu, time.process_time() - client_cpu
        stop.set()
        probes, control_probes = receiving.recv(), control_receiving.recv()
        for helper in (sampler, control_sampler, control):
            helper.join(30)
        time.sleep(1.0)
        rss_after = rss_mb(process.pid)
        final_health = health_once(port)
    finally:
        watchdog.cancel()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        if work is not None:
            work.cleanup()

    answered = load.statuses.get(200, 0)
    refused_bodies = [b for b in load.bodies if b.get("status") == 413 or (b.get("status") is None and b.get("closed"))]
    figures = {
        "requests": args.requests, "clients": args.clients, "stalled_connections": args.stalled,
        "big_bodies": args.bodies, "body_mb": args.body_mb, "server_workers": args.workers,
        "embedder": args.embedder, "seconds": round(elapsed, 2),
        "requests_per_s": round(answered / elapsed, 1),
        "latency_ms": {"p50": percentile(load.latencies_ms, 50), "p95": percentile(load.latencies_ms, 95),
                       "p99": percentile(load.latencies_ms, 99), "max": percentile(load.latencies_ms, 100)},
        "statuses": {str(k): v for k, v in sorted(load.statuses.items())},
        "server_cpu_s": round(server_cpu, 2), "server_cpu_ms_per_request": round(server_cpu * 1000 / args.requests, 2),
        "load_client_cpu_s": round(client_cpu, 2),
        "retrieval_alone": alone,
        "unauthenticated_statuses": {str(k): v for k, v in sorted(load.unauthenticated.items())},
        "health_ms_idle": {"p50": percentile(idle_health, 50), "max": percentile(idle_health, 100)},
        "health_ms_under_load": {"n": len(probes["health_ms"]), "p50": percentile(probes["health_ms"], 50),
                                 "p95": percentile(probes["health_ms"], 95), "p99": percentile(probes["health_ms"], 99),
                                 "max": percentile(probes["health_ms"], 100), "failures": probes["failures"][:5],
                                 "slow_probes_s_ms": probes["slow"][:50]},
        "control_health_ms_under_load": {
            "n": len(control_probes["health_ms"]), "p50": percentile(control_probes["health_ms"], 50),
            "p99": percentile(control_probes["health_ms"], 99), "max": percentile(control_probes["health_ms"], 100),
            "slow_probes_s_ms": control_probes["slow"][:50]},
        "health_ms_after": round(final_health, 2),
        "rss_mb": {"idle": round(rss_idle, 1), "peak": round(max(probes["rss"], default=rss_idle), 1),
                   "after": round(rss_after, 1)},
        "stalled_closed_by_server": load.stalled_closed_by_server,
        "bodies": load.bodies,
        "errors": load.errors[:10],
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    checks = {
        "every authenticated query answered": answered == args.requests and not load.errors,
        "unauthenticated queries get 401": set(load.unauthenticated) == {401},
        "every big body refused": len(refused_bodies) == args.bodies,
        f"/health p99 under {HEALTH_LIMIT_MS:g} ms": (percentile(probes["health_ms"], 99) or 0) < HEALTH_LIMIT_MS
        and not probes["failures"],
        f"/health slowest probe under {HEALTH_LIMIT_MS:g} ms": (percentile(probes["health_ms"], 100) or 0)
        < HEALTH_LIMIT_MS,
        f"RSS after within {RSS_LIMIT_MB:g} MB of idle": rss_after - rss_idle < RSS_LIMIT_MB,
        f"peak RSS within {RSS_LIMIT_MB:g} MB of idle": figures["rss_mb"]["peak"] - rss_idle < RSS_LIMIT_MB,
    }
    figures["checks"] = checks
    latency, health, rss = figures["latency_ms"], figures["health_ms_under_load"], figures["rss_mb"]
    print(f"{answered}/{args.requests} queries answered by {args.clients} clients in {elapsed:.1f}s: "
          f"{figures['requests_per_s']} requests/s, p50 {latency['p50']} ms, p95 {latency['p95']} ms "
          f"(server workers {args.workers}, embedder {args.embedder})")
    print(f"server CPU {server_cpu:.1f}s ({figures['server_cpu_ms_per_request']} ms a request, everything "
          f"included); the load's own CPU {client_cpu:.1f}s")
    if alone is not None:
        print(f"retrieval alone, in one process, {alone['threads']} threads: {alone['requests_per_s']} queries/s "
              f"(CPU {alone['cpu_ms_per_query_threads']} ms a query); one at a time "
              f"{alone['sequential_ms_per_query']} ms a query (CPU {alone['cpu_ms_per_query_sequential']} ms)")
    print(f"beside {args.stalled} stalled connections ({load.stalled_closed_by_server} closed by the server's "
          f"header timeout and reopened) and {args.bodies} bodies of {args.body_mb} MB "
          f"(statuses {[b.get('status') or b.get('closed') for b in load.bodies]}, at most "
          f"{max((b['bytes_written_before_refusal'] for b in load.bodies), default=0):,} bytes written by a client before its refusal)")
    print(f"/health under load: {health['n']} probes, p50 {health['p50']} ms, p99 {health['p99']} ms, "
          f"max {health['max']} ms (idle p50 {figures['health_ms_idle']['p50']} ms); a trivial asyncio server "
          f"probed at the same time: p50 {figures['control_health_ms_under_load']['p50']} ms, "
          f"p99 {figures['control_health_ms_under_load']['p99']} ms, "
          f"max {figures['control_health_ms_under_load']['max']} ms")
    print(f"server RSS: idle {rss['idle']} MB, peak {rss['peak']} MB, after {rss['after']} MB; "
          f"unauthenticated: {figures['unauthenticated_statuses']}; load average {figures['load_average_1m']}")
    return report_checks(args, figures, checks)


if __name__ == "__main__":
    sys.exit(main())
