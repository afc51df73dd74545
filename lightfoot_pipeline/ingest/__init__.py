"""What comes in: datasets and inboxes, passages, and one validated extraction per passage.

``dataset`` (corpus and question files), ``landing`` and ``inbox`` (documents and deletion
requests dropped in a folder or bucket), ``retention`` (which documents are due for deletion),
``passages`` (chunks), ``extraction`` (one model call per passage, or a recording), ``records``
(validation of what the model said) and ``normalise`` (when two spellings are the same name).
"""
