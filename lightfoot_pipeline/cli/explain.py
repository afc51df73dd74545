"""``lightfoot explain doc | entity | fact | batch | query``: provenance on the command line, as text or JSON.

``--as GROUPS`` (doc, entity, fact, query) answers as a principal of those reader groups: from the
store of the documents it may read (permissions/provenance.py; a document, entity or fact it may
not read is answered as one the store never held), and for a query from its view of the snapshot.
Deletion dry runs and batches tell of the whole store, so they are the operator's: with ``--as``
of other groups, ``explain doc`` shows no dry run.
"""

from __future__ import annotations

from lightfoot_pipeline.cli.store import existing_store, print_json
from lightfoot_pipeline.settings import SettingsError


def _principal(args):
    """The principal of ``--as`` (None: the operator, who reads every document)."""
    from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, principal_of

    return OPERATOR_PRINCIPAL if args.as_groups is None else principal_of(args.as_groups, where="--as")


def _source(args, principal):
    """What provenance reads for ``principal`` at the store's latest commit, and that commit."""
    from lightfoot_pipeline.permissions.provenance import provenance_store

    store = existing_store(args)
    manifest = store.manifest()
    return provenance_store(store, principal, manifest), manifest


def _short(text: str | None, width: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _run(row: dict) -> str:
    """A run id, with its Dagster page when there is one (LIGHTFOOT_DAGSTER_URL)."""
    return f"run {row['run_id']}" + (f" ({row['run_url']})" if row.get("run_url") else "")


def _print_batches(rows: list[dict], indent: str = "  ") -> None:
    for b in rows:
        print(f"{indent}{b['action']} by batch {b['batch']} in store commit {b['seq']}, {_run(b)}")


def _print_sources(sources: list[dict], indent: str = "  ") -> None:
    """Each source document with the batch and run that produced its current text."""
    for source in sources:
        made = source["produced_by"]
        print(f"{indent}{source['doc_id']}: " + (f"{made['action']} by batch {made['batch']} (store commit "
                                                  f"{made['seq']}, {_run(made)})" if made else "from no batch"))


def cmd_explain_doc(args) -> int:
    from lightfoot_pipeline.provenance.documents import explain_document

    principal = _principal(args)
    source, manifest = _source(args, principal)
    explanation = explain_document(source, args.doc_id, preview=not args.no_preview and principal.is_operator,
                                   manifest=manifest)
    if args.json:
        print_json(explanation.as_dict())
        return 0
    e = explanation
    if e.status == "deleted":
        d = e.deletion
        print(f"{e.doc_id}: deleted at {d['requested_at']}" + (f" ({d['reason']})" if d["reason"] else "")
              + ("; erased" if d["erased_at"] else "; erase pending" if d["erase"] else ""))
        print(f"batches ({len(e.batches)}):")
        _print_batches(e.batches)
        return 0
    print(f"{e.doc_id}: {e.document.get('title')!r}, {len(e.passages)} passages (store commit {e.store_seq})")
    print(f"readers: {', '.join(e.document['readers']) or 'nobody (the operator alone)'}")
    print(f"batches ({len(e.batches)}):")
    _print_batches(e.batches)
    for p in e.passages:
        status = p["status"] or "not extracted"
        print(f"  passage {p['ordinal']} {p['chunk_id']}: {status}, {p['n_entities'] or 0} entities, "
              f"{p['n_facts'] or 0} facts" + (f" ({p['reason']})" if p["reason"] else "")
              + (f"; {p['location']}" if p["location"] else ""))
    print(f"names ({len(e.names)}):")
    for n in e.names:
        print(f"  {n['surface']} [{n['type']}] -> {n['display_name']} ({n['entity_id']})")
    print(f"facts ({len(e.facts)}):")
    for f in e.facts:
        print(f"  ({f['subject']}; {f['predicate']}; {f['object']}) asserted by {f['n_sources']} passages"
              + (f"\n      evidence: \"{_short(f['evidence'])}\"" if f["evidence"] else ""))
    if not args.no_preview and not principal.is_operator:
        print("deleting it: a dry run tells of the whole store, so it is the operator's (no --as)")
    if e.preview is not None:
        c = e.preview.counts()
        print("deleting it would remove (dry run, nothing written):")
        print(f"  passages {c['passages_removed']}, names {c['names_removed']}, entities {c['entities_removed']} "
              f"removed, {c['entities_changed']} changed, {c['entities_added']} split off; facts {c['facts_dropped']} "
              f"dropped, {c['facts_changed']} with fewer sources; synonym edges {c['synonym_edges_removed']} removed, "
              f"{c['synonym_edges_added']} added")
        for row in e.preview.entities_removed[:20]:
            print(f"  - entity {row['display_name']} ({row['entity_id']})")
        for row in e.preview.entities_changed[:20]:
            print(f"  ~ entity {row['display_name']} ({row['entity_id']}): "
                  + ", ".join(f"{k} {v} -> {row[k]}" for k, v in row["before"].items()))
        for row in e.preview.facts_dropped[:20]:
            print(f"  - fact ({row['subject']}; {row['predicate']}; {row['object']})")
    return 0


def cmd_explain_entity(args) -> int:
    from lightfoot_pipeline.provenance.entities import explain_entity

    found = explain_entity(_source(args, _principal(args))[0], args.name)
    if args.json:
        print_json([e.as_dict() for e in found])
        return 0
    for e in found:
        print(f"{e.display_name} [{e.type}] {e.entity_id}: {len(e.aliases)} aliases, {e.n_passages} passages in "
              f"{len(e.documents)} documents (store commit {e.store_seq})")
        for a in e.aliases:
            docs = sorted({p["doc_id"] for p in a["passages"]})
            print(f"  alias {a['surface']!r}: {a['n_passages']} passages, documents {', '.join(docs[:8])}"
                  + (" …" if len(docs) > 8 else ""))
        for s in e.synonyms:
            print(f"  synonym {s['display_name']} ({s['entity_id']}), similarity {s['similarity']:.3f}")
        print(f"  facts ({e.n_facts}" + (f", {len(e.facts)} shown" if len(e.facts) < e.n_facts else "") + "):")
        for f in e.facts[:args.facts]:
            print(f"    ({f['subject']}; {f['predicate']}; {f['object']}), {f['n_sources']} sources")
            for ev in (f["evidence"] or [])[:2]:
                print(f"      {ev['doc_id']}: \"{_short(ev['evidence'])}\"" if ev["evidence"] else f"      {ev['doc_id']}")
        print(f"  source documents ({len(e.documents)}" + (f", {len(e.sources)} shown" if len(e.sources) < len(e.documents)
                                                           else "") + "), each by the batch that produced it:")
        _print_sources(e.sources, "    ")
    return 0


def cmd_explain_fact(args) -> int:
    from lightfoot_pipeline.provenance.entities import explain_fact

    source, manifest = _source(args, _principal(args))
    f = explain_fact(source, args.fact_id, manifest)
    if args.json:
        print_json(f.as_dict())
        return 0
    print(f"({f.subject}; {f.predicate}; {f.object}) {f.fact_id}: asserted by {f.n_sources} passages "
          f"(store commit {f.store_seq})")
    for ev in f.evidence:
        print(f"  {ev['doc_id']} {ev['chunk_id']}" + (f": \"{_short(ev['evidence'])}\"" if ev["evidence"] else ""))
    print("source documents, each by the batch that produced it:")
    _print_sources(f.sources)
    return 0


def cmd_explain_batch(args) -> int:
    from lightfoot_pipeline.provenance.batches import explain_batch

    b = explain_batch(existing_store(args), args.batch_id)
    if args.json:
        print_json(b.as_dict())
        return 0
    c = b.counts
    runs = ", ".join(_run(r) + f" by {r['by']}" for r in b.runs) or "no run"
    print(f"batch {b.batch_id}: {len(b.documents)} documents (added {c['added']}, replaced {c['replaced']}, "
          f"unchanged {c['unchanged']}, deleted {c['deleted']}) in {len(b.commits)} store "
          f"commit{'' if len(b.commits) == 1 else 's'}; {runs}"
          + (f"; {b.link}" if b.link else ""))
    if c["added"] or c["replaced"]:
        print(f"  its text is the current text of {c['live']} documents: {c['passages']} passages, {c['names']} "
              f"names of {c['entities']} entities, {c['facts']} facts (store commit {b.store_seq})")
    for commit in b.commits:
        print(f"  commit {commit['seq']} {commit['operation']} at {commit['committed_at']}, by {commit['by']}, "
              f"{_run(commit)}")
    for waiting in b.awaiting_extraction:
        print(f"  {waiting['passages']} passages await extraction batch {waiting['batch']} ({waiting['state']}; "
              "`lightfoot extract-batches status`)")
    for d in b.documents[:args.documents]:
        now = d["status"] + (f" (batch {d['status_batch']})" if d["status_batch"] and d["status_batch"] != b.batch_id
                             else "")
        title = f" {d['title']!r}" if d.get("title") else ""
        print(f"  {d['doc_id']}{title}: {d['action']} in commit {d['seq']}; now {now}")
    if len(b.documents) > args.documents:
        print(f"  … and {len(b.documents) - args.documents} more documents (--json lists them all)")
    if b.entities:
        print(f"  entities its documents' passages mention ({c['entities']}), most first "
              "(`lightfoot explain entity ID` names their sources and runs):")
    for e in b.entities:
        print(f"    {e['display_name']} [{e['type']}] {e['entity_id']}: {e['n_passages']} passage{'' if e['n_passages'] == 1 else 's'}")
    if b.more_entities:
        print(f"    … and {b.more_entities} more entities")
    return 0


def cmd_explain_query(args) -> int:
    from lightfoot_pipeline.cli.query import serving_checks
    from lightfoot_pipeline.retrieval.explain import explain_query
    from lightfoot_pipeline.service.queries import open_service

    if args.mode == "deep":  # the steps of a deep answer: subqueries, what each retrieved, memory operations
        from lightfoot_pipeline.cli.query import query_deep

        if args.as_groups is not None:
            raise SettingsError("explain query: --as is not an option of the deep mode here",
                                hint="`lightfoot query --mode deep` answers as a principal")

        args.trace = True
        return query_deep(args, existing_store(args))
    if args.max_steps is not None or args.question_budget is not None:
        raise SettingsError("explain query: --max-steps and --question-budget are options of the deep mode",
                            hint="add --mode deep")
    store = existing_store(args)
    service = open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker,
                           answers=False, answers_off_reason="explain does not answer",
                           snapshot_checks=serving_checks(store, args.embedder))
    try:
        result = explain_query(service.current(_principal(args)).retriever, args.question, top_k=args.top_k,
                               rerank=not args.no_rerank)
    finally:
        service.close()
    if args.json:
        print_json(result)
        return 0
    print(f"snapshot {result['snapshot_id']}; order {result['order']}")
    print("seed facts (the question's most similar facts; their entities seed the walk):")
    for f in result["seed_facts"]:
        print(f"  ({f['subject']}; {f['predicate']}; {f['object']}) similarity {f['similarity']:.3f}")
        for ev in f["evidence"][:2]:
            if ev["evidence"]:
                print(f"      {ev['doc_id']}: \"{_short(ev['evidence'])}\"")
    for p in result["passages"]:
        print(f"{p['rank']:>2}. {p['doc_id']} {p['title']!r}: pagerank #{p['pagerank_rank']} "
              f"({p['pagerank_score']:.5f}), dense #{p['dense_rank']} ({p['dense_score']:.3f})"
              + (f", rerank #{p['rerank_rank']}" if p["rerank_rank"] else "")
              + (f"\n      from {p['location']}" if p["location"] else ""))
        if "restart_share" in p:
            print(f"      {p['restart_share']:.0%} from its own seed; through "
                  + ", ".join(f"{e['display_name']}{' (seed)' if e['seed'] else ''} {e['share']:.0%}"
                              for e in p["entities"]))
    return 0


AS_HELP = ("answer as a principal of these reader groups (comma-separated; * for every document; empty: public "
           "documents only); default: the operator, every document")


def add_explain_commands(sub, common) -> None:
    p = sub.add_parser("explain", help="provenance: what a document contributed, an entity's or a fact's "
                                       "sources, what a batch did, why a passage ranked")
    kinds = p.add_subparsers(dest="kind", required=True)
    d = kinds.add_parser("doc", parents=[common], help="a document's passages, names, entities and facts, and "
                                                       "what deleting it would remove (a dry run)")
    d.add_argument("doc_id", metavar="DOC_ID")
    d.add_argument("--no-preview", action="store_true", help="skip the deletion dry run")
    d.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS", help=AS_HELP)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_explain_doc)
    e = kinds.add_parser("entity", parents=[common], help="an entity's aliases, their passages and documents, "
                                                          "synonym edges and facts")
    e.add_argument("name", metavar="NAME", help="a name as written in a passage, or an entity id")
    e.add_argument("--facts", type=int, default=20, help="facts to print (default 20; --json has up to 200)")
    e.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS", help=AS_HELP)
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_explain_entity)
    f = kinds.add_parser("fact", parents=[common], help="a fact's asserting passages and its source documents "
                                                        "with the batches that produced them")
    f.add_argument("fact_id", metavar="FACT_ID", help="a fact id (explain entity --json lists them)")
    f.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS", help=AS_HELP)
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=cmd_explain_fact)
    b = kinds.add_parser("batch", parents=[common], help="what an ingestion batch did to each document and where "
                                                         "each stands now, with its store commits and runs")
    b.add_argument("batch_id", metavar="BATCH_ID", help="a batch id, as a command prints it or a Dagster partition")
    b.add_argument("--documents", type=int, default=50, help="documents to print (default 50; --json has all)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_explain_batch)
    q = kinds.add_parser("query", parents=[common], help="why each passage ranked for a question")
    q.add_argument("question")
    q.add_argument("--top-k", type=int, default=10, help="passages to explain (1-30, default 10)")
    q.add_argument("--no-rerank", action="store_true", help="keep the PageRank order")
    q.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM]")
    q.add_argument("--reranker", default=None, help="cross-encoder name or path; none turns reranking off")
    q.add_argument("--mode", choices=("lightfoot", "deep"), default="lightfoot",
                   help="lightfoot: why each passage ranked (default); deep: the steps of a deep answer "
                        "(model calls: needs an endpoint)")
    q.add_argument("--max-steps", type=int, default=None, help="deep mode: retrieval steps at most")
    q.add_argument("--question-budget", type=float, default=None, help="deep mode: most one question spends, USD")
    q.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS", help=AS_HELP + " (not with --mode deep)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_explain_query)
