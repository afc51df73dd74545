// The page of `lightfoot serve`: a question, its ranked passages with why they ranked, the
// provenance of an entity, a fact or a document, and at /batch/ID what an ingestion batch did.
// Every call carries the bearer token kept in this tab's sessionStorage; text from the index is
// always set as text, never as HTML, and a link leaves the page only for an http(s) URL.
"use strict";

const TOKEN_KEY = "lightfoot-token";
const $ = (id) => document.getElementById(id);
let operator = false;  // whether the service answers this tab as the operator (GET /status)

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "onclick") node.addEventListener("click", value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function say(text) { $("message").textContent = text || ""; }

async function api(method, path, body) {
  const headers = { "content-type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = "Bearer " + token;
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const payload = await response.json().catch(() => ({}));
  if (response.status === 401) {
    $("token-form").hidden = false;
    throw new Error("this service needs a token: enter it above");
  }
  if (!response.ok) throw new Error(payload.error || `${method} ${path}: HTTP ${response.status}`);
  return payload;
}

function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (!isFinite(seconds)) return "";
  if (seconds < 90) return `${Math.round(seconds)} s old`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min old`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h old`;
  return `${Math.round(seconds / 86400)} days old`;
}

async function showSnapshot() {
  const info = await api("GET", "/snapshot");
  const serving = info.serving;
  $("snapshot").textContent = serving
    ? `snapshot ${serving.snapshot_id}${serving.store_seq == null ? "" : ` · store commit ${serving.store_seq}`}`
      + ` · ${age(serving.created_at)}`
    : "no snapshot loaded";
  const status = await api("GET", "/status");
  showPrincipal(status.principal);
  return status.answers && status.answers.state === "on";
}

// Whom the service answers as: every answer is that principal's view of the index.
function showPrincipal(principal) {
  operator = Boolean(principal && principal.groups.includes("*"));
  const groups = !principal ? "" : operator ? "every document (operator)"
    : principal.groups.length ? `groups ${principal.groups.join(", ")} and public documents` : "public documents only";
  $("principal").textContent = principal ? `answering as ${principal.principal}: ${groups}` : "";
  $("principal").setAttribute("data-principal", principal ? principal.principal : "");
}

function factLine(f) {
  return `(${f.subject}; ${f.predicate}; ${f.object})`;
}

function webUrl(url) { return typeof url === "string" && /^https?:\/\//i.test(url) ? url : null; }

function link(href, text, onclick, attrs = {}) {
  return el("a", { ...attrs, href, ...(onclick ? { onclick } : {}) }, text);
}

function batchLink(batchId) {
  return link("/batch/" + encodeURIComponent(batchId), batchId, null, { class: "batch", "data-batch": batchId });
}

function runLabel(row) {
  const url = webUrl(row.run_url);  // a Dagster run's page, with LIGHTFOOT_DAGSTER_URL set
  return el("span", {}, "run ", url ? link(url, row.run_id, null, { class: "run" }) : row.run_id);
}

function docLink(docId) {
  return link("#doc=" + encodeURIComponent(docId), docId, () => openDocument(docId).catch(fail), { class: "doc" });
}

function entityLink(e) {
  return link("#entity=" + encodeURIComponent(e.entity_id), e.display_name, () => openEntity(e.entity_id).catch(fail),
              { class: "entity" });
}

function batchRows(rows) {
  return el("div", { class: "batches" }, ...(rows || []).map((b) => el("div", {},
    `${b.action} by batch `, batchLink(b.batch), ` in store commit ${b.seq} · `, runLabel(b))));
}

function sourceRows(sources) {
  return el("div", { class: "sources" }, ...(sources || []).map((s) => el("div", {}, docLink(s.doc_id), ": ",
    s.produced_by ? el("span", {}, `${s.produced_by.action} by batch `, batchLink(s.produced_by.batch),
                       ` in store commit ${s.produced_by.seq} · `, runLabel(s.produced_by))
                  : el("span", { class: "muted" }, "from no batch"))));
}

function factSources(f) {
  return f.fact_id ? el("span", { class: "chip", title: "its passages, and the batches behind them",
                                  onclick: () => openFact(f.fact_id).catch(fail) }, "sources") : null;
}

function evidenceList(evidence) {
  const list = el("div");
  for (const e of evidence || []) {
    list.append(el("div", { class: "quote" }, e.evidence ? `“${e.evidence}” — ` : "",
      el("span", { class: "doc", onclick: () => openDocument(e.doc_id) }, e.doc_id)));
  }
  return list;
}

function entityChip(entity) {
  const share = entity.share === null || entity.share === undefined ? "" : ` ${Math.round(entity.share * 100)}%`;
  return el("span", { class: "chip" + (entity.seed ? " seed" : ""), "data-entity": entity.entity_id,
                      title: entity.seed ? "a seed entity (an end of a seed fact)" : "mass came through it",
                      onclick: () => openEntity(entity.entity_id) }, entity.display_name + share);
}

async function ask(question) {
  say("retrieving…");
  $("question").value = question;
  const answers = await showSnapshot().catch(() => false);
  const result = await api("POST", "/explain/query", { question, top_k: 10 });
  const facts = $("seed-facts");
  facts.replaceChildren(el("h2", {}, "Seed facts"));
  for (const f of result.seed_facts) {
    facts.append(el("div", { class: "fact" }, factLine(f), el("span", { class: "muted" },
      ` similarity ${f.similarity.toFixed(3)} · seeds `), ...f.entities.map((e) => entityChip({ ...e, seed: true, share: null })),
      evidenceList(f.evidence)));
  }
  const list = $("passages");
  list.replaceChildren();
  for (const p of result.passages) {
    const ranks = `PageRank #${p.pagerank_rank} (${p.pagerank_score.toFixed(4)}) · dense #${p.dense_rank} `
      + `(${p.dense_score.toFixed(3)})` + (p.rerank_rank ? ` · rerank #${p.rerank_rank}` : "")
      + (p.restart_share !== undefined ? ` · ${Math.round(p.restart_share * 100)}% from its own seed` : "");
    list.append(el("li", { "data-chunk": p.chunk_id },
      el("div", {}, el("span", { class: "title" }, p.title || p.chunk_id), " ",
        el("span", { class: "doc", onclick: () => openDocument(p.doc_id) }, p.doc_id),
        p.location ? el("span", { class: "muted location" }, ` · ${p.location}`) : null),
      el("div", { class: "ranks" }, ranks),
      el("div", {}, p.text),
      el("div", {}, el("span", { class: "muted" }, "through: "), ...p.entities.map(entityChip))));
  }
  say(`${result.passages.length} passages, order ${result.order}`
      + (result.reranker.state === "available" ? "" : ` (no reranking: ${result.reranker.reason || result.reranker.state})`));
  const box = $("answer");
  box.hidden = true;
  if (answers) {
    const answered = await api("POST", "/query", { question, top_k: 10, answer: true });
    box.hidden = false;
    box.textContent = answered.answer && !answered.answer.error
      ? `Answer: ${answered.answer.answer}` : `No answer: ${answered.answer_status}`;
  }
  return result;
}

function openPanel(...children) {
  $("panel").hidden = false;
  $("panel-body").replaceChildren(...children);
  $("graph").replaceChildren();
}

async function openEntity(name) {
  const found = (await api("GET", "/explain/entity?name=" + encodeURIComponent(name))).entities;
  const e = found[0];
  const aliases = el("table", {}, ...e.aliases.map((a) => el("tr", {}, el("td", {}, a.surface),
    el("td", { class: "muted" }, `${a.n_passages} passages`),
    el("td", {}, ...a.passages.slice(0, 8).flatMap((p) => [el("span", { class: "doc", onclick: () => openDocument(p.doc_id) }, p.doc_id), " "])))));
  const facts = e.facts.slice(0, 30).map((f) => el("div", { class: "fact" }, factLine(f), " ", factSources(f),
    evidenceList(f.evidence)));
  openPanel(
    el("h2", { id: "entity-name" }, `${e.display_name} `, el("span", { class: "muted" }, `[${e.type}] ${e.entity_id}`)),
    el("div", { class: "muted" }, `${e.n_passages} passages in ${e.documents.length} documents`
       + (found.length > 1 ? ` · ${found.length - 1} more entities share this name` : "")),
    el("h3", {}, "Aliases and their passages"), aliases,
    el("h3", {}, `Synonyms (${e.synonyms.length})`),
    el("div", {}, ...e.synonyms.map((s) => entityChip({ ...s, share: null }))),
    el("h3", {}, `Facts (${e.n_facts})`), ...facts,
    el("h3", {}, `Source documents (${e.documents.length}) and the batches that produced them`),
    sourceRows(e.sources));
  drawNeighbourhood(e);
}

async function openFact(factId) {
  const f = await api("GET", "/explain/fact?fact_id=" + encodeURIComponent(factId));
  openPanel(
    el("h2", { id: "fact-name" }, factLine(f), " ", el("span", { class: "muted" }, f.fact_id)),
    el("div", { class: "muted" }, `asserted by ${f.n_sources} passages`),
    evidenceList(f.evidence),
    el("h3", {}, "Source documents and the batches that produced them"), sourceRows(f.sources));
}

function drawNeighbourhood(e) {
  if (typeof vis === "undefined") return;
  const nodes = new Map([[e.entity_id, { id: e.entity_id, label: e.display_name, color: "#7c5cff", font: { color: "#fff" }, shape: "box" }]]);
  const edges = [];
  for (const s of e.synonyms.slice(0, 20)) {
    nodes.set(s.entity_id, { id: s.entity_id, label: s.display_name, shape: "box", color: "#e9e3ff" });
    edges.push({ from: e.entity_id, to: s.entity_id, dashes: true, label: `≈ ${s.similarity.toFixed(2)}` });
  }
  for (const f of e.facts.slice(0, 30)) {
    const other = f.subject_entity === e.entity_id ? f.object_entity : f.subject_entity;
    const label = f.subject_entity === e.entity_id ? f.object : f.subject;
    if (!other || other === e.entity_id) continue;
    if (!nodes.has(other)) nodes.set(other, { id: other, label, shape: "box", color: "#eef0fb" });
    edges.push({ from: f.subject_entity, to: f.object_entity, arrows: "to", label: f.predicate, font: { size: 10 } });
  }
  const network = new vis.Network($("graph"), { nodes: [...nodes.values()], edges },
    { physics: { stabilization: { iterations: 150 } }, interaction: { hover: true } });
  network.on("doubleClick", (params) => { if (params.nodes.length) openEntity(params.nodes[0]); });
  network.once("stabilizationIterationsDone", () => network.setOptions({ physics: false }));
  $("graph").setAttribute("data-nodes", String(nodes.size));
}

async function openDocument(docId) {
  const d = await api("GET", "/explain/doc?doc_id=" + encodeURIComponent(docId));
  if (d.status === "deleted") {
    const gone = d.deletion.erased_at ? "; erased" : "";
    openPanel(el("h2", { id: "document-id" }, docId), el("div", {}, `deleted at ${d.deletion.requested_at}${gone}`),
      el("h3", {}, "Batches"), batchRows(d.batches));
    return;
  }
  openPanel(
    el("h2", { id: "document-id" }, `${d.document.title} `, el("span", { class: "muted" }, docId)),
    el("div", { class: "muted" }, `${d.passages.length} passages · ${d.names.length} names · ${d.facts.length} facts`),
    el("h3", {}, "Batches that added, replaced, kept or deleted it"), batchRows(d.batches),
    el("h3", {}, "Entities it gave names to"),
    el("div", {}, ...d.entities.map((e) => entityChip({ ...e, share: null }))),
    el("h3", {}, "Facts it asserts"),
    ...d.facts.map((f) => el("div", { class: "fact" }, factLine(f), " ", factSources(f),
      f.evidence ? el("div", { class: "quote" }, `“${f.evidence}”`) : null)),
    el("h3", {}, "Deleting it would (dry run)"),
    el("div", { id: "deletion-preview", class: "muted", "data-doc": docId }, "working out what its deletion would change…"));
  await showPreview(docId);
}

function previewLine(c) {
  return `remove ${c.entities_removed} entities, change ${c.entities_changed}, `
    + `split off ${c.entities_added}; drop ${c.facts_dropped} facts, leave ${c.facts_changed} with fewer sources; `
    + `remove ${c.synonym_edges_removed} synonym edges, add ${c.synonym_edges_added}`;
}

async function showPreview(docId) {
  if (!operator) {  // the service refuses every other principal's dry runs (page.py)
    const preview = $("deletion-preview");
    if (preview) preview.textContent = "deletion dry runs are the operator's";
    return;
  }
  const p = await api("GET", "/explain/doc/preview?doc_id=" + encodeURIComponent(docId));
  const preview = $("deletion-preview");
  if (!preview || preview.getAttribute("data-doc") !== docId) return;  // another panel was opened meanwhile
  preview.className = "";
  preview.textContent = previewLine(p.deletion_preview.counts);
}

// What deleting a document would change (a dry run, nothing written), one click from a batch.
async function openPreview(docId) {
  openPanel(
    el("h2", {}, "Deleting ", docLink(docId), " would (dry run)"),
    el("div", { id: "deletion-preview", class: "muted", "data-doc": docId }, "working out what its deletion would change…"));
  await showPreview(docId);
}

// Where a batch's document stands now (provenance/batches.py), alone and with the batch that made it so.
const STATUS_PLAIN = { live: "live: its text is this batch's", unchanged: "kept unchanged", replaced: "replaced",
                       deleted: "deleted", erased: "erased", readded: "added again" };
const STATUS_BY = { unchanged: "kept unchanged; its text is from", replaced: "replaced by", deleted: "deleted by",
                    erased: "erased; deleted by", readded: "added again by" };

function statusCell(d, batchId) {
  const by = !d.status_batch || !STATUS_BY[d.status] ? null
    : d.status_batch === batchId ? "this batch" : el("span", {}, "batch ", batchLink(d.status_batch));
  return el("td", { class: "status" }, by ? `${STATUS_BY[d.status]} ` : STATUS_PLAIN[d.status] || d.status, by);
}

// A batch's view: its documents with what it did and where each stands now, its commits and runs.
async function openBatch(batchId) {
  const b = await api("GET", "/explain/batch?batch_id=" + encodeURIComponent(batchId));
  const c = b.counts;
  const rows = b.documents.map((d) => el("tr", { "data-doc": d.doc_id, "data-status": d.status },
    el("td", {}, docLink(d.doc_id)), el("td", { class: "title" }, d.title || ""),
    el("td", {}, `${d.action} in commit ${d.seq}`), statusCell(d, batchId),
    el("td", {}, d.status === "deleted" || d.status === "erased" ? "" : link("#preview=" + encodeURIComponent(d.doc_id),
      "what would deleting it change", () => openPreview(d.doc_id).catch(fail), { class: "preview" }))));
  const view = $("batch-view");
  view.replaceChildren(
    el("h2", { id: "batch-id" }, "Batch ", el("span", {}, b.batch_id)),
    el("div", { class: "muted" }, `${b.documents.length} documents: added ${c.added}, replaced ${c.replaced}, `
       + `unchanged ${c.unchanged}, deleted ${c.deleted} · ${b.commits.length} store commit${b.commits.length === 1 ? "" : "s"} · `,
       ...b.runs.flatMap((r, i) => [i ? ", " : "", runLabel(r), ` (${r.by})`])),
    c.added || c.replaced ? el("div", { class: "muted" }, `its text is the current text of ${c.live} documents: `
       + `${c.passages} passages, ${c.names} names of ${c.entities} entities, ${c.facts} facts`) : null,
    el("h3", {}, "Store commits"),
    el("table", { id: "batch-commits" }, ...b.commits.map((m) => el("tr", {}, el("td", {}, `commit ${m.seq}`),
      el("td", {}, m.operation), el("td", { class: "muted" }, m.committed_at), el("td", {}, m.by || ""),
      el("td", {}, runLabel(m))))),
    el("h3", {}, "Documents"),
    el("table", { id: "batch-documents" }, el("tr", { class: "muted" }, el("td", {}, "document"), el("td", {}, "title"),
      el("td", {}, "this batch"), el("td", {}, "now"), el("td", {}, "")), ...rows),
    el("h3", {}, `Entities its documents' passages mention (${c.entities}), each with its source documents and runs`),
    el("div", { id: "batch-entities" }, ...b.entities.map((e) => el("div", { "data-entity": e.entity_id },
      entityLink(e), el("span", { class: "muted" }, ` [${e.type}] ${e.n_passages} passage${e.n_passages === 1 ? "" : "s"}`))),
      b.more_entities ? el("div", { class: "muted" }, `… and ${b.more_entities} more`) : null));
  view.hidden = false;
  $("results").hidden = true;
  say(`batch ${b.batch_id} at store commit ${b.store_seq}`);
}

function fail(err) { say(err.message || String(err)); }

const BATCH_PATH = "/batch/";

function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  let chain = Promise.resolve();
  if (location.pathname.startsWith(BATCH_PATH)) {  // the page opened at /batch/ID
    chain = chain.then(() => openBatch(decodeURIComponent(location.pathname.slice(BATCH_PATH.length))));
  }
  if (params.get("q")) chain = chain.then(() => ask(params.get("q")));
  if (params.get("entity")) chain = chain.then(() => openEntity(params.get("entity")));
  if (params.get("fact")) chain = chain.then(() => openFact(params.get("fact")));
  if (params.get("doc")) chain = chain.then(() => openDocument(params.get("doc")));
  if (params.get("preview")) chain = chain.then(() => openPreview(params.get("preview")));
  return chain.catch(fail).finally(() => document.body.setAttribute("data-ready", "true"));
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    history.replaceState(null, "", "/#q=" + encodeURIComponent(question));
    $("batch-view").hidden = true;
    $("results").hidden = false;
    ask(question).catch(fail);
  });
  $("token-button").addEventListener("click", () => { $("token-form").hidden = !$("token-form").hidden; });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-form").hidden = true;
    $("token-input").value = "";
    showSnapshot().then(() => say("token saved for this tab")).then(fromHash).catch(fail);
  });
  $("panel-close").addEventListener("click", () => { $("panel").hidden = true; });
  showSnapshot().catch(fail).then(fromHash);
});
