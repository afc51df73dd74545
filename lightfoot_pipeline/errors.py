"""The errors Lightfoot raises for what a user can set right, under one base: :class:`LightfootError`.

An error's message says what failed and why; its ``hint`` (or the message's last clause) says what
to do. The command line catches ``LightfootError`` in one place and prints :meth:`~LightfootError.line`
on one line, exit code 2; any other exception is a bug, and keeps its traceback.

Each family is defined beside the code that raises it, and keeps the built-in base that callers
catch it by (``ValueError``, ``RuntimeError``, ``OSError``):

- ``settings``: SettingsError (an environment variable or setting that cannot be used);
- ``models``: LLMError (a model call; its hint follows its kind), UnpricedModelError (paid calls
  to a model without a known price, refused before any is made), EmbedderUnavailable, BatchAPIError
  (a provider's Batch API or file storage refused or failed a call: the HTTP status and error code);
- ``store``: StoreError, with ConcurrentCommitError (another writer won), StoreUnavailable
  (the store's URI cannot be read: a file, an unknown scheme, an unreachable object store) and
  StoreLayoutError (a store laid out by an earlier version: ``lightfoot migrate``);
- ``ingest``: DatasetError, PolicyError (a retention policy file), FileReadError (a synced file
  that cannot be read: its reason is recorded, the rest of the batch goes on), ReadersError (a
  document's readers that are not group names, or a change of readers of documents not live);
- ``index``: EmbedderRequired, RelinkError (a spread link computation that cannot go on);
- ``pipeline``: IndexConfigError (a store built with another embedder or other settings), BatchError
  (an ingestion batch whose documents have neither a landed copy nor a stored one);
- ``explain``: ExplainError (a document or entity the store does not know);
- ``serving``: SnapshotError, NoSnapshotLoaded, RetrievalError, RerankerUnavailable,
  AuthConfigError, BadRequest and HttpError (what the query service answers other than 200),
  ChatError (a chat completion refused, in the OpenAI error shape), OperatorOnly (an explanation
  only the operator may ask for, such as a deletion's dry run);
  in the deep mode DeepQueryError (an endpoint that cannot serve: the run stops), QuestionStopped
  and ReplyError (one question ends with its memory so far and the reason);
- ``evaluation``: HarnessError, RunError.
"""

from __future__ import annotations


class LightfootError(Exception):
    """A failure the user can act on: the message says what failed and why, ``hint`` what to do."""

    hint: str = ""  # what to do, where the message does not end by saying it

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint

    def line(self) -> str:
        """The error on one line: what failed and why, then what to do."""
        text = " ".join(str(self).split()) or type(self).__name__
        if self.hint:
            text = f"{text.rstrip('.;')}; {self.hint}"
        return text
