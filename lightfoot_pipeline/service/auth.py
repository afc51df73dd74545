"""Who may query the service: bearer tokens, kept and compared as SHA-256 digests.

Tokens come from two places, either or both:

- ``LIGHTFOOT_SERVE_TOKEN``: one token, in the environment (a deployment's secret);
- ``LIGHTFOOT_SERVE_TOKENS_FILE`` (or ``--tokens-file``): a file of SHA-256 hex digests of
  tokens, one a line (``#`` starts a comment), so that the file holds no token itself.
  ``lightfoot serve-token`` makes a new token and its line, or ``--hash`` hashes one from stdin.
  The file is read again when it changes (checked at most every two seconds), so a token is
  added or revoked without a restart. The file fails closed: once it is missing, unreadable, or
  holds a line that is not a digest, every token it gave is revoked at once (the log says why),
  until it reads again.

A request presents ``Authorization: Bearer <token>``. The presented token is hashed and compared
with every known digest by :func:`hmac.compare_digest`, so the time taken says nothing about how
close a guess was. A token is known in logs by :func:`token_id`, a prefix of its digest, never by
the token.

A service with no token answers everyone, which :func:`check_exposure` allows only on a loopback
address unless the operator says otherwise (``--insecure-no-auth``). Even on loopback a page in
the machine's browser could reach such a service (a blind form POST, or a DNS name rebound to
127.0.0.1), so without a token and without ``--insecure-no-auth`` the service answers only
requests whose ``Host`` is a loopback name and whose ``Origin``, if any, is the service itself
(:func:`local_origin_only`, enforced by the application's gate).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import threading
import time
from pathlib import Path

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, serve_tokens

log = logging.getLogger(__name__)

TOKEN_ENV, TOKENS_FILE_ENV = SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV
MIN_TOKEN_CHARS = 16
RECHECK_S = 2.0  # how often the tokens file's modification time is looked at
_HEX = frozenset("0123456789abcdef")


class AuthConfigError(LightfootError, ValueError):
    """The token settings cannot be used (the message says why)."""


def hash_token(token: str) -> str:
    """The line a tokens file holds for ``token``: its SHA-256 in hex."""
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise AuthConfigError(f"a token must have at least {MIN_TOKEN_CHARS} characters")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id(digest: bytes) -> str:
    """A token's name in logs: the first 12 hex digits of its SHA-256 (the tokens file's line
    starts with them), which does not let anyone present the token."""
    return "t:" + digest.hex()[:12]


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def read_tokens_file(path: Path) -> list[bytes]:
    """The digests in a tokens file; AuthConfigError names the first line that is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise AuthConfigError(f"cannot read the tokens file {path}: {err}") from None
    digests = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.split("#", 1)[0].strip().lower()
        if not entry:
            continue
        if len(entry) != 64 or not set(entry) <= _HEX:
            raise AuthConfigError(f"{path}, line {number}: expected a SHA-256 digest (64 hex digits), "
                                  "as `lightfoot serve-token` prints; never the token itself")
        digests.append(bytes.fromhex(entry))
    return digests


class Tokens:
    """The tokens the service accepts: one from the environment and those of a tokens file."""

    def __init__(self, token: str | None = None, tokens_file: str | Path | None = None) -> None:
        self._fixed: list[bytes] = []
        if token is not None and token.strip():
            try:
                self._fixed.append(bytes.fromhex(hash_token(token)))
            except AuthConfigError as err:
                raise AuthConfigError(f"{TOKEN_ENV}: {err}") from None
        self.tokens_file = Path(tokens_file) if tokens_file else None
        self._from_file: list[bytes] = []
        self._file_state: tuple[int, int] | None = None
        self._checked_at = 0.0
        self._lock = threading.Lock()
        if self.tokens_file is not None:
            self._from_file = read_tokens_file(self.tokens_file)
            self._file_state = self._stat()
            if not self._from_file:
                log.warning("the tokens file %s holds no digest yet: only other tokens are accepted", self.tokens_file)
        self._checked_at = time.monotonic()

    @classmethod
    def from_env(cls, environ: dict | None = None, tokens_file: str | Path | None = None) -> Tokens:
        """``LIGHTFOOT_SERVE_TOKEN`` and the tokens file named (else ``LIGHTFOOT_SERVE_TOKENS_FILE``)."""
        token, named_file = serve_tokens(environ)
        return cls(token, tokens_file or named_file)

    @property
    def configured(self) -> bool:
        """Whether authentication is on (a token or a tokens file was given)."""
        return bool(self._fixed) or self.tokens_file is not None

    def check(self, token: str) -> bool:
        """Whether ``token`` is one of the accepted tokens (constant time in the token)."""
        return self.identify(token) is not None

    def identify(self, token: str) -> str | None:
        """The :func:`token_id` of ``token`` if it is accepted, else None (constant time in the token)."""
        self._maybe_reload()
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        with self._lock:
            known = self._fixed + self._from_file
        accepted = False
        for candidate in known:  # every digest is compared, whichever matches
            accepted |= hmac.compare_digest(candidate, digest)
        return token_id(digest) if accepted else None

    def check_header(self, value: str | None) -> bool | None:
        """An ``Authorization`` header's verdict: None when it is missing or not a bearer token."""
        verdict = self.identify_header(value)
        return verdict if verdict is None else bool(verdict)

    def identify_header(self, value: str | None) -> str | None:
        """An ``Authorization`` header's token id: None when it is missing or not a bearer token,
        ``""`` when the token is not accepted."""
        if not value:
            return None
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.identify(token.strip()) or ""

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self.tokens_file.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _maybe_reload(self) -> None:
        if self.tokens_file is None or time.monotonic() - self._checked_at < RECHECK_S:
            return
        self._checked_at = time.monotonic()
        state = self._stat()
        if state == self._file_state:
            return
        try:
            digests = read_tokens_file(self.tokens_file)
        except AuthConfigError as err:  # fail closed: a file that cannot be read revokes what it gave
            with self._lock:
                revoked, self._from_file, self._file_state = len(self._from_file), [], state
            log.error("revoked all %d tokens of the tokens file until it reads again: %s", revoked, err)
            return
        with self._lock:
            self._from_file, self._file_state = digests, state
        log.info("read %d token digests from %s", len(digests), self.tokens_file)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (``localhost`` is)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def host_name(value: str) -> str:
    """The name of a ``Host`` header or an origin's authority, without its port, in lower case."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8410
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_loopback_name(name: str) -> bool:
    """Whether a Host name is a loopback name, without asking a resolver: ``localhost`` (and names
    under ``.localhost``) or a literal loopback address."""
    name = name.strip("[]").rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def local_origin_only(host: str | None, origin: str | None) -> str | None:
    """Why a request to a service without a token is refused, or None: its ``Host`` must be a
    loopback name, and its ``Origin``, if any, the same authority (the service's own page)."""
    if not host or not is_loopback_name(host_name(host)):
        return "without a token, this service answers only requests addressed to a loopback name"
    if origin is None:
        return None
    scheme, _, authority = origin.strip().lower().partition("://")
    if scheme != "http" or authority.rstrip("/") != host.strip().lower():
        return "without a token, this service answers only its own page, not another site's"
    return None


def check_exposure(host: str, tokens: Tokens, insecure_no_auth: bool = False) -> None:
    """Refuse to serve beyond loopback without a token unless told to (``--insecure-no-auth``)."""
    if tokens.configured or insecure_no_auth or is_loopback(host):
        return
    raise AuthConfigError(
        f"refusing to serve on {host} without authentication: anyone who reaches the port could query "
        f"the index (and spend on answers). Set {TOKEN_ENV} or {TOKENS_FILE_ENV} (`lightfoot serve-token` "
        "makes a token), bind to 127.0.0.1, or pass --insecure-no-auth behind a proxy that authenticates")
