"""Who may query the service, and as whom: bearer tokens, kept and compared as SHA-256 digests,
each naming a principal and its reader groups (permissions/principals.py).

Tokens come from two places, either or both:

- ``LIGHTFOOT_SERVE_TOKEN``: one token, in the environment (a deployment's secret), reading as
  the groups of ``LIGHTFOOT_SERVE_TOKEN_GROUPS`` (comma-separated; unset: public documents only);
- ``LIGHTFOOT_SERVE_TOKENS_FILE`` (or ``--tokens-file``): a file of SHA-256 hex digests of
  tokens, one a line (``#`` starts a comment), so that the file holds no token itself. A line is
  ``DIGEST``, ``DIGEST PRINCIPAL`` or ``DIGEST PRINCIPAL GROUP[,GROUP]``: a bare digest (the
  format before principals) is a token of no group, named in logs by its token id; a token of no
  group reads the public documents only, and the group ``*`` is the operator's (every document).
  ``lightfoot serve-token [--principal NAME --groups G,H]`` makes a new token and its line, or
  ``--hash`` hashes one from stdin. The file is read again when its content changes (its SHA-256
  compared at most every two seconds, whatever its size and modification time), so a token is added, revoked or given other groups without a restart. The file
  fails closed: once it is missing, unreadable, or holds a line that cannot be used (not a digest,
  a principal name or group that is not one, a digest twice), every token it gave is revoked at
  once (the log says why), until it reads again.

A request presents ``Authorization: Bearer <token>``. The presented token is hashed and compared
with every known digest by :func:`hmac.compare_digest`, so the time taken says nothing about how
close a guess was, nor which principal it names. A token is known in logs by :func:`token_id`, a
prefix of its digest, and by its principal's name, never by the token or its groups.

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
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest.readers import ReadersError
from lightfoot_pipeline.permissions.principals import MAX_PRINCIPAL_CHARS, Principal, principal_of
from lightfoot_pipeline.settings import (
    SERVE_TOKEN_ENV,
    SERVE_TOKEN_GROUPS_ENV,
    SERVE_TOKENS_FILE_ENV,
    serve_token_groups,
    serve_tokens,
)

log = logging.getLogger(__name__)

TOKEN_ENV, TOKENS_FILE_ENV, TOKEN_GROUPS_ENV = SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, SERVE_TOKEN_GROUPS_ENV
MIN_TOKEN_CHARS = 16
RECHECK_S = 2.0  # how often the tokens file is read again and its digest compared
ENV_PRINCIPAL = "env-token"  # the name of LIGHTFOOT_SERVE_TOKEN's principal
PRINCIPAL_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._@:-]{{0,{MAX_PRINCIPAL_CHARS - 1}}}$")
_HEX = frozenset("0123456789abcdef")


PRINCIPAL_SCOPE_KEY = "lightfoot.principal"  # the request's Principal, set by the token check (app.py)
PUBLIC_PRINCIPAL = Principal("public", ())


def request_principal(scope) -> Principal:
    """Whom a request is answered as: the principal its token check found (a request that reached
    an endpoint without one reads the public documents only: this fails closed)."""
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    return principal if isinstance(principal, Principal) else PUBLIC_PRINCIPAL


@dataclass(frozen=True)
class Identity:
    """Who presented an accepted token: its :func:`token_id` and the principal it names."""

    token_id: str
    principal: Principal


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


def token_principal(digest: bytes, name: str | None, groups: str | None, where: str) -> Principal:
    """The principal a token names: ``name`` (a bare digest's: its token id) reading as ``groups``
    (comma-separated; None or empty: the public documents only). AuthConfigError says what is wrong."""
    if name is not None and not PRINCIPAL_NAME.match(name):
        raise AuthConfigError(f"{where}: {name[:MAX_PRINCIPAL_CHARS]!r} is not a principal name (letters, digits "
                              f"and . _ @ : -, starting with a letter or digit, up to {MAX_PRINCIPAL_CHARS} "
                              "characters)")
    try:
        return principal_of(groups or None, name or token_id(digest), where)
    except ReadersError as err:
        raise AuthConfigError(str(err)) from None


def token_line(token: str, principal: str | None = None, groups: str | None = None) -> str:
    """The tokens file's line for ``token``: its digest, then the principal and its groups if given."""
    digest = hash_token(token)
    if groups and not principal:
        raise AuthConfigError("a token's groups need its principal's name (--principal NAME)")
    named = token_principal(bytes.fromhex(digest), principal, groups, "serve-token")
    if not principal:
        return digest
    return " ".join([digest, named.name, *([",".join(named.groups)] if named.groups else [])])


def read_tokens_file(path: Path) -> list[tuple[bytes, Principal]]:
    """The digests in a tokens file with the principal each names; AuthConfigError names the
    first line that cannot be used."""
    return parse_tokens_file(tokens_file_content(path), path)


def tokens_file_content(path: Path) -> bytes:
    """The bytes of a tokens file; AuthConfigError when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise AuthConfigError(f"cannot read the tokens file {path}: {err}") from None


def parse_tokens_file(content: bytes, path: Path) -> list[tuple[bytes, Principal]]:
    """The digests and principals of a tokens file's ``content`` (as :func:`read_tokens_file`)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AuthConfigError(f"cannot read the tokens file {path}: {err}") from None
    entries: list[tuple[bytes, Principal]] = []
    seen: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where, entry = f"{path}, line {number}", fields[0].lower()
        if len(entry) != 64 or not set(entry) <= _HEX:
            raise AuthConfigError(f"{where}: expected a SHA-256 digest (64 hex digits), as `lightfoot serve-token` "
                                  "prints; never the token itself")
        if len(fields) > 3:
            raise AuthConfigError(f"{where}: expected DIGEST [PRINCIPAL [GROUP[,GROUP]]], got {len(fields)} fields")
        digest = bytes.fromhex(entry)
        if digest in seen:
            raise AuthConfigError(f"{where}: the digest {token_id(digest)} is on an earlier line too")
        seen.add(digest)
        name, groups = [*fields[1:], None, None][:2]
        entries.append((digest, token_principal(digest, name, groups, where)))
    return entries


def describe(entries: list[tuple[bytes, Principal]], shown: int = 20) -> str:
    """The tokens of a file for the log: each token id with its principal's name, never its groups."""
    listed = ", ".join(f"{token_id(digest)} {principal.name}" for digest, principal in entries[:shown])
    return (listed or "none") + (f" and {len(entries) - shown} more" if len(entries) > shown else "")


class Tokens:
    """The tokens the service accepts, each with its principal: one from the environment (reading
    as ``groups``) and those of a tokens file."""

    def __init__(self, token: str | None = None, tokens_file: str | Path | None = None,
                 groups: str | None = None) -> None:
        self._fixed: list[tuple[bytes, Principal]] = []
        if token is not None and token.strip():
            try:
                digest = bytes.fromhex(hash_token(token))
            except AuthConfigError as err:
                raise AuthConfigError(f"{TOKEN_ENV}: {err}") from None
            self._fixed.append((digest, token_principal(digest, ENV_PRINCIPAL, groups, TOKEN_GROUPS_ENV)))
        elif groups:
            raise AuthConfigError(f"{TOKEN_GROUPS_ENV} is set but {TOKEN_ENV} is not: the groups name no token")
        self.tokens_file = Path(tokens_file) if tokens_file else None
        self._from_file: list[tuple[bytes, Principal]] = []
        self._file_state: bytes | None = None  # the SHA-256 of the content last read
        self._checked_at = 0.0
        self._lock = threading.Lock()
        if self.tokens_file is not None:
            content = tokens_file_content(self.tokens_file)
            self._from_file = parse_tokens_file(content, self.tokens_file)
            self._file_state = hashlib.sha256(content).digest()
            if not self._from_file:
                log.warning("the tokens file %s holds no digest yet: only other tokens are accepted", self.tokens_file)
            else:
                log.info("read %d token digests from %s: %s", len(self._from_file), self.tokens_file,
                         describe(self._from_file))
        self._checked_at = time.monotonic()

    @classmethod
    def from_env(cls, environ: dict | None = None, tokens_file: str | Path | None = None) -> Tokens:
        """``LIGHTFOOT_SERVE_TOKEN`` with the groups of ``LIGHTFOOT_SERVE_TOKEN_GROUPS``, and the
        tokens file named (else ``LIGHTFOOT_SERVE_TOKENS_FILE``)."""
        token, named_file = serve_tokens(environ)
        return cls(token, tokens_file or named_file, serve_token_groups(environ))

    @property
    def configured(self) -> bool:
        """Whether authentication is on (a token or a tokens file was given)."""
        return bool(self._fixed) or self.tokens_file is not None

    def check(self, token: str) -> bool:
        """Whether ``token`` is one of the accepted tokens (constant time in the token)."""
        return self.identify(token) is not None

    def identify(self, token: str) -> str | None:
        """The :func:`token_id` of ``token`` if it is accepted, else None (constant time in the token)."""
        identity = self.authenticate(token)
        return identity.token_id if identity else None

    def authenticate(self, token: str) -> Identity | None:
        """Who ``token`` is if it is accepted, else None. Every digest is compared, whichever
        matches, so the time taken depends on neither the token nor the principal it names."""
        self._maybe_reload()
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        with self._lock:
            known = self._fixed + self._from_file
        found: Principal | None = None
        for candidate, principal in known:
            matches = hmac.compare_digest(candidate, digest)
            found = principal if matches else found
        return Identity(token_id(digest), found) if found is not None else None

    def check_header(self, value: str | None) -> bool | None:
        """An ``Authorization`` header's verdict: None when it is missing or not a bearer token."""
        presented, identity = self.authenticate_header(value)
        return None if not presented else identity is not None

    def identify_header(self, value: str | None) -> str | None:
        """An ``Authorization`` header's token id: None when it is missing or not a bearer token,
        ``""`` when the token is not accepted."""
        presented, identity = self.authenticate_header(value)
        return None if not presented else identity.token_id if identity else ""

    def authenticate_header(self, value: str | None) -> tuple[bool, Identity | None]:
        """Whether an ``Authorization`` header presents a bearer token, and who it is (None: not accepted)."""
        if not value:
            return False, None
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False, None
        return True, self.authenticate(token.strip())

    def principals(self) -> list[Principal]:
        """The principals of the accepted tokens, by name (the views worth building ahead)."""
        self._maybe_reload()
        with self._lock:
            known = self._fixed + self._from_file
        return sorted({principal for _, principal in known}, key=lambda p: (p.name, p.groups))

    def _maybe_reload(self) -> None:
        """Read the tokens file again when its content changed (compared by digest: an edit that
        keeps its size and modification time counts), at most every RECHECK_S."""
        if self.tokens_file is None or time.monotonic() - self._checked_at < RECHECK_S:
            return
        self._checked_at = time.monotonic()
        state: bytes | None = None  # an unreadable file's
        try:
            content = tokens_file_content(self.tokens_file)
            state = hashlib.sha256(content).digest()
            if state == self._file_state:
                return
            entries = parse_tokens_file(content, self.tokens_file)
        except AuthConfigError as err:  # fail closed: a file that cannot be read revokes what it gave
            with self._lock:
                revoked, self._from_file, previous, self._file_state = len(self._from_file), [], self._file_state, state
            if state != previous:  # said once, not at every check
                log.error("revoked all %d tokens of the tokens file until it reads again: %s", revoked, err)
            return
        with self._lock:
            self._from_file, self._file_state = entries, state
        log.info("read %d token digests from %s: %s", len(entries), self.tokens_file, describe(entries))


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
