"""Keys, signatures and signed requests: who is asking, proven rather than claimed.

Threat model (docs/JOURNAL.md, condition 8): a caller may use every public API and read every
store file, but holds only its own private key. So nothing here trusts a name a
caller gives itself; every identity is an ed25519 public key, and every grant,
revocation and journal request is checked by its signature.

- The **owner key** signs grants. ``objstore init`` creates it outside the store
  (``$OBJSTORE_KEYS``, default ``~/.config/objstore/keys``) and the store keeps
  only its public key, behind the write-once ref ``keys/owner``.
- A **request** (``Request``) is signed over (operation, run, body hash, expected
  journal head, time, nonce). The Host checks the signature, the time (within
  ``MAX_SKEW`` seconds) and that the nonce was not seen before.

ed25519 comes from ``cryptography`` (pinned in pyproject.toml): a well-kept,
audited implementation; writing signatures by hand is not an option.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import InvalidInput, Refused, StorageOSError, Unauthenticated
from . import codec, runrefs
from .authority import object_message as object_message  # re-exported: the one copy is below the engine's rule
from .authority import object_signed_by as object_signed_by
from .authority import verify_sig as verify_sig

if TYPE_CHECKING:
    from .store import Store

OWNER_REF = runrefs.OWNER_REF
MAX_SKEW = 300.0  # seconds a signed request may be old (or ahead) when the Host checks it
_REQ_DOMAIN = b"objstore-request-v1\x00"


def key_dir() -> str:
    """Where private keys live: ``$OBJSTORE_KEYS``, else the user's config directory (never the store)."""
    d = os.environ.get("OBJSTORE_KEYS")
    if d:
        return os.path.abspath(d)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "objstore", "keys")


def owner_key_path() -> str:
    return os.path.join(key_dir(), "owner.key")


@dataclass(frozen=True)
class Key:
    """A private key. ``public`` is the 64-hex-digit public key that names its holder."""

    private: Ed25519PrivateKey

    @property
    def public(self) -> str:
        return self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    def sign(self, message: bytes) -> str:
        return self.private.sign(message).hex()

    def pem(self) -> bytes:
        return self.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())

    def public_pem(self) -> bytes:
        return public_pem(self.public)


def generate() -> Key:
    return Key(Ed25519PrivateKey.generate())


def public_pem(public: str) -> bytes:
    pub = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
    return pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def save_key(path: str, key: Key) -> None:
    """Write a private key (mode 0600, created atomically) and its public key beside it (``.pub``)."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        raise InvalidInput(f"{path} exists; refusing to overwrite a key")
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key.pem())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path)  # never replaces a key another process wrote meanwhile
        os.unlink(tmp)
        with open(path + ".pub", "wb") as f:
            f.write(key.public_pem())
    except FileExistsError:
        raise InvalidInput(f"{path} exists; refusing to overwrite a key") from None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:  # the name given is not a path this system can hold: bad input
            raise InvalidInput(f"cannot write a key at {path}: {e.strerror}") from None
        raise StorageOSError(f"write key {path}", e) from None


def _read_key_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidInput(f"cannot read {what} {path}: {e.strerror or e}") from None


def load_key(path: str) -> Key:
    return load_key_bytes(_read_key_file(path, "key"), path)


def load_public(path: str) -> str:
    """A public key file (PEM, or 64 hex digits) as 64 hex digits. A private key file gives its public key."""
    return parse_public(_read_key_file(path, "public key"), path)


def parse_public(data: bytes, where: str = "public key") -> str:
    text = data.strip()
    if len(text) == 64:
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(text.decode("ascii")))
            return text.decode("ascii").lower()
        except (ValueError, UnicodeDecodeError):
            pass
    if b"PRIVATE KEY" in text:
        return load_key_bytes(text, where).public
    try:
        pub = serialization.load_pem_public_key(text)
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"{where} is not an ed25519 public key (PEM or 64 hex digits): {e}") from None
    if not isinstance(pub, Ed25519PublicKey):
        raise InvalidInput(f"{where} is not an ed25519 public key")
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def load_key_bytes(data: bytes, where: str = "key") -> Key:
    try:
        k = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:  # TypeError: an encrypted key (no password is ever asked for)
        raise InvalidInput(f"{where} is not a PEM private key: {e}") from None
    if not isinstance(k, Ed25519PrivateKey):
        raise InvalidInput(f"{where} is not an ed25519 private key")
    return Key(k)


def check_public(public: object) -> str:
    if not isinstance(public, str) or len(public) != 64:
        raise InvalidInput("a public key is 64 hex digits")
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
    except ValueError:
        raise InvalidInput(f"{public[:16]}… is not an ed25519 public key") from None
    return public.lower()


# -- signed objects (grants) -------------------------------------------------------------------------

def sign_object(key: Key, value: dict) -> dict:
    out = dict(value, signer=key.public)
    out["sig"] = key.sign(object_message(out))
    return out


# -- the owner key ------------------------------------------------------------------------------------

def owner_public(store: Store) -> str | None:
    """The store's owner public key (hex), from the write-once ref ``keys/owner``."""
    oid = store.read_ref(OWNER_REF)
    if not isinstance(oid, bytes):
        return None
    return parse_public(store.get_blob(oid), OWNER_REF)


def set_owner(store: Store, public: str) -> None:
    """Record the owner public key once (the ref is write-once: see refs.check_move).

    On a store of a log per run, every run that exists then is fenced after it (``Store.fence``): its log accepts
    from here on only entries judged at a store-log position that holds the owner key. Without it a run started
    before the key was set has no citation, and a forger could cite a position before the key (where deletions need
    no signature) in that run's log."""
    public = check_public(public)
    with store.batch():  # looked at and set under the writer lock: two inits at once both succeed
        cur = owner_public(store)
        if cur == public:
            return
        if cur is not None:
            raise Refused(f"this store's owner key is already {cur[:16]}…; it is never replaced")
        store.set_ref(OWNER_REF, None, store.put_blob(public.encode("ascii")), "owner public key")
        if store.logs.per_run:
            store.after_commit(lambda: _fence_all(store))


def _fence_all(store: Store) -> None:
    for run in store.logs.run_ids():
        store.fence(run)


def ensure_owner_key(store: Store, path: str | None = None) -> tuple[Key, bool]:
    """``init``'s part: the owner key pair outside the store (created if missing) and its public
    key in the store. Returns (key, created)."""
    path = path or owner_key_path()
    created = False
    cur = owner_public(store)
    if cur is not None and not os.path.exists(path):
        raise Refused(f"this store's owner key is {cur[:16]}…, and there is no key at {path} (set OBJSTORE_KEYS or --key)")
    if not os.path.exists(path):
        try:
            save_key(path, generate())
            created = True
        except InvalidInput:
            if not os.path.exists(path):
                raise
    key = load_key(path)
    cur = owner_public(store)
    if cur is None:
        set_owner(store, key.public)
    elif cur != key.public:
        raise Refused(f"the key at {path} is not this store's owner key ({cur[:16]}…)")
    return key, created


def default_key(path: str | None = None, store: Store | None = None) -> Key:
    """The caller's key: ``path``, else ``$OBJSTORE_KEY``, else the owner key under ``$OBJSTORE_KEYS``.

    With ``store``: a store that has no owner key yet (made by a library call or by ``ingest``)
    adopts the default owner key, exactly as ``objstore init`` would, when that is the key in use."""
    explicit = path or os.environ.get("OBJSTORE_KEY")
    if explicit is None and store is not None and owner_public(store) is None:
        return ensure_owner_key(store)[0]
    path = explicit or owner_key_path()
    if not os.path.exists(path):
        raise Unauthenticated(f"no private key at {path} (run 'objstore init' to create the owner key, or pass --key)")
    return load_key(path)


# -- signed requests -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """A signed request to a Host. ``params`` (purpose, budget, predecessor, …) are covered
    through ``body_sha256`` together with the body of an update."""

    op: str
    run: str | None
    body_sha256: str
    expect_head: str | None
    time: float
    nonce: str
    key: str
    sig: str | None = None
    params: dict = dataclasses.field(default_factory=dict)
    subject: str | None = None

    def message(self) -> bytes:
        return _REQ_DOMAIN + codec.canonical_json({
            "op": self.op, "run": self.run, "subject": self.subject, "body_sha256": self.body_sha256,
            "expect_head": self.expect_head, "time": self.time, "nonce": self.nonce, "key": self.key})

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def check(self) -> Request:
        """Field types, before anything is hashed or stored (a malformed request is unauthenticated)."""
        def bad(what: str) -> NoReturn:
            raise Unauthenticated(f"malformed request: {what}")

        if not isinstance(self.op, str) or not self.op:
            bad("op must be a non-empty string")
        for name in ("run", "subject", "expect_head", "sig"):
            if not isinstance(getattr(self, name), (str, type(None))):
                bad(f"{name} must be a string or null")
        if not isinstance(self.body_sha256, str) or len(self.body_sha256) != 64:
            bad("body_sha256 must be 64 hex digits")
        if isinstance(self.time, bool) or not isinstance(self.time, (int, float)) or self.time != self.time:
            bad("time must be a number")
        if not isinstance(self.nonce, str) or not 16 <= len(self.nonce) <= 128:
            bad("nonce must be a string of 16 to 128 characters")
        if not isinstance(self.key, str):
            bad("key must be a string")
        if not isinstance(self.params, dict):
            bad("params must be an object")
        return self

    @classmethod
    def from_json(cls, d: object) -> Request:
        if not isinstance(d, dict):
            raise Unauthenticated("the request is not a signed request object")
        try:
            names = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in d.items() if k in names}).check()
        except TypeError as e:
            raise Unauthenticated(f"malformed request: {e}") from None


def body_hash(params: dict, body: bytes = b"") -> str:
    """What a request's signature covers of its parameters and body."""
    h = hashlib.sha256(codec.canonical_json(params))
    h.update(b"\x00")
    h.update(body)
    return h.hexdigest()


def sign_request(key: Key, op: str, run: str | None, *, params: dict | None = None, body: bytes = b"",
                 expect_head: str | None = None, subject: str | None = None, when: float | None = None) -> Request:
    params = dict(params or {})
    req = Request(op=op, run=run, subject=subject, body_sha256=body_hash(params, body), expect_head=expect_head,
                  time=time.time() if when is None else float(when), nonce=secrets.token_hex(16), key=key.public,
                  params=params)
    return dataclasses.replace(req, sig=key.sign(req.message()))


def unsigned_request(op: str, run: str | None, *, params: dict | None = None, body: bytes = b"", subject: str | None = None) -> Request:
    """A request without a signature (what an unauthenticated caller sends; the Host refuses it)."""
    params = dict(params or {})
    return Request(op=op, run=run, subject=subject, body_sha256=body_hash(params, body), expect_head=None,
                   time=time.time(), nonce=secrets.token_hex(16), key="", params=params)
