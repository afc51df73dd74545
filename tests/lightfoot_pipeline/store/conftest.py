"""An S3-compatible object store on 127.0.0.1 (moto in server mode), and buckets on it.

The server runs in its own process for the whole session (see moto_server.py); each test gets
a fresh bucket, and the standard AWS environment variables pointing at the server, which is
how a deployment configures the store too.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lightfoot_pipeline.ingest.dataset import Document

SERVER_SCRIPT = Path(__file__).with_name("moto_server.py")


@dataclass
class ObjectStore:
    """A bucket on the test server: its URI prefix, the environment to reach it, and a client."""

    bucket: str
    env: dict[str, str]
    client: object

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def objects_containing(self, needle: str, prefix: str = "", first: bool = False) -> list[str]:
        """Keys of the objects under the prefix that hold the needle (only the first one found,
        with ``first``), in their raw bytes or, for Parquet files, in any string column: a
        compressed page can split a string that is there."""
        found = []
        for key in self.keys(prefix):
            if _holds(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read(), key, needle):
                found.append(key)
                if first:
                    break
        return found


def _holds(data: bytes, key: str, needle: str) -> bool:
    folded = needle.casefold()
    if needle.encode("utf-8") in data or folded.encode("utf-8") in data:
        return True
    if not key.endswith(".parquet"):
        return False
    table = pq.read_table(io.BytesIO(data))
    return any(
        value is not None and folded in value.casefold()
        for column in table.columns if pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        for value in column.to_pylist()
    )


@pytest.fixture(scope="session")
def s3_endpoint():
    """The URL of a moto S3 server on 127.0.0.1, up for the whole session."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = process.stdout.readline().strip()
    if not line.startswith("port "):
        process.kill()
        raise RuntimeError(f"the moto S3 server did not start: {line!r} {process.stderr.read()[-2000:]}")
    yield f"http://127.0.0.1:{line.split()[1]}"
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # a busy machine, or a request still being served: stop it
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def object_store(s3_endpoint, monkeypatch) -> ObjectStore:
    """A fresh bucket, with the AWS environment variables set for this process and its children."""
    import boto3

    env = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "lightfoot-test",
        "AWS_SECRET_ACCESS_KEY": "lightfoot-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "LIGHTFOOT_STORE"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client(
        "s3", endpoint_url=s3_endpoint, region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    bucket = f"lightfoot-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return ObjectStore(bucket=bucket, env={**os.environ, **env}, client=client)


@pytest.fixture
def make_dataset(tmp_path, sample_dir):
    """``make_dataset(name, count, extra=(), skip=0)``: a dataset directory holding ``count``
    documents of the bundled sample (after the first ``skip``) with their recorded extractions,
    plus ``extra`` pairs of (document row, extraction row)."""

    def rows(name: str) -> list[dict]:
        with (sample_dir / name).open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    corpus, records = rows("corpus.jsonl"), rows("extractions.jsonl")

    def make(name: str, count: int, extra: tuple[tuple[dict, dict], ...] = (), skip: int = 0) -> Path:
        documents = corpus[skip : skip + count] + [doc for doc, _ in extra]
        wanted = {d["doc_id"] for d in documents}
        extractions = [r for r in records if r["doc_id"] in wanted] + [rec for _, rec in extra]
        target = tmp_path / name
        target.mkdir(parents=True, exist_ok=True)
        for file_name, lines in (("corpus.jsonl", documents), ("extractions.jsonl", extractions)):
            with (target / file_name).open("w", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(json.dumps(line) + "\n")
        return target

    return make


STEMS = ["Orvel Tanning", "Mirabel Stoke", "Kasimir Dunn", "Halvard Press", "Ostrava Mills", "Lindqvist Hall",
         "Peder Sand", "Quill Harbour", "Tessaly Road", "Brannock Fen", "Iver Castell", "Saffron Weald"]


def _linked_names_corpus(n: int, seed: int = 0) -> tuple[list[Document], dict[str, dict]]:
    """Documents naming a few of many names, some with a near-duplicate spelling (so names link)."""
    rng = random.Random(seed)
    vocabulary = [f"{stem} {i}" if i else stem for stem in STEMS for i in range(12)]
    documents, records = [], {}
    for d in range(n):
        names = rng.sample(vocabulary, 4)
        names = [name + "s" if rng.random() < 0.2 else name for name in names]
        facts = [[names[0], "is part of", names[1], None], [names[2], "founded", names[3], None]]
        doc_id = f"doc-{d:04d}"
        documents.append(Document(doc_id=doc_id, title=names[0], text="Mentions " + "; ".join(names) + "."))
        records[doc_id] = {"doc_id": doc_id, "entities": [{"name": x, "type": "entity"} for x in names], "facts": facts}
    return documents, records


@pytest.fixture(scope="session")
def names_corpus():
    """``names_corpus(n, seed=0)``: n documents with their recorded extractions, whose names link."""
    return _linked_names_corpus
