"""The hook hot path: what an agent runs on every hook event. Standard library only.

Run as ``python -S /abs/path/api/hot_path/run.py <agent> <data dir>`` (what
``hookledger install-hooks`` writes: no ``site``, no package imports; ``run.py`` imports
this module so its cached bytecode is used), or directly as a script. Reads one hook
payload on stdin and, always printing valid hook output and exiting 0:

* Privacy first, in both modes: a payload that may hold an opening ``<private>`` tag
  (:func:`may_hold_private`, exact) has those spans removed (same rules as
  :mod:`ledger.privacy`) before it is written or sent anywhere.
* Local server (``HOOKLEDGER_URL`` unset or loopback): appends the payload, whole, with
  a capture key (UUIDv7) and capture time, to the spool journal
  ``<data dir>/spool/hooks.journal`` and exits. No network, and no ``json``, ``re``,
  ``socket`` or ``urllib`` import on this path. The server ingests the journal
  (:mod:`ledger.journal`).
* ``SessionStart`` (the one hook that answers) also asks the server for context,
  ``GET /v1/context?format=hook&session_id=…&cwd=…`` (:mod:`http.client`, 2 s timeout),
  and prints the answer as is: the server encodes
  ``{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": …}}``
  (context at most 10,000 characters), so no JSON library is loaded unless a value holds
  an escape. ``{}`` when the server does not answer. The payload is journalled first.
* Remote server (``HOOKLEDGER_URL`` not loopback): the payload is journalled the same
  way first (so a hook killed while it waits on the network loses nothing), then the
  spool is forwarded (:func:`deliver`, :func:`forward`: ``POST /v1/journal`` in pieces
  of about 1 MiB, idempotent by capture key, one forwarder at a time, resumable) and
  trimmed, within :data:`POST_TIMEOUT_S`. Out of time (a slow server, a large
  backlog), a detached background process (:func:`forward_in_background`) goes on, so
  the hook itself never waits for it; unreachable or refused (5xx, 401, 403), the spool
  waits for the next hook (or ``hookledger forward-spool``). A journal that cannot be
  written (disk full): the payload is POSTed to ``/v1/hooks/<agent>`` directly
  (:func:`post_hook`).

``HOOKLEDGER_TOKEN``, when set, is sent as ``Authorization: Bearer <token>``.

Journal record framing (no JSON needed to write or read it), one ``write()`` per
record, ``O_APPEND`` under an exclusive ``flock``, then ``fdatasync``::

    HLJ1 <capture key> <captured at, ISO-8601 UTC> <agent> <body length in bytes>[ <redactions>]\\n
    <body bytes>\\n

``<redactions>``: present when something was removed here — ``<private>`` spans
(:func:`strip_private_body`) or secrets (a payload holding one of :data:`SECRET_RULES`'
literals takes the slow branch, :func:`redact_secrets_body`): the redactions
``[{"kind", "path", "count"}, …]`` as compact ASCII JSON (:func:`encode_redactions`, at
most :data:`MAX_REDACTIONS_BYTES`), recorded by the server with the event, so the log
says that a removal happened even though the content never left this machine.
"""

import fcntl
import os
import sys
import time

DEFAULT_URL = "http://127.0.0.1:8765"
AGENTS = ("claude-code", "codex", "cursor", "gemini", "openclaw")
"""The agents whose hook payloads the server parses (:data:`ledger.ingest.HOOK_PARSERS`;
tests/test_hook_journal.py keeps them equal). Another name is still captured, and the
server keeps the payload as rejected input with the reason; the hook says so on stderr."""
JOURNAL = "hooks.journal"
MAGIC = b"HLJ1"
JOURNAL_CONTENT_TYPE = "application/x-hookledger-journal"
FORWARD_LOCK = "forward.lock"
REFUSED_FILE = "hooks.refused"
"""Journal records that something in front of the server refused for their size (a
proxy's 413, e.g. nginx's default 1 MiB limit), kept here so they do not hold up every
later record; ``hookledger forward-spool`` sends them again, ``doctor`` lists them."""
FORWARD_PIECE_BYTES = 1 << 20
"""Journal bytes per ``POST /v1/journal`` when forwarding; a larger record goes alone."""
FORWARD_TIMEOUT_S = 60.0
MAX_CONTEXT_CHARS = 10_000
CONTEXT_TIMEOUT_S = 2.0
POST_TIMEOUT_S = 2.0
PLACEHOLDER = "[private]"
MAX_REDACTIONS_BYTES = 4096
"""Longest encoded redaction list (journal header field / HTTP header); a longer one is
collapsed to one total per kind at path ``$`` (:func:`encode_redactions`)."""
# \uXXXX escapes (lower-cased hex) that could spell part of an opening tag "<private".
_TAG_ESCAPES = frozenset(
    b"00" + c.encode()
    for c in (
        "3c",
        "70",
        "72",
        "69",
        "76",
        "61",
        "74",
        "65",
        "50",
        "52",
        "49",
        "56",
        "41",
        "54",
        "45",
    )
)
_SPACE = " \t\n\r\f\v"
# (any case?, literals of which one must occur, literals that all must occur) of every
# secret rule of ledger.secrets (case-insensitive rules' literals lower-cased);
# tests/test_hook_journal.py keeps this equal to the catalogue.
SECRET_RULES = (
    (False, (b'://',), (b'@',)),
    (False, (b'ABIA', b'ACCA', b'AKIA', b'ASIA'), ()),
    (False, (b'AIza',), ()),
    (False, (b'CREDENTIAL', b'KEY', b'PASS', b'PWD', b'SECRET', b'TOKEN'), ()),
    (False, (b'GOCSPX-',), ()),
    (False, (b'PRIVATE KEY',), ()),
    (False, (b'Q~',), ()),
    (False, (b'SG.',), ()),
    (False, (b'_authToken',), ()),
    (False, (b'eyJ',), ()),
    (False, (b'gho_',), ()),
    (False, (b'ghp_',), ()),
    (False, (b'ghr_',), ()),
    (False, (b'ghs_',), ()),
    (False, (b'ghu_',), ()),
    (False, (b'github_pat_',), ()),
    (False, (b'gldt-', b'glft-', b'glpat-', b'glptt-', b'glrt-', b'glsoat-'), ()),
    (False, (b'hf_',), ()),
    (False, (b'hooks.slack.com',), ()),
    (False, (b'npm_',), ()),
    (False, (b'private_key_id',), ()),
    (False, (b'pypi-AgEIcHlwaS5vcmc',), ()),
    (False, (b'rk_live_', b'rk_test_', b'sk_live_', b'sk_test_'), ()),
    (False, (b'sig=',), ()),
    (False, (b'sk-',), ()),
    (False, (b'sk-ant-',), ()),
    (False, (b'whsec_',), ()),
    (False, (b'xapp-', b'xoxa-', b'xoxb-', b'xoxe-', b'xoxp-', b'xoxr-', b'xoxs-'), ()),
    (False, (b'ya29.',), ()),
    (True, (b'accountkey',), ()),
    (True, (b'basic',), (b'authorization',)),
    (True, (b'bearer',), ()),
    (
        True,
        (b'key"', b'key\\"', b'key\\\\', b'passwd"', b'passwd\\"', b'passwd\\\\',
         b'password"', b'password\\"', b'password\\\\', b'secret"', b'secret\\"',
         b'secret\\\\', b'token"', b'token\\"', b'token\\\\'),
        (),
    ),
    (
        True,
        (b'key : "', b'key : &str', b"key : '", b'key : \\"', b'key : bytes',
         b'key : classvar', b'key : final', b'key : optional', b'key : secretstr',
         b'key : str', b'key : typing.', b'key :"', b'key :&str', b"key :'", b'key :\\"',
         b'key :bytes', b'key :classvar', b'key :final', b'key :optional',
         b'key :secretstr', b'key :str', b'key :typing.', b'key = "', b"key = '",
         b'key = \\"', b'key ="', b"key ='", b'key =\\"', b'key: "', b'key: &str',
         b"key: '", b'key: \\"', b'key: bytes', b'key: classvar', b'key: final',
         b'key: optional', b'key: secretstr', b'key: str', b'key: typing.', b'key:"',
         b'key:&str', b"key:'", b'key:\\"', b'key:bytes', b'key:classvar', b'key:final',
         b'key:optional', b'key:secretstr', b'key:str', b'key:typing.', b'key= "',
         b"key= '", b'key= \\"', b'key="', b"key='", b'key=\\"', b'secret : "',
         b'secret : &str', b"secret : '", b'secret : \\"', b'secret : bytes',
         b'secret : classvar', b'secret : final', b'secret : optional',
         b'secret : secretstr', b'secret : str', b'secret : typing.', b'secret :"',
         b'secret :&str', b"secret :'", b'secret :\\"', b'secret :bytes',
         b'secret :classvar', b'secret :final', b'secret :optional', b'secret :secretstr',
         b'secret :str', b'secret :typing.', b'secret = "', b"secret = '", b'secret = \\"',
         b'secret ="', b"secret ='", b'secret =\\"', b'secret: "', b'secret: &str',
         b"secret: '", b'secret: \\"', b'secret: bytes', b'secret: classvar',
         b'secret: final', b'secret: optional', b'secret: secretstr', b'secret: str',
         b'secret: typing.', b'secret:"', b'secret:&str', b"secret:'", b'secret:\\"',
         b'secret:bytes', b'secret:classvar', b'secret:final', b'secret:optional',
         b'secret:secretstr', b'secret:str', b'secret:typing.', b'secret= "', b"secret= '",
         b'secret= \\"', b'secret="', b"secret='", b'secret=\\"', b'token : "',
         b'token : &str', b"token : '", b'token : \\"', b'token : bytes',
         b'token : classvar', b'token : final', b'token : optional', b'token : secretstr',
         b'token : str', b'token : typing.', b'token :"', b'token :&str', b"token :'",
         b'token :\\"', b'token :bytes', b'token :classvar', b'token :final',
         b'token :optional', b'token :secretstr', b'token :str', b'token :typing.',
         b'token = "', b"token = '", b'token = \\"', b'token ="', b"token ='",
         b'token =\\"', b'token: "', b'token: &str', b"token: '", b'token: \\"',
         b'token: bytes', b'token: classvar', b'token: final', b'token: optional',
         b'token: secretstr', b'token: str', b'token: typing.', b'token:"', b'token:&str',
         b"token:'", b'token:\\"', b'token:bytes', b'token:classvar', b'token:final',
         b'token:optional', b'token:secretstr', b'token:str', b'token:typing.',
         b'token= "', b"token= '", b'token= \\"', b'token="', b"token='", b'token=\\"'),
        (),
    ),
    (True, (b'passwd', b'password'), ()),
    (True, (b'secret',), ()),
)


def uuid7() -> str:
    """RFC 9562 UUIDv7: 48-bit ms timestamp, version 7, variant 10, random bits."""
    ms = time.time_ns() // 1_000_000
    rnd = int.from_bytes(os.urandom(10), "big")
    value = (
        (ms & ((1 << 48) - 1)) << 80
        | 0x7 << 76
        | (rnd >> 68 & 0xFFF) << 64
        | 0b10 << 62
        | rnd & ((1 << 62) - 1)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def now_iso() -> str:
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + (
        f".{ns // 1_000_000 % 1000:03d}Z"
    )


def record_bytes(agent: str, body: bytes, key: str, at: str, redactions: bytes = b"") -> bytes:
    """One journal record (header line, body, newline); ``redactions``: the
    redactions made here (:func:`encode_redactions`), appended to the header."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent) or "_"
    header = b"%s %s %s %s %d" % (MAGIC, key.encode(), at.encode(), safe.encode(), len(body))
    if redactions:
        header += b" " + redactions
    return header + b"\n" + body + b"\n"


def _by_stem(any_of: tuple[bytes, ...]) -> tuple[tuple[bytes, tuple[bytes, ...]], ...]:
    """A rule's literals grouped by their first four bytes, when it has many: a stem
    absent from the body rules out every literal of its group with one search."""
    if len(any_of) <= 8:
        return tuple((literal, (literal,)) for literal in any_of)
    groups: dict[bytes, list[bytes]] = {}
    for literal in any_of:
        groups.setdefault(literal[:4], []).append(literal)
    return tuple((stem, tuple(group)) for stem, group in sorted(groups.items()))


_SECRET_STEMS = tuple(
    (any_case, _by_stem(any_of), all_of) for any_case, any_of, all_of in SECRET_RULES
)


def may_hold_secret(body: bytes) -> bool:
    """Exact pre-check: False only when no rule of the catalogue can match a string of
    the JSON ``body`` (its literals absent in the rule's case; no escape that could
    spell one)."""
    lower = body.lower()
    if b"\\u00" in lower or b"\\/" in lower:
        return True
    for any_case, stems, all_of in _SECRET_STEMS:
        hay = lower if any_case else body
        for stem, group in stems:
            if stem in hay and any(literal in hay for literal in group):
                break
        else:
            continue
        for literal in all_of:
            if literal not in hay:
                break
        else:
            return True
    return False


def redact_secrets_body(body: bytes) -> tuple[bytes, list[dict]]:
    """Secret redaction before the payload is written or sent (the slow branch, taken
    only when :func:`may_hold_secret`): :func:`ledger.privacy.redact_text` (standard
    library only) on the raw JSON text, imported from the package root beside this
    file. Returns (body, the redactions ``{kind, path: "$", count}``; ``[]`` when
    nothing was redacted)."""
    text, redactions = _privacy().redact_text(body.decode("utf-8", "surrogateescape"))
    if not redactions:
        return body, []
    return text.encode("utf-8", "surrogateescape"), redactions


def _privacy():  # type: ignore[no-untyped-def]
    """:mod:`ledger.privacy` (standard library only), imported from the package root
    beside this file: only on the slow branches that need it."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:
        sys.path.insert(0, root)
    from ledger import privacy

    return privacy


def _redact_path(path: str) -> str:
    """A JSON path with the secrets in its keys redacted (as the server's cleaned keys)."""
    return redact_secrets_body(path.encode("utf-8", "surrogateescape"))[0].decode(
        "utf-8", "surrogateescape"
    )


def encode_redactions(redactions: list[dict]) -> bytes:
    """``redactions`` as compact ASCII JSON (no spaces: it is one field of a journal
    header, and an HTTP header value; a space in a path, from a key, is ``\\u0020``),
    ``b""`` for none. Longer than :data:`MAX_REDACTIONS_BYTES`: one ``{kind, path: "$",
    count: total}`` per kind instead, so the counts survive and the header stays small."""
    if not redactions:
        return b""
    import json

    found = json.dumps(redactions, separators=(",", ":"), ensure_ascii=True).encode()
    found = found.replace(b" ", b"\\u0020")  # only inside strings: the separators have none
    if len(found) <= MAX_REDACTIONS_BYTES:
        return found
    totals: dict[str, int] = {}
    for r in redactions:
        totals[r["kind"]] = totals.get(r["kind"], 0) + r["count"]
    collapsed = [{"kind": k, "path": "$", "count": n} for k, n in totals.items()]
    return json.dumps(collapsed, separators=(",", ":"), ensure_ascii=True).encode()


def journal_append(spool_dir: str, record: bytes) -> None:
    """Append ``record`` to ``<spool_dir>/hooks.journal``; safe with many processes.

    The server renames the journal aside to ingest it; a writer that opened the old
    file before the rename sees (under the lock) that the path is a new file and
    reopens, so no record lands in a file already read.

    Raises:
        OSError: the journal cannot be written (e.g. disk full, read-only).
    """
    path = spool_dir + "/" + JOURNAL
    for _ in range(50):
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except FileNotFoundError:
            os.makedirs(spool_dir, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            try:
                same = st.st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                    # a torn record (a writer cut off mid-write): start ours on a line
                    # of its own, or the reader takes it for the rest of the torn one
                    record = b"\n" + record
                view = memoryview(record)
                while view:
                    view = view[os.write(fd, view) :]
                os.fdatasync(fd)
                return
        finally:
            os.close(fd)
    raise OSError("spool journal kept moving; record not written")


def string_field(body: bytes, name: str) -> str | None:
    """The first string value of key ``name`` in JSON bytes, found without a parser.

    The exact bytes ``"name"`` followed by ``:`` occur only as a key (inside a JSON
    string the quotes would be escaped). Returns None when absent, not a string, or
    holding an escape (then ask a JSON parser)."""
    key = b'"' + name.encode() + b'"'
    i = body.find(key)
    while i >= 0:
        j = i + len(key)
        while j < len(body) and body[j] in b" \t\r\n":
            j += 1
        if j < len(body) and body[j] == 58:  # ':'
            j += 1
            while j < len(body) and body[j] in b" \t\r\n":
                j += 1
            if j < len(body) and body[j] == 34:  # '"'
                end = body.find(b'"', j + 1)
                value = body[j + 1 : end] if end > 0 else b"\\"
                if b"\\" not in value:
                    return value.decode("utf-8", "replace")
            return None
        i = body.find(key, i + 1)
    return None


def hook_event_name(body: bytes) -> str:
    """The payload's ``hook_event_name`` ("" when not found)."""
    return string_field(body, "hook_event_name") or ""


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (also ``localhost.``) and loopback IP literals (127.0.0.0/8,
    ``::1``, IPv4-mapped ``::ffff:127.x.x.x``; brackets allowed). The one definition of
    loopback, shared with the server's bind check (:mod:`api.access`)."""
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost.", "127.0.0.1", "::1"):
        return True  # the common answers without importing ipaddress
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(url: str) -> bool:
    """True when ``url``'s host is loopback (:func:`is_loopback_host`) or missing (a
    malformed URL keeps the payload in the local journal rather than sending it)."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host = rest[1:].split("]", 1)[0] if rest.startswith("[") else rest.split(":", 1)[0]
    return not host or is_loopback_host(host)


# -- privacy before a payload leaves the machine (semantics of ledger/privacy.py) -------


def _tag_at(text: str, lower: str, i: int) -> tuple[bool, int] | None:
    """At ``text[i] == '<'``: (closing, end index) if a private tag starts here."""
    j = i + 1
    closing = j < len(text) and text[j] == "/"
    if closing:
        j += 1
    if lower.startswith("private", j):
        j += 7
        k = 0
        while j < len(text) and text[j] in _SPACE and k < 16:
            j += 1
            k += 1
        if j < len(text) and text[j] == ">":
            return closing, j + 1
    return None


def strip_private_text(text: str) -> tuple[str, int]:
    """Remove ``<private>…</private>`` spans (any case, nested, unclosed = to the end);
    each span becomes ``[private]``. Returns (text, spans removed). Linear time."""
    if "<" not in text:
        return text, 0
    lower = text.lower()
    out: list[str] = []
    pos = depth = removed = 0
    i = text.find("<")
    while i >= 0:
        tag = _tag_at(text, lower, i)
        if tag is not None:
            closing, end = tag
            if not closing:
                if depth == 0:
                    out.append(text[pos:i])
                    removed += 1
                depth += 1
            elif depth > 0:
                depth -= 1
                if depth == 0:
                    out.append(PLACEHOLDER)
                    pos = end
        i = text.find("<", i + 1)
    if depth > 0:
        out.append(PLACEHOLDER)
        return "".join(out), removed
    if removed == 0:
        return text, 0
    out.append(text[pos:])
    return "".join(out), removed


def may_hold_private(body: bytes) -> bool:
    """Exact pre-check on JSON bytes: False only when no string can decode to an
    opening ``<private`` tag (a closing tag alone removes nothing). Unlike a search for
    ``private``, macOS paths such as ``/private/var/...`` do not trigger the decode."""
    lower = body.lower()
    if b"<private" in lower:
        return True
    i = lower.find(b"\\u")
    while i >= 0:
        if lower[i + 2 : i + 6] in _TAG_ESCAPES:
            return True
        i = lower.find(b"\\u", i + 2)
    return False


def strip_private_body(body: bytes) -> tuple[bytes, list[dict]]:
    """``body`` with private spans removed from every JSON string (keys and values);
    a body that is not JSON is scanned as text (path ``$``). Returns (body, one
    ``{"kind": "private_tag", "path", "count"}`` per string that lost spans, with the
    JSON paths of :func:`ledger.privacy.strip_private`, e.g. ``$.tool_input.command``,
    ``$.items[2]``, ``$.<key>`` for a key). An unpaired surrogate escape (``\\ud83d``,
    a string cut inside an emoji) is written back as that escape, invalid UTF-8 as the
    bytes it was; a body nested deeper than Python recurses is scanned as text, where a
    tag spelled with ``\\u`` escapes counts too
    (:func:`ledger.privacy.strip_private_json_text`)."""
    import json

    try:
        text, errors = body.decode("utf-8"), "backslashreplace"
    except UnicodeDecodeError:
        text, errors = body.decode("utf-8", "surrogateescape"), "surrogateescape"
    if "<" not in text and "\\u" not in text:
        return body, []
    found: list[dict] = []

    def strip(v: str, path: str) -> str:
        s, n = strip_private_text(v)
        if n:
            found.append({"kind": "private_tag", "path": path, "count": n})
        return s

    def walk(v, path):  # type: ignore[no-untyped-def]
        if isinstance(v, str):
            return strip(v, path)
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                key = strip(k, path + ".<key>") if isinstance(k, str) else k
                out[key] = walk(x, f"{path}.{key}")  # the path never holds a removed span
            return out
        if isinstance(v, list):
            return [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
        return v

    try:
        cleaned = walk(json.loads(text), "$")
        if not found:
            return body, []
        return json.dumps(cleaned, ensure_ascii=False).encode("utf-8", errors), found
    except (ValueError, RecursionError):  # not JSON, too deep, or unencodable: as text,
        # whose tags may be spelled with escapes (ledger.privacy.strip_private_json_text)
        cleaned, n = _privacy().strip_private_json_text(text)
        if not n:
            return body, []
        return cleaned.encode("utf-8", "surrogateescape"), [
            {"kind": "private_tag", "path": "$", "count": n}
        ]


# -- talking to the server (only SessionStart and remote mode) -----------------------


def _headers() -> dict[str, str]:
    token = os.environ.get("HOOKLEDGER_TOKEN")
    return {"Authorization": "Bearer " + token} if token else {}


_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def quote(text: str) -> str:
    """Percent-encode ``text`` (UTF-8) for a URL query value."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in text.encode("utf-8"))


def http(
    method: str, url: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    """One HTTP request with :mod:`http.client` (lighter than urllib.request), done in
    a daemon thread that the caller waits for at most ``timeout`` seconds in all: the
    client's own timeout bounds each socket operation, not the name lookup (a resolver
    that never answers held the hook until the agent killed it) nor the request as a
    whole. A ``url`` without a scheme (``host:port``) is plain HTTP.

    Raises:
        TimeoutError: no answer within ``timeout`` (the thread is left to the process's
            exit; a request it still completes is idempotent by capture key).
        OSError, http.client.HTTPException: the request failed.
    """
    import threading

    out: list[tuple[int, bytes]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(_request(method, url, path, body, headers, timeout))
        except BaseException as e:
            failed.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if out:
        return out[0]
    if failed:
        raise failed[0]
    raise TimeoutError(f"no answer from {url} within {timeout} s")


def _request(
    method: str, url: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    """:func:`http`'s request, in the calling thread."""
    import http.client

    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    hostport, _, base = rest.partition("/")
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = cls(hostport, timeout=timeout)
    try:
        try:  # noqa: SIM105 (contextlib costs an import on the hot path)
            conn.request(
                method,
                ("/" + base if base else "") + path,
                body=body,
                headers={**headers, **_headers()},
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered, and closed, before the whole body was sent (a proxy's 413)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post_hook(
    url: str, agent: str, body: bytes, key: str, at: str, redactions: bytes = b""
) -> bool:
    """POST one payload; True when the server took it: a 2xx, or hookledger's own
    400/404/413 answer (``"rejected":true``: it kept the body, or the first 16 MiB of
    one over its limit, as rejected input). False,
    so the payload is journalled, for anything else: unreachable, 5xx, 401/403, or a
    4xx from something that is not hookledger (a wrong base path, a proxy's 413).
    ``redactions``: :func:`encode_redactions` of what was removed here, sent as
    ``X-Hookledger-Redactions``. The hook uses it only when its journal cannot be written
    (disk full, say): it journals first and forwards the journal (:func:`deliver`), so a
    hook killed mid-request loses nothing."""
    headers = {
        "Content-Type": "application/json",
        "X-Hookledger-Capture-Key": key,
        "X-Hookledger-Captured-At": at,
    }
    if redactions:
        headers["X-Hookledger-Redactions"] = redactions.decode("ascii")
    try:
        status, answer = http("POST", url, "/v1/hooks/" + quote(agent), body, headers, POST_TIMEOUT_S)
    except Exception:
        return False
    return 200 <= status < 300 or (status in (400, 404, 413) and b'"rejected":true' in answer)


def spool_pending(spool_dir: str) -> bool:
    """True when ``spool_dir`` holds a non-empty journal or an aside file."""
    try:
        if os.stat(spool_dir + "/" + JOURNAL).st_size > 0:
            return True
    except OSError:
        pass
    try:
        return any(n.endswith(".aside") for n in os.listdir(spool_dir))
    except OSError:
        return False


def record_end(data: bytes, pos: int) -> int:
    """End (exclusive) of the journal record starting at ``pos``; for broken framing,
    the start of the next record header (the server records those bytes as rejected)."""
    if data.startswith(MAGIC + b" ", pos):
        eol = data.find(b"\n", pos, pos + 8192)
        if eol >= 0:
            fields = data[pos:eol].split(b" ")
            if len(fields) in (5, 6) and fields[4].isdigit():
                end = eol + 1 + int(fields[4]) + 1
                if end <= len(data) and data[end - 1 : end] == b"\n":
                    return end
    nxt = data.find(b"\n" + MAGIC + b" ", pos + 1)
    return len(data) if nxt < 0 else nxt + 1


def _aside_names(spool_dir: str) -> list[str]:
    def mtime(name: str) -> float:
        try:
            return os.stat(spool_dir + "/" + name).st_mtime
        except OSError:
            return 0.0

    prefix = JOURNAL + "."
    names = [n for n in os.listdir(spool_dir) if n.startswith(prefix) and n.endswith(".aside")]
    return sorted(names, key=mtime)


def _read_offset(path: str) -> int:
    try:
        with open(path, "rb") as f:
            text = f.read(32)
        return int(text) if text.isdigit() else 0
    except OSError:
        return 0


DONE, BUSY, REFUSED, LATE = "done", "busy", "refused", "late"
"""How a forward ended (:func:`forward`): the spool is empty; another forwarder holds
``forward.lock``; the server is unreachable or refused a piece; out of time (the time
budget ran out, or a request timed out: a slow server, or a large piece)."""


def forward_spool(
    url: str, spool_dir: str, timeout: float = FORWARD_TIMEOUT_S, budget: float | None = None
) -> tuple[int, bool]:
    """Send everything ``spool_dir`` holds to the server at ``url`` (``POST /v1/journal``,
    pieces of about :data:`FORWARD_PIECE_BYTES` cut at record boundaries) and delete it.

    Same hand-over as the server's own drain (:mod:`ledger.journal`): the journal is
    renamed aside (once the aside files left by an earlier forward are sent), then read
    under its ``flock``. Progress within an aside file is kept
    in ``<aside>.sent`` (the byte offset sent so far), so a forward cut off part-way
    (even by SIGKILL) resumes there; a piece sent twice appends nothing twice (capture
    keys). One forwarder at a time (``forward.lock``; a second returns at once, and the
    first, once it has released the lock, sends what was journalled meanwhile).

    ``timeout``: seconds per request (each socket operation of it); ``budget``: seconds
    for the whole forward (None: no limit); no piece is started after it ran out.

    Returns (bytes forwarded, whether the spool is now empty). Stops, keeping what is
    left, at the first piece the server did not take: anything but a 202 or
    hookledger's own 400/413 (``"rejected":``: it kept the bytes as rejected input), e.g.
    unreachable, 5xx, 401/403, or a 4xx from something that is not hookledger. Only a
    413 from something in front of the server (a proxy's body size limit) does not
    stop it: the piece's records are sent one by one, and one still refused is kept in
    :data:`REFUSED_FILE` (:func:`retry_refused` puts it back in line), so one large
    payload does not hold up every later one.

    Raises:
        OSError: the spool directory cannot be read or changed.
    """
    sent, state = forward(url, spool_dir, timeout, budget)
    return sent, state == DONE


def forward(
    url: str, spool_dir: str, timeout: float = FORWARD_TIMEOUT_S, budget: float | None = None
) -> tuple[int, str]:
    """:func:`forward_spool`, saying how it ended: (bytes forwarded, :data:`DONE`,
    :data:`BUSY`, :data:`REFUSED` or :data:`LATE`).

    Raises:
        OSError: the spool directory cannot be read or changed.
    """
    deadline = None if budget is None else time.monotonic() + budget
    sent = 0
    while True:
        try:
            lock = os.open(spool_dir + "/" + FORWARD_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            return sent, DONE  # no spool directory: nothing was ever spooled
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return sent, BUSY  # another forwarder is at it
            n, state = _forward_once(url, spool_dir, timeout, deadline)
        finally:
            os.close(lock)
        sent += n
        # A hook that journalled while the lock was held, and found it held, left its
        # record to this forwarder: checked after the release, so none is stranded.
        if state != DONE or not spool_pending(spool_dir):
            return sent, state
        if deadline is not None and time.monotonic() >= deadline:
            return sent, LATE


def _forward_once(
    url: str, spool_dir: str, timeout: float, deadline: float | None
) -> tuple[int, str]:
    """One pass of :func:`forward` under ``forward.lock``: every aside file sent and
    deleted; when there is none (left by a forward that stopped), the journal renamed
    aside first. So while the server is unreachable the journal grows as one file,
    rather than one aside file per hook call."""
    names = _aside_names(spool_dir)
    if not names:
        path = spool_dir + "/" + JOURNAL
        try:
            if os.stat(path).st_size > 0:
                os.rename(path, path + "." + uuid7().replace("-", "") + ".aside")
                names = _aside_names(spool_dir)
        except FileNotFoundError:
            pass
    sent = 0
    headers = {"Content-Type": JOURNAL_CONTENT_TYPE}
    for name in names:
        aside = spool_dir + "/" + name
        try:
            with open(aside, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # wait for a hook mid-write
                data = f.read()
        except FileNotFoundError:  # a server on this data directory drained it
            continue
        pos = _read_offset(aside + ".sent")
        alone = False  # one record per piece, after a proxy refused a piece's size
        while pos < len(data):
            end = record_end(data, pos)  # a larger record goes alone
            while not alone and end < len(data) and (
                (nxt := record_end(data, end)) - pos <= FORWARD_PIECE_BYTES
            ):
                end = nxt
            left = timeout if deadline is None else min(timeout, deadline - time.monotonic())
            if left <= 0:
                return sent, LATE
            try:
                status, answer = http("POST", url, "/v1/journal", data[pos:end], headers, left)
            except TimeoutError:
                return sent, LATE
            except Exception:
                return sent, REFUSED
            if status == 413 and b'"rejected":' not in answer:  # not hookledger's 413
                if end != record_end(data, pos):
                    alone = True  # its records one by one: only a large one is refused
                    continue
                _keep_refused(spool_dir, data[pos:end])
                say(f"a record of {end - pos} bytes was refused for its size by something "
                    f"in front of the server (HTTP 413); kept in {spool_dir}/{REFUSED_FILE}")
            elif status != 202 and not (status in (400, 413) and b'"rejected":' in answer):
                if status in (401, 403):  # else spooled silently, hook after hook
                    say(f"the server refused the token (HTTP {status}); the payloads stay "
                        f"in {spool_dir} until it takes them (HOOKLEDGER_TOKEN; hookledger doctor)")
                return sent, REFUSED
            sent += end - pos
            pos = end
            with open(aside + ".sent", "wb") as f:
                f.write(b"%d" % pos)
        for done in (aside, aside + ".sent"):  # the server may have deleted both
            try:  # noqa: SIM105 (contextlib costs an import on the hot path)
                os.unlink(done)
            except FileNotFoundError:
                pass
    return sent, DONE


def _keep_refused(spool_dir: str, record: bytes) -> None:
    """Append ``record`` to :data:`REFUSED_FILE` (then ``fdatasync``)."""
    fd = os.open(spool_dir + "/" + REFUSED_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        view = memoryview(record)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)


def retry_refused(spool_dir: str) -> None:
    """Put :data:`REFUSED_FILE` back in line to be forwarded (an aside file), e.g. after
    the proxy's limit was raised."""
    try:  # noqa: SIM105
        os.rename(spool_dir + "/" + REFUSED_FILE,
                  spool_dir + "/" + JOURNAL + "." + uuid7().replace("-", "") + ".aside")
    except FileNotFoundError:
        pass


def forward_in_background(url: str, spool_dir: str) -> None:
    """Run :func:`forward_spool` in a detached grandchild (own session, standard streams
    on ``/dev/null``, so the agent reading this hook's output never waits for it)."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:  # the child: fork again and exit, so the grandchild is nobody's to wait for
        if os.fork() == 0:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            try:  # noqa: SIM105
                forward_spool(url, spool_dir)
            except BaseException:
                pass
    finally:
        os._exit(0)


def deliver(url: str, spool_dir: str) -> None:
    """Remote mode, after the payload was journalled: :func:`forward` the spool to the
    server within :data:`POST_TIMEOUT_S` (each request, and the whole). Out of time
    (a slow server, a large backlog or record): the rest goes on in the background
    (:func:`forward_in_background`). Unreachable or refused (5xx, 401/403): the spool
    waits for the next hook. Another forwarder running: it takes this record too.
    Never raises: a failure is written to stderr, the record stays in the spool."""
    try:
        state = forward(url, spool_dir, POST_TIMEOUT_S, POST_TIMEOUT_S)[1]
        if state == LATE:
            forward_in_background(url, spool_dir)
    except Exception as e:
        say(f"spooled, not forwarded: {e}")


def say(message: str) -> None:
    """``hookledger hook: <message>`` on stderr (which the agent shows or logs); never
    raises."""
    try:  # noqa: SIM105 (contextlib costs an import on the hot path)
        sys.stderr.write(f"hookledger hook: {message}\n")
    except Exception:
        pass


def session_start_output(url: str, body: bytes) -> str:
    """The hook output for a ``SessionStart`` payload: the server encodes it
    (``GET /v1/context?…&format=hook``, context at most 10,000 characters); ``{}``
    on any failure."""
    try:
        sid, cwd = string_field(body, "session_id"), string_field(body, "cwd")
        if sid is None or cwd is None:  # escapes in the values: decode properly
            import json

            payload = json.loads(body)
            sid, cwd = str(payload.get("session_id") or ""), str(payload.get("cwd") or "")
        path = f"/v1/context?format=hook&session_id={quote(sid)}&cwd={quote(cwd)}"
        status, answer = http("GET", url, path, None, {}, CONTEXT_TIMEOUT_S)
        if status == 200 and answer.startswith(b"{") and len(answer) < 8 * MAX_CONTEXT_CHARS:
            return answer.decode("utf-8")
    except Exception:
        pass
    return "{}"


# -- the hook ------------------------------------------------------------------------


def handle(agent: str, data_dir: str, body: bytes, url: str | None = None) -> str:
    """Capture one payload as described in the module docstring; returns the hook's
    stdout (a JSON object).

    Raises:
        OSError: the payload could not be journalled (:func:`main` still exits 0).
    """
    if agent not in AGENTS:
        say(
            f"unknown agent {agent!r} (known: {', '.join(AGENTS)}): the payload is kept, "
            "as rejected input, not as events"
        )
    key = uuid7()
    at = now_iso()
    target = (url or os.environ.get("HOOKLEDGER_URL") or DEFAULT_URL).rstrip("/")
    spool = data_dir + "/spool"
    removed: list[dict] = []
    if may_hold_private(body):
        body, removed = strip_private_body(body)
    if may_hold_secret(body):
        body, secrets = redact_secrets_body(body)
        if secrets:  # a key named in the paths of the spans removed may hold a secret too
            removed = [{**r, "path": _redact_path(r["path"])} for r in removed]
        removed += secrets
    redactions = encode_redactions(removed)
    try:
        journal_append(spool, record_bytes(agent, body, key, at, redactions))
    except OSError as e:  # e.g. disk full: a remote server may still take it directly
        if is_loopback(target) or not post_hook(target, agent, body, key, at, redactions):
            raise
        say(f"not spooled ({e}), sent directly")
    else:
        if not is_loopback(target):
            deliver(target, spool)
    if hook_event_name(body) == "SessionStart":
        return session_start_output(target, body)
    return "{}"


def main(argv: list[str]) -> int:
    """``run.py <agent> <data dir> [<server url>]`` (the url ``install-hooks --url``
    wrote; else ``HOOKLEDGER_URL``, else :data:`DEFAULT_URL`); always prints hook
    output, returns 0."""
    out = "{}"
    try:
        agent = argv[1] if len(argv) > 1 else "claude-code"
        data_dir = argv[2] if len(argv) > 2 else os.environ.get("HOOKLEDGER_DATA_DIR", "")
        url = argv[3] if len(argv) > 3 and argv[3] else None
        if not data_dir:
            raise OSError("no data directory (argument or HOOKLEDGER_DATA_DIR)")
        out = handle(agent, data_dir, sys.stdin.buffer.read(), url)
    except BaseException as e:  # a hook never fails its agent
        try:  # noqa: SIM105 (contextlib costs an import on the hot path)
            sys.stderr.write(f"hookledger hook: {e}\n")
        except BaseException:
            pass
    try:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    except BaseException:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
