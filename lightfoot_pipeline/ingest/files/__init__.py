"""Reading document files: PDF, Word, HTML, Markdown and plain text, each by a maintained parser.

:func:`read_file` takes a file's bytes, tells its type from its content (:mod:`.detect`), and
returns its title and its text as blocks in reading order, each with where it came from: the page
of a PDF, the heading path of a Word, HTML or Markdown section. A file that cannot be read as a
document (encrypted, corrupt, binary, empty) raises :class:`FileReadError` with the reason, and
only that file fails.
"""

from lightfoot_pipeline.ingest.files.blocks import Block, FileReadError, ParsedFile
from lightfoot_pipeline.ingest.files.read import read_file

__all__ = ["Block", "FileReadError", "ParsedFile", "read_file"]
