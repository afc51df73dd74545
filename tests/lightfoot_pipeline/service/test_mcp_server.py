"""The MCP server (service/mcp_server.py) with the SDK's own client, on the bundled sample: over
streamable HTTP (``/mcp`` of the service, as each token's principal) and over stdio (``lightfoot
mcp`` as a subprocess, with a token), every tool is listed with a bounded schema and called, and
each answers exactly what ``/query`` (without an answer) and the ``/explain`` routes answer the
same principal; bad arguments and refusals come back as MCP errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from lightfoot_pipeline.service.mcp_server import DOCUMENT_URI
from lightfoot_pipeline.service.queries import MAX_QUESTION_CHARS, MAX_TOP_K
from tests.lightfoot_pipeline.service.conftest import OPERATOR_TOKEN, READER_TOKEN

REPO = Path(__file__).resolve().parents[3]
QUESTION = "Who founded the company that built the USS Donegal?"
TOOLS = {"search", "explain_entity", "explain_fact", "explain_document", "preview_deletion"}


def plain(value) -> object:
    """A value as JSON reads it back (tuples as lists), without what differs between two calls:
    the latency and, across processes, when the snapshot was loaded."""
    value = json.loads(json.dumps(value, default=str))
    if isinstance(value, dict):
        value.pop("latency_ms", None)
        if isinstance(value.get("snapshot"), dict):
            value["snapshot"].pop("loaded_at", None)
    return value


async def over_http(doors, token: str, calls):
    """``calls(client)`` with an MCP client of the service's ``/mcp`` as ``token``'s principal."""
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http, \
            Client(streamable_http_client(doors.url + "/mcp", http_client=http)) as client:
        return await calls(client)


async def every_tool(client, doc_id: str | None = None) -> dict:
    """Every tool and the document resource called once: their results by name."""
    listed = await client.list_tools()
    out: dict = {"tools": {tool.name: tool.input_schema for tool in listed.tools}}
    search = await client.call_tool("search", {"question": QUESTION, "top_k": 5})
    assert not search.is_error, search.content
    out["search"] = search.structured_content
    passage = out["search"]["passages"][0]
    fact = out["search"]["seed_facts"][0]
    out["asked"] = {"doc_id": doc_id or passage["doc_id"], "name": fact["subject"], "fact_id": fact["fact_id"]}
    for tool, argument in (("explain_entity", "name"), ("explain_fact", "fact_id"), ("explain_document", "doc_id"),
                           ("preview_deletion", "doc_id")):
        result = await client.call_tool(tool, {argument: out["asked"][argument]})
        out[tool] = ("error", result.content[0].text) if result.is_error else result.structured_content
    try:
        read = await client.read_resource(DOCUMENT_URI.format(doc_id=out["asked"]["doc_id"]))
        out["resource"] = json.loads(read.contents[0].text)
    except MCPError as err:
        out["resource"] = ("error", str(err))
    return out


def rest(doors, token: str, asked: dict) -> dict:
    """What the HTTP API answers the same principal for the same names."""
    from urllib.parse import quote

    def get(path: str) -> dict:
        status, body = doors.call(path, token)
        return body if status == 200 else ("error", status)

    status, query = doors.call("/query", token, {"question": QUESTION, "top_k": 5, "answer": False})
    assert status == 200
    return {"search": query, "explain_entity": get(f"/explain/entity?name={quote(asked['name'])}"),
            "explain_fact": get(f"/explain/fact?fact_id={quote(asked['fact_id'])}"),
            "explain_document": get(f"/explain/doc?doc_id={quote(asked['doc_id'])}"),
            "preview_deletion": get(f"/explain/doc/preview?doc_id={quote(asked['doc_id'])}")}


def test_every_tool_over_streamable_http_answers_as_the_http_api(sample_doors):
    doors = sample_doors
    for token in (OPERATOR_TOKEN, READER_TOKEN):
        got = anyio.run(over_http, doors, token, every_tool)
        assert set(got["tools"]) == TOOLS
        search_schema = got["tools"]["search"]["properties"]
        assert search_schema["question"]["maxLength"] == MAX_QUESTION_CHARS
        assert search_schema["top_k"]["maximum"] == MAX_TOP_K and search_schema["top_k"]["minimum"] == 1
        assert not {"principal", "groups", "view", "token"} & {p for s in got["tools"].values()
                                                               for p in s.get("properties", {})}
        expected = rest(doors, token, got["asked"])
        for tool in ("search", "explain_entity", "explain_fact", "explain_document"):
            assert plain(got[tool]) == plain(expected[tool]), tool
        assert plain(got["resource"]) == plain(expected["explain_document"])
        if token == OPERATOR_TOKEN:
            assert plain(got["preview_deletion"]) == plain(expected["preview_deletion"])
        else:  # the dry run is the operator's, as on the page
            assert expected["preview_deletion"] == ("error", 403)
            assert got["preview_deletion"][0] == "error" and "operator only" in got["preview_deletion"][1]
    # The reader's view is not the operator's: its search never names a document it may not read.
    reader_docs = set(doors.service.current(doors.principal(READER_TOKEN)).snapshot.passages["doc_id"].to_list())
    operator_docs = set(doors.service.current(doors.principal(OPERATOR_TOKEN)).snapshot.passages["doc_id"].to_list())
    hidden = sorted(operator_docs - reader_docs)
    assert hidden
    got = anyio.run(over_http, doors, READER_TOKEN, lambda client: every_tool(client, doc_id=hidden[0]))
    assert {p["doc_id"] for p in got["search"]["passages"]} <= reader_docs
    unknown = anyio.run(over_http, doors, READER_TOKEN, lambda client: client.call_tool(
        "explain_document", {"doc_id": "no-such-document"}))
    assert got["explain_document"] == ("error", unknown.content[0].text.replace("no-such-document", hidden[0]))
    assert got["resource"][0] == "error" and hidden[0] in got["resource"][1]


async def bad_calls(client) -> dict:
    out = {}
    for name, tool, arguments in [
        ("top_k 0", "search", {"question": QUESTION, "top_k": 0}),
        ("top_k too large", "search", {"question": QUESTION, "top_k": MAX_TOP_K + 1}),
        ("question too long", "search", {"question": "x" * (MAX_QUESTION_CHARS + 1)}),
        ("no question", "search", {}),
        ("question not text", "search", {"question": ["a"]}),
        ("empty name", "explain_entity", {"name": ""}),
        ("id too long", "explain_fact", {"fact_id": "f" * 513}),
    ]:
        result = await client.call_tool(tool, arguments)
        out[name] = (result.is_error, result.content[0].text)
    try:
        result = await client.call_tool("delete_everything", {})
        out["unknown tool"] = (result.is_error, result.content[0].text)
    except MCPError as err:
        out["unknown tool"] = (True, str(err))
    try:
        await client.read_resource(DOCUMENT_URI.format(doc_id="no-such-document"))
        out["unknown document"] = (False, "")
    except MCPError as err:
        out["unknown document"] = (True, str(err))
    return out


def test_bad_arguments_and_unknown_names_get_mcp_errors(sample_doors):
    got = anyio.run(over_http, sample_doors, READER_TOKEN, bad_calls)
    for name, (is_error, text) in got.items():
        assert is_error and text, name
    assert "top_k" in got["top_k 0"][1] and "question" in got["no question"][1]
    assert "delete_everything" in got["unknown tool"][1]
    # Without a token the transport is refused before the SDK sees the request.
    response = httpx2.post(sample_doors.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                           headers={"accept": "application/json, text/event-stream"})
    assert response.status_code == 401
    too_big = httpx2.post(sample_doors.url + "/mcp", content=b"{" + b" " * (64 * 1024) + b"}",
                          headers={"authorization": f"Bearer {READER_TOKEN}", "content-type": "application/json",
                                   "accept": "application/json, text/event-stream"})
    assert too_big.status_code == 413
    # The transport is stateless: no stream is held open for a GET, no session to DELETE.
    for method in ("GET", "DELETE"):
        held = httpx2.request(method, sample_doors.url + "/mcp", timeout=10, headers={
            "authorization": f"Bearer {READER_TOKEN}", "accept": "application/json, text/event-stream"})
        assert held.status_code == 405


@pytest.mark.slow  # a subprocess that loads the engine (about 10 s)
def test_lightfoot_mcp_over_stdio_answers_as_its_tokens_principal(sample_doors):
    doors = sample_doors
    environment = {"PYTHONPATH": str(REPO), "LIGHTFOOT_MCP_TOKEN": READER_TOKEN, "HF_HUB_OFFLINE": "1",
                   "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ.get("PATH", "")}
    server = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=environment, args=[
        "-m", "lightfoot_pipeline.cli", "mcp", "--store", str(doors.store), "--tokens-file", str(doors.tokens_file),
        "--reranker", "none"])

    async def run():
        async with Client(server, read_timeout_seconds=120) as client:
            return await every_tool(client)

    got = anyio.run(run)
    assert set(got["tools"]) == TOOLS
    expected = rest(doors, READER_TOKEN, got["asked"])
    for tool in ("search", "explain_entity", "explain_fact", "explain_document"):
        assert plain(got[tool]) == plain(expected[tool]), tool
    assert got["preview_deletion"][0] == "error"


def test_lightfoot_mcp_fails_closed_on_a_token_it_cannot_place(tmp_path, capsys, monkeypatch):
    from lightfoot_pipeline.cli import main

    monkeypatch.delenv("LIGHTFOOT_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("LIGHTFOOT_SERVE_TOKENS_FILE", raising=False)
    monkeypatch.setenv("LIGHTFOOT_MCP_TOKEN", "an-unknown-token-" + "u" * 20)
    store = str(tmp_path / "none")
    assert main(["mcp", "--store", store]) == 2  # no tokens to place it among
    assert "LIGHTFOOT_MCP_TOKEN is not one of the service's tokens" in capsys.readouterr().err
    (tmp_path / "tokens").write_text("")
    assert main(["mcp", "--store", store, "--tokens-file", str(tmp_path / "tokens")]) == 2
    assert "is not one of the service's tokens" in capsys.readouterr().err
    assert main(["mcp", "--store", store, "--as", "*"]) == 2  # the token names the principal
    assert "--as cannot be given with it" in capsys.readouterr().err


def test_a_client_of_the_initialize_handshake_is_served_too(sample_doors):
    """Clients of the 2025 protocol revisions (Claude Code, Claude Desktop's remote connectors) open
    with ``initialize``: the stateless transport answers it and each request after it as JSON."""
    headers = {"authorization": f"Bearer {READER_TOKEN}", "content-type": "application/json",
               "accept": "application/json, text/event-stream"}

    def post(body: dict, version: str | None = None) -> httpx2.Response:
        extra = {"mcp-protocol-version": version} if version else {}
        return httpx2.post(sample_doors.url + "/mcp", json=body, headers={**headers, **extra}, timeout=30)

    opened = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert opened.status_code == 200 and opened.json()["result"]["serverInfo"]["name"] == "lightfoot"
    version = opened.json()["result"]["protocolVersion"]
    assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}, version).status_code == 202
    listed = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, version).json()["result"]["tools"]
    assert {tool["name"] for tool in listed} == TOOLS
    called = post({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "search", "arguments": {"question": QUESTION, "top_k": 2}}}, version).json()["result"]
    assert not called["isError"] and len(called["structuredContent"]["passages"]) == 2
