"""Sync benchmark: 1,000 generated files of mixed types, synced, then re-synced after 1% changed.

    python benchmarks/sync.py [--files 1000] [--changed 0.01] [--verify] [--json OUT.json]

Writes a folder of PDF, Word, HTML, Markdown and text files (a fifth of each, 3 to 6 sections of
generated prose each) and syncs it into a temporary store through the real pipeline, extracting
with a language model on loopback (an OpenAI-compatible server in this process that answers at
once and counts requests) and the model-free hashing embedder, so the figures measure reading,
chunking, the store and the graph. Then one section of 1% of the files is edited and the folder
synced again: the model calls of the re-sync must equal the passages whose text changed (the
chunk ids the store did not hold before), all in the edited files. ``--verify`` also syncs the
folder afresh into a second store and compares fingerprints.

The listing is timed on its own too (the median of 5): the walk that sync does now, which follows
links only inside the source, keeps each real file once and escapes names into doc ids, and the
look at the source (the walk, the store-inside-the-source checks and the comparison with the
store's records), against a plain recursive pyarrow listing of the same folder, as sync listed
before, measured in the same run.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import list_source
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations.sync import look_at_source, sync
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import PASSAGES

KINDS = ("pdf", "docx", "html", "md", "txt")
SYLLABLES = ["ka", "lo", "mi", "ra", "ten", "vos", "dar", "il", "un", "bre", "sa", "to", "fen", "gor", "ali", "mur", "pe", "zan"]


class LoopbackModel:
    """An OpenAI-compatible chat endpoint on 127.0.0.1: entities are the passage's capitalised words."""

    def __init__(self) -> None:
        self.requests = 0
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with model.lock:
                    model.requests += 1
                user = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
                passage = user.split("<passage>\n", 1)[-1].rsplit("\n</passage>", 1)[0].partition("\n")[2]
                names = sorted(set(re.findall(r"\b[A-Z][a-z]{3,}\b", passage)))[:8]
                facts = [[a, "works with", b, ""] for a, b in itertools.pairwise(names)][:4]
                content = json.dumps({"entities": [{"name": n, "type": "person", "description": ""} for n in names],
                                      "facts": facts})
                payload = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                                 "content": content}}],
                    "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": len(content) // 4,
                              "total_tokens": (len(user) + len(content)) // 4},
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def prose(rng: random.Random, names: list[str], sentences: int) -> str:
    verbs = ["met", "wrote to", "worked with", "founded a firm with", "visited", "argued with", "taught"]
    return " ".join(f"{rng.choice(names)} {rng.choice(verbs)} {rng.choice(names)} in {1900 + rng.randrange(120)}."
                    for _ in range(sentences))


def sections_for(rng: random.Random, names: list[str]) -> list[tuple[str, list[str]]]:
    return [(f"Part {i + 1} {rng.choice(names)}", [prose(rng, names, rng.randint(3, 7)) for _ in range(rng.randint(2, 4))])
            for i in range(rng.randint(3, 6))]


def write_file(path: Path, kind: str, title: str, sections: list[tuple[str, list[str]]]) -> None:
    if kind == "pdf":
        from fpdf import FPDF

        pdf = FPDF()
        pdf.set_font("Helvetica", size=10)
        pdf.set_title(title)
        for heading, paragraphs in sections:  # a page per section
            pdf.add_page()
            pdf.multi_cell(0, 5, heading + "\n\n" + "\n\n".join(paragraphs))
        path.write_bytes(bytes(pdf.output()))
    elif kind == "docx":
        import docx

        document = docx.Document()
        document.add_heading(title, level=0)
        for heading, paragraphs in sections:
            document.add_heading(heading, level=1)
            for p in paragraphs:
                document.add_paragraph(p)
        out = io.BytesIO()
        document.save(out)
        path.write_bytes(out.getvalue())
    elif kind == "html":
        body = "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p}</p>" for p in ps) for h, ps in sections)
        path.write_text(f"<!doctype html><html><head><title>{title}</title></head><body><nav>Home | About</nav>"
                        f"<main><h1>{title}</h1>{body}</main><footer>Footer</footer></body></html>")
    elif kind == "md":
        path.write_text(f"# {title}\n\n" + "".join(f"## {h}\n\n" + "".join(f"{p}\n\n" for p in ps) for h, ps in sections))
    else:
        path.write_text(f"{title}\n\n" + "\n\n".join(f"{h}\n\n" + "\n\n".join(ps) for h, ps in sections))


def generate(folder: Path, n_files: int, seed: int) -> dict[str, tuple[str, str, list]]:
    rng = random.Random(seed)
    names = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
                    for _ in range(2000)})
    names = [n for n in names if len(n) >= 4]
    files = {}
    for i in range(n_files):
        kind = KINDS[i % len(KINDS)]
        rel = f"team{i % 10}/doc{i:04d}.{kind}"
        title = f"Report {i} on {rng.choice(names)}"
        sections = sections_for(rng, names)
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        write_file(folder / rel, kind, title, sections)
        files[rel] = (kind, title, sections)
    return files


def run_sync(store: Store, folder: Path, model: LoopbackModel, embedder) -> tuple[dict, float]:
    settings = LLMSettings(base_url=model.base_url, model="bench-model", concurrency=8)
    before = model.requests
    started = time.perf_counter()
    report = sync(store, str(folder), build_openai_extractor(store, llm_settings=settings), embedder)
    seconds = time.perf_counter() - started
    out = report.as_dict()
    out["server_requests"] = model.requests - before
    return out, seconds


def pyarrow_listing(root: str) -> int:
    """The files a recursive pyarrow listing finds, filtered as sync filtered them before its walk."""
    infos = pafs.LocalFileSystem().get_file_info(pafs.FileSelector(root, recursive=True))
    kept = 0
    for info in infos:
        relative = info.path[len(root):].lstrip("/")
        if info.type == pafs.FileType.File and not any(p.startswith(".") for p in relative.split("/")):
            kept += 1
    return kept


def median_seconds(work, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of files with one section edited")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verify", action="store_true", help="also sync afresh and compare fingerprints")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lightfoot-sync-bench-"))
    try:
        folder = root / "source"
        started = time.perf_counter()
        files = generate(folder, args.files, args.seed)
        generate_s = time.perf_counter() - started
        model, embedder = LoopbackModel(), HashingEmbedder(dim=64)
        store = Store(str(root / "store"))
        first, first_s = run_sync(store, folder, model, embedder)
        before = set(store.read(PASSAGES.name, columns=["chunk_id"]).get_column("chunk_id").to_list())

        rng = random.Random(args.seed + 1)
        edited = sorted(rng.sample(sorted(files), max(1, round(args.files * args.changed))))
        for rel in edited:
            kind, title, sections = files[rel]
            k = rng.randrange(len(sections))
            heading, paragraphs = sections[k]
            sections = [*sections[:k], (heading, [paragraphs[0] + " An added remark names Quillon once.",
                                                  *paragraphs[1:]]), *sections[k + 1:]]
            write_file(folder / rel, kind, title, sections)
            stat = (folder / rel).stat()
            os.utime(folder / rel, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        second, second_s = run_sync(store, folder, model, embedder)
        real = os.path.realpath(folder)
        assert pyarrow_listing(real) == len(list_source(pafs.LocalFileSystem(), real, "source")) == args.files
        old_listing_s = median_seconds(lambda: pyarrow_listing(real))
        walk_s = median_seconds(lambda: list_source(pafs.LocalFileSystem(), real, "source"))
        look_s = median_seconds(lambda: look_at_source(store, str(folder)))
        passages = store.read(PASSAGES.name, columns=["chunk_id", "doc_id"])
        changed = passages.filter(~pl.col("chunk_id").is_in(list(before)))
        result = {
            "files": args.files, "generate_s": round(generate_s, 2),
            "first_sync": {"seconds": round(first_s, 2), "files_per_s": round(args.files / first_s, 1),
                           "passages": first["passages"], "model_calls": first["model_calls"],
                           "read_seconds": round(first["read_seconds"], 2), "failed": len(first["failed"])},
            "resync": {"seconds": round(second_s, 2), "edited_files": len(edited), "changed": len(second["changed"]),
                       "unchanged": second["unchanged"], "changed_passages": changed.height,
                       "model_calls": second["model_calls"], "server_requests": second["server_requests"],
                       "read_seconds": round(second["read_seconds"], 2)},
            "resync_over_first": round(second_s / first_s, 4),
            "listing": {"pyarrow_listing_ms": round(old_listing_s * 1000, 2), "walk_ms": round(walk_s * 1000, 2),
                        "look_at_source_ms": round(look_s * 1000, 2),
                        "walk_over_pyarrow_listing": round(walk_s / old_listing_s, 2),
                        "look_over_pyarrow_listing": round(look_s / old_listing_s, 2)},
            "model_calls_equal_changed_passages": second["model_calls"] == changed.height
            and set(changed.get_column("doc_id").to_list()) <= {f"source:{rel}" for rel in edited},
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        if args.verify:
            fresh = Store(str(root / "fresh"))
            run_sync(fresh, folder, model, embedder)
            result["fingerprint_equal_to_fresh_sync"] = (
                fingerprint(fresh).digest == fingerprint(store).digest)
        print(json.dumps(result, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        ok = result["model_calls_equal_changed_passages"] and result.get("fingerprint_equal_to_fresh_sync", True)
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
