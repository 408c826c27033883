"""Secret redaction at capture: a catalogue of known secret shapes.

Each :class:`Rule` names a ``kind`` (the placeholder says it: ``[redacted:<kind>]``),
the literals a match must contain (``any_of``: at least one; ``all_of``: every one), and
a regex. Where the regex has a group named ``v`` only that group is replaced (the
``Bearer`` or ``NAME=`` in front stays readable); otherwise the whole match is.

Work is linear in the input: every quantifier is bounded, no quantifier is nested
inside another, and a rule's regex only runs on a string that holds one of its
literals. :func:`rules_for` is the byte-level pre-check on raw JSON text: it finds no
rule only when no string in the text can decode to a match. Literals are printable
ASCII, and those holding ``"`` or ``\\`` are listed in their escaped forms too; a
``\\/`` escape or a ``\\u`` escape of printable ASCII, which could hide one, sends the
record down the exact path. It reads the text once, with a
:class:`~ledger.literals.LiteralScanner` over every literal of the catalogue (an
Aho–Corasick automaton when ``ahocorasick-rs`` is installed).

Standard library only at import time: the hook's hot path
(``api/hot_path/hook_fast.py``) imports it, through :mod:`ledger.privacy`, when a
payload may hold a secret. Shapes follow the providers' published token formats and the
public gitleaks / GitHub secret-scanning catalogues; see ``docs/privacy.md`` for the table.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.literals import LiteralScanner

PLACEHOLDER = "[redacted:{}]"
_PLACEHOLDER_PREFIX = "[redacted:"

# A token must not continue a longer word on either side (in raw JSON text a ``\n``,
# ``\r`` or ``\t`` escape in front counts as a separator).
_L = r"(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))"
_LW = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_R = r"(?![A-Za-z0-9_\-])"
# The value of an assignment: a quoted string, or a bare word (JSON escape pairs kept
# whole, so redacting inside raw JSON text leaves it valid JSON). A leading ``$`` is a
# variable reference and brackets and parentheses end a bare word: ``KEY=$OTHER`` or
# ``KEY = os.environ[...]`` is code; a ``$`` further in is part of the value
# (``DB_PASSWORD=pa$$w0rd``).
_VALUE = (
    r"(?:\\?[\"'])?(?!\[redacted:)"
    r"(?P<v>(?<=[\"'])[^\"'\\\r\n]{6,512}(?=\\?[\"'])"
    r"|(?:[^\s\"'\\$`,;()\[\]{}<>]|\\[^u\"'\snrt])"
    r"(?:[^\s\"'\\`,;()\[\]{}<>]|\\[^u\"'\snrt]){5,511})"
)
_ANNOTATION_STARTS = ("str", "bytes", "&str", "final", "optional", "classvar", "secretstr", "typing.")
"""How every annotation :data:`_ANNOTATION` takes begins, lower-cased: the code rule's
literals after a ``:`` (:func:`_code_literals`)."""
_ANNOTATION = (
    # case-sensitive inside the rules that ignore case
    r"(?-i:(?:&?str|string|bytes|String|(?:typing\.)?(?:Final|Optional|ClassVar)|SecretStr"
    r"|typing\.[A-Z][A-Za-z0-9_]{0,64})"
    r"(?:\[[A-Za-z0-9_., |\[\]]{1,64}\])?\??(?: ?\| ?(?:None|null|undefined))?)"
)
"""The type annotation of a typed assignment (``api_key: str = "…"``, ``TOKEN: Final =
"…"``, ``apiKey: string = '…'``, ``let apiKey: String = "…"``): ``str``, ``string``,
``bytes``, ``&str``, ``String``, ``Final``, ``Optional``, ``ClassVar``, ``SecretStr`` or a
``typing.`` name, then at most one bracketed part (``Optional[str]``), a ``?`` and a ``|
None``. A closed list: the code rule's literals must name every annotation it takes, and
a literal such as ``key:`` alone sends most code and YAML down the slow path (10 % more
parse CPU for an import, docs/privacy.md). Any other word is not taken for one: ``if
token: x = "…"`` is a statement, ``api_key: MyType = "…"`` is not caught."""
_STARTS = r"(?:str|bytes|&str|final|optional|classvar|secretstr|typing\.)"
""":data:`_ANNOTATION_STARTS` as a pattern (the gate and probe of the code rule)."""
_ANNOTATED = r"[ \t]{0,4}" + _ANNOTATION + r"[ \t]{0,4}="
_ASSIGN = (
    r"(?:\\?[\"'])?\s{0,4}"
    r"(?::" + _ANNOTATED + r"(?=[ \t]{0,4}\\?[\"'])|=|:(?!" + _ANNOTATED + r"))\s{0,4}"
)
"""``=`` or ``:``, or ``: <annotation> =`` on one line before a quoted value; the
annotation of ``SECRET_KEY: Optional[str] = None`` or ``PASSWORD: str = get()`` is not
the value."""
_CODE_ASSIGN = r"(?: ?: ?" + _ANNOTATION + r" ?=| ?[=:]) ?\\?[\"']"
"""``name = 'value'`` in code: at most a space on either side of the ``=``/``:`` (and of a
type annotation's ``:`` and ``=``), then the quote, so every name the rule accepts is
followed by one of :func:`_code_literals`."""


def _code_literals() -> tuple[str, ...]:
    """``key='``, ``token= \\"``, ``secret: str`` …: the literals the code rule needs (after
    the ``=`` or ``:`` comes a quote, or after the ``:`` a type annotation:
    :data:`_ANNOTATION_STARTS`)."""
    return tuple(
        f"{word}{before}{op}{after}{then}"
        for word in _CODE_NAME_WORDS
        for before in ("", " ")
        for op in "=:"
        for after in ("", " ")
        # a ``"`` is ``\"`` in JSON text
        for then in ("'", '"', '\\"', *(_ANNOTATION_STARTS if op == ":" else ()))
    )


_SECRET_NAME_SUFFIXES = (
    "_KEY", "_SECRET", "_TOKEN", "PASSWORD", "PASSWD", "_PWD", "_PASS", "_CREDENTIALS",
    "_CREDENTIAL",
)
_SECRET_NAMES = frozenset({"SECRET", "TOKEN", "PASSWORD", "PASSWD", "APIKEY", "API_KEY"})
_NOT_SECRET_NAMES = frozenset(
    {"PUBLIC_KEY", "PRIMARY_KEY", "FOREIGN_KEY", "SORT_KEY", "PARTITION_KEY"}
)


_SECRET_KEY_WORDS = frozenset(
    {
        "API", "APIKEY", "SECRET", "ACCESS", "PRIVATE", "AUTH", "SIGNING", "SIGN",
        "ENCRYPTION", "ENCRYPT", "CRYPT", "CRYPTO", "CIPHER", "MASTER", "CLIENT", "LICENSE",
        "WEBHOOK", "SESSION", "JWT", "HMAC", "SSH", "DEPLOY", "ADMIN", "SERVICE", "APP",
        "ACCOUNT", "SERVER", "STORAGE", "SECURITY",
    }
)
"""Words that make an UPPER ``…_KEY`` name a secret's whatever its value looks like
(``ATTIO_API_KEY``, ``APP_KEY``, ``JWT_SIGNING_KEY``). Any other ``…_KEY`` (``CACHE_KEY``,
``S3_KEY``, ``ROUTING_KEY``) is a secret only when its value is :func:`token_like`."""


def _env_name_is_secret(m: re.Match[str]) -> bool:
    name = m.group("name")
    if name in _NOT_SECRET_NAMES or name.endswith(("_PUBLIC_KEY", "_ID_KEY", "_MAX_TOKENS")):
        return False
    if name in _SECRET_NAMES:
        return True
    if name.endswith("_KEY"):
        words = name.split("_")[:-1]
        return not _SECRET_KEY_WORDS.isdisjoint(words) or token_like(m.group("v"))
    return name.endswith(_SECRET_NAME_SUFFIXES)


_WORDY_PIECE = re.compile(
    r"[A-Z]?[a-z]{1,32}|[A-Z]{1,16}|[a-z]{0,12}[0-9]{1,4}[a-z]{0,2}|[0-9]{1,8}", re.ASCII
)
_WORDY_SPLIT = re.compile(r"[_\-./:~@]+|(?<=[a-z0-9])(?=[A-Z])", re.ASCII)
_HAS_DIGIT = re.compile(r"[0-9]", re.ASCII)


def token_like(value: str) -> bool:
    """True when ``value`` looks like a generated secret, not like a name, a path or a
    key of some store: 8+ characters with a letter, a digit (or 20+ characters), and
    not made only of words and short numbers joined by ``_ - . / : ~ @`` or camel case
    (``user_profile_v2``, ``uploads/2024/report.csv``, ``orders.created.v1``,
    ``MyService.handler`` are not; ``live_9f8e7d6c5b4a3928``, ``R3disPw9xQ2kL`` are)."""
    if len(value) < 8 or not any(c.isalpha() for c in value):
        return False
    if _HAS_DIGIT.search(value) is None and len(value) < 20:
        return False
    pieces = [p for p in _WORDY_SPLIT.split(value) if p]
    return not all(_WORDY_PIECE.fullmatch(p) for p in pieces)


_CODE_NAME_WORDS = ("key", "secret", "token")
_CODE_NAME = re.compile(
    r"(?:.{0,64}[_.])?(?:api_?key|access_?key|secret_?key|private_?key|client_?secret|secret"
    r"|(?:access_?|auth_?|refresh_?|api_?|bearer_?|session_?|id_?)?token)",
    re.ASCII | re.DOTALL,
)


def _code_secret(m: re.Match[str]) -> bool:
    """A quoted literal assigned to a secret-named variable or key in code or config
    (``api_key = 'live_…'``, ``clientSecret: "…"``): the name must name a secret
    (``cache_key`` does not) and the value must be :func:`token_like`."""
    snake = _CAMEL.sub("_", m.group("name")).lower()
    return (
        _CODE_NAME.fullmatch(snake) is not None
        and not snake.endswith("public_key")
        and token_like(m.group("v"))
    )


_ASSIGN_SIGN = re.compile(
    r"[=:](?:(?<=[A-Za-z0-9_].)|(?<=[A-Za-z0-9_] .))(?= ?(?:\\?[\"']|[&A-Za-z]))", re.ASCII
)
"""The ``=`` or ``:`` of every :data:`_CODE_ASSIGN` (``[=:]`` first, where the regex
engine skips to it): right after a name, or one space after it, and followed (after a
space) by a quote or an annotation's first character."""
_NAME_RUN = re.compile(r"[A-Za-z0-9_]{0,66}", re.ASCII)


def _code_name_starts(text: str) -> Iterator[int]:
    """Every position where the code rule's pattern can begin a match (its
    :attr:`Rule.starts`). A match is a name (a run of word characters, ``[A-Za-z_]``
    first, at most 65) and then :data:`_CODE_ASSIGN`, which begins with an optional
    space and an ``=`` or ``:`` (:data:`_ASSIGN_SIGN`), so the name ends there. It
    begins where that run of word characters begins (not after a ``\\``), or one
    character later, after a ``\\n``, ``\\r`` or ``\\t`` escape: both are yielded and
    the pattern tells. The run is measured backwards, in the reversed text."""
    rev = ""
    for hit in _ASSIGN_SIGN.finditer(text):
        end = hit.start() - (text[hit.start() - 1] == " ")
        if not rev:
            rev = text[::-1]
        back = len(text) - end
        start = end - (_NAME_RUN.match(rev, back).end() - back)
        yield start
        yield start + 1


_PASSWORD_WORD = re.compile(r"passw", re.IGNORECASE | re.ASCII)


def _password_starts(text: str) -> Iterator[int]:
    """Where the password rule's pattern can begin a match (its :attr:`Rule.starts`):
    it begins with ``password`` or ``passwd``, in any case."""
    return (m.start() for m in _PASSWORD_WORD.finditer(text))


_IDENTIFIER = re.compile(r"[A-Za-z_.]{1,512}", re.ASCII)


def _looks_like_password(m: re.Match[str]) -> bool:
    """``password = password`` and ``password: string`` are code: a bare (unquoted) value
    made of letters, ``_`` and ``.`` only is taken for an identifier, not a password."""
    quoted = m.start("v") > 0 and m.string[m.start("v") - 1] in "\"'"
    return quoted or _IDENTIFIER.fullmatch(m.group("v")) is None


@dataclass(frozen=True)
class Rule:
    """One secret shape. ``ignore_case``: literals are checked on the lower-cased text
    (and are given lower-case)."""

    kind: str
    any_of: tuple[str, ...]
    pattern: re.Pattern[str]
    all_of: tuple[str, ...] = ()
    ignore_case: bool = False
    accept: Callable[[re.Match[str]], bool] | None = None
    left: str = ""
    """Characters that may not come right before a match (``\\n``, ``\\r``, ``\\t``
    escapes excepted). Set from a leading ``_L``/``_LW`` of the pattern, which is then
    checked after a match instead of before every position: a pattern that starts with a
    literal lets the regex engine skip to it."""
    gate: Callable[[str], bool] | None = None
    """A necessary condition of an accepted match, much cheaper than the regex (given
    the text, lower-cased when ``ignore_case``): the rule is not run on a text it
    rejects. For the rules whose regex starts with a character class (tried at every
    letter) and whose ``accept`` wants the name to end with one of a few words."""

    probe: re.Pattern[str] | None = None
    """A regex that finds one of ``any_of`` (and nothing that is not one) in a string,
    for a rule with many literals: one search instead of one per literal."""
    stems: tuple[str, ...] = ()
    """With a ``probe``: literals every one of ``any_of`` contains, for the
    :class:`RuleSet` quick check."""
    starts: Callable[[str], Iterator[int]] | None = None
    """Where in a text the pattern can begin a match: every such position (and maybe
    others), ascending. :meth:`sub` then tries the pattern only there, for a pattern
    that starts with a character class the regex engine would try at every position."""

    def __post_init__(self) -> None:
        for prefix, chars in ((_L, _WORD + "-"), (_LW, _WORD)):
            if self.pattern.pattern.startswith(prefix):
                stripped = re.compile(self.pattern.pattern[len(prefix) :], self.pattern.flags)
                object.__setattr__(self, "pattern", stripped)
                object.__setattr__(self, "left", chars)
                break

    def left_ok(self, m: re.Match[str]) -> bool:
        start = m.start()
        if not self.left or start == 0 or m.string[start - 1] not in self.left:
            return True
        return start >= 2 and m.string[start - 2] == "\\" and m.string[start - 1] in "nrt"

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        """``self.pattern.sub(repl, text)``: the same matches, tried only at
        :attr:`starts` when the rule has them (a match ends where the scan goes on, as
        in ``re.sub``; the pattern never matches the empty string)."""
        if self.starts is None:
            return self.pattern.sub(repl, text)
        pieces: list[str] = []
        done = 0
        for s in self.starts(text):
            if s >= done and (m := self.pattern.match(text, s)) is not None:
                pieces += (text[done:s], repl(m))
                done = m.end()
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)

    def may_match(self, text: str, lowered: str) -> bool:
        hay = lowered if self.ignore_case else text
        if self.probe is not None:
            return self.probe.search(hay) is not None and all(s in hay for s in self.all_of)
        return any(s in hay for s in self.any_of) and all(s in hay for s in self.all_of)


_ENCODED: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {}


def _encoded(rule: Rule) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    found = _ENCODED.get(rule.kind)
    if found is None:
        found = tuple(s.encode() for s in rule.any_of), tuple(s.encode() for s in rule.all_of)
        _ENCODED[rule.kind] = found
    return found


def _ends_then(endings: tuple[str, ...], then: str) -> Callable[[str], bool]:
    """A :attr:`Rule.gate`: True when one of ``endings`` occurs right before a match of
    the regex ``then`` (ASCII)."""
    after = re.compile(then, re.ASCII)

    def gate(hay: str) -> bool:
        for end in endings:
            i = hay.find(end)
            while i >= 0:
                if after.match(hay, i + len(end)):
                    return True
                i = hay.find(end, i + 1)
        return False

    return gate


def _r(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags | re.ASCII)


_I = re.IGNORECASE

_FIELD_ENDS = {
    end + quote
    for end in (b"password", b"passwd", b"secret", b"key", b"token")
    for quote in (b'"', b'\\"', b"\\\\")
}
"""How every object key :func:`secret_field` accepts ends in JSON text (lower-cased), as a
key of the record itself (``key"``), or of JSON text inside one of its strings
(``key\\"``), or JSON text nested deeper (then the raw text has ``key\\\\``)."""

_FIELD_NAMES = frozenset(_FIELD_ENDS | {b'private_key_id"'})
"""Literals of which one occurs in JSON text (lower-cased) whose objects have a key
that :func:`redact_field_value` may redact the value of."""


@functools.cache
def catalogue() -> tuple[Rule, ...]:
    """The catalogue, applied in this order (a redacted span is not matched again).
    Built on first use (compiling ~35 patterns is not done at import time)."""
    return (
        # -- private keys first: a key block may contain shapes of other rules -----------
        Rule("private_key", ("PRIVATE KEY",), _r(
            r"-----BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----[^\"-]{0,32768}"
            r"(?:-----END[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----)?")),
        # -- cloud providers ---------------------------------------------------------------
        Rule("aws_access_key_id", ("AKIA", "ASIA", "ABIA", "ACCA"),
             _r(_L + r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _R)),
        Rule("aws_secret_access_key", ("secret",), _r(
            r"aws_?secret_?(?:access_?)?key" + _ASSIGN
            + r"(?:\\?[\"'])?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
            _I), ignore_case=True),
        Rule("gcp_api_key", ("AIza",), _r(_L + r"AIza[0-9A-Za-z_\-]{35}" + _R)),
        Rule("gcp_service_account_key_id", ("private_key_id",), _r(
            r"private_key_id" + _ASSIGN + r"(?:\\?\")?(?P<v>[0-9a-f]{40})(?![0-9a-f])")),
        Rule("gcp_oauth_client_secret", ("GOCSPX-",), _r(_L + r"GOCSPX-[A-Za-z0-9_\-]{28}" + _R)),
        Rule("gcp_oauth_access_token", ("ya29.",), _r(_L + r"ya29\.[A-Za-z0-9_\-]{20,2048}" + _R)),
        Rule("azure_storage_account_key", ("accountkey",), _r(
            r"AccountKey\s{0,4}=\s{0,4}(?P<v>[A-Za-z0-9+/]{86}==)", _I), ignore_case=True),
        Rule("azure_sas_signature", ("sig=",), _r(
            r"[?&;]sig=(?P<v>[A-Za-z0-9%+/]{40,256}={0,2})")),
        Rule("azure_client_secret", ("Q~",), _r(
            _L + r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}" + _R)),
        # -- source hosts ------------------------------------------------------------------
        Rule("github_pat", ("ghp_",), _r(_L + r"ghp_[A-Za-z0-9]{36,251}" + _R)),
        Rule("github_fine_grained_pat", ("github_pat_",), _r(
            _L + r"github_pat_[A-Za-z0-9_]{50,244}" + _R)),
        Rule("github_oauth_token", ("gho_",), _r(_L + r"gho_[A-Za-z0-9]{36,251}" + _R)),
        Rule("github_user_token", ("ghu_",), _r(_L + r"ghu_[A-Za-z0-9]{36,251}" + _R)),
        Rule("github_app_token", ("ghs_",), _r(_L + r"ghs_[A-Za-z0-9]{36,251}" + _R)),
        Rule("github_refresh_token", ("ghr_",), _r(_L + r"ghr_[A-Za-z0-9]{36,251}" + _R)),
        Rule("gitlab_token", ("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-"), _r(
            _L + r"gl(?:pat|dt|rt|ptt|ft|soat)-[A-Za-z0-9_\-]{20,64}" + _R)),
        # -- AI providers (Anthropic before OpenAI: both start with sk-) ---------------------
        Rule("anthropic_api_key", ("sk-ant-",), _r(_L + r"sk-ant-[A-Za-z0-9_\-]{20,200}" + _R)),
        Rule("openai_api_key", ("sk-",), _r(
            _L + r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,200}" + _R)),
        Rule("huggingface_token", ("hf_",), _r(_L + r"hf_[A-Za-z]{34}" + _R)),
        # -- chat, payments, mail, registries ------------------------------------------------
        Rule("slack_token", ("xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-", "xoxe-", "xapp-"), _r(
            _L + r"(?:xox[abeprs](?:\.[a-z]{1,8})?|xapp)-[A-Za-z0-9\-]{10,250}" + _R)),
        Rule("slack_webhook_url", ("hooks.slack.com",), _r(
            r"hooks\.slack\.com\\?/(?:services|workflows|triggers)\\?/(?P<v>[A-Za-z0-9_\-]{4,20}"
            r"(?:\\?/[A-Za-z0-9_\-]{4,64}){1,3})")),
        Rule("stripe_secret_key", ("sk_live_", "sk_test_", "rk_live_", "rk_test_"), _r(
            _L + r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,247}" + _R)),
        Rule("stripe_webhook_secret", ("whsec_",), _r(_L + r"whsec_[A-Za-z0-9+/]{24,64}" + _R)),
        Rule("sendgrid_api_key", ("SG.",), _r(
            _L + r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _R)),
        Rule("npm_token", ("npm_",), _r(_L + r"npm_[A-Za-z0-9]{36}" + _R)),
        Rule("npm_auth_token", ("_authToken",), _r(
            r"_authToken\s{0,4}=\s{0,4}(?P<v>[^\s\"'\\$]{8,512})")),
        Rule("pypi_token", ("pypi-AgEIcHlwaS5vcmc",), _r(
            r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,300}")),
        # -- generic shapes ----------------------------------------------------------------
        Rule("jwt", ("eyJ",), _r(
            _L + r"eyJ[A-Za-z0-9_\-]{8,4096}\.eyJ[A-Za-z0-9_\-]{8,8192}"
            r"\.[A-Za-z0-9_\-]{8,4096}" + _R)),
        Rule("bearer_token", ("bearer",), _r(
            _LW + r"bearer\s{1,4}(?!\[redacted:)(?P<v>[A-Za-z0-9\-._~+/]{16,4096}=*)", _I),
            ignore_case=True),
        Rule("basic_auth", ("basic",), _r(
            r"authorization(?:\\?[\"'])?\s{0,4}:\s{0,4}(?:\\?[\"'])?basic\s{1,4}(?P<v>[A-Za-z0-9+/]{8,1024}=*)",
            _I), all_of=("authorization",), ignore_case=True),
        Rule("url_password", ("://",), _r(
            r":(?<=[A-Za-z0-9+.\-]:)(?:\\?/){2}[^\s:/?#@\"'\\]{0,256}:"
            r"(?!\[redacted:)(?P<v>[^\s/?#@\"'\\]{1,256})@"), all_of=("@",)),
        Rule("env_secret_assignment", ("KEY", "SECRET", "TOKEN", "PASS", "PWD", "CREDENTIAL"), _r(
            _LW + r"(?P<name>[A-Z][A-Z0-9_]{1,80})(?![A-Za-z0-9_])" + _ASSIGN + _VALUE),
            accept=_env_name_is_secret,
            # every name _env_name_is_secret accepts ends with one of these
            gate=_ends_then(
                tuple(sorted({*_SECRET_NAMES, *(x.lstrip("_") for x in _SECRET_NAME_SUFFIXES)})),
                _ASSIGN,
            )),
        Rule("secret_field", tuple(e.decode() for e in sorted(_FIELD_ENDS)), _r(
            _L + r"(?P<name>[A-Za-z_][A-Za-z0-9_\-]{0,64})\\?\"\s{0,4}:\s{0,4}\\?\""
            r"(?!\[redacted:)(?P<v>(?:[^\"\\\r\n]|\\[^\"]){6,512})(?=\\?\")"),
            ignore_case=True, accept=lambda m: secret_field(m.group("name")),
            # secret_field wants the lower-cased name to end with one of _FIELD_WORDS
            gate=_ends_then(_FIELD_WORDS, r"\\?\"\s{0,4}:")),
        Rule("password_assignment", ("password", "passwd"), _r(
            r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))(?:password|passwd)" + _ASSIGN + _VALUE, _I),
            ignore_case=True, accept=_looks_like_password, starts=_password_starts),
        # ``api_key = 'live_…'``: after the rules above, so an UPPER name or a password
        # keeps its own kind
        Rule("code_secret_assignment", _code_literals(), _r(
            # not after a word character, nor inside a ``\\n`` escape of raw JSON text
            r"(?:(?<![A-Za-z0-9_\\])|(?<=\\[nrt]))"
            r"(?P<name>[A-Za-z_][A-Za-z0-9_]{0,64})" + _CODE_ASSIGN + r"(?!\[redacted:)"
            r"(?P<v>[^\s\"'\\$`,;()\[\]{}<>][^\s\"'\\`,;()\[\]{}<>]{7,511})(?=\\?[\"'])", _I),
            ignore_case=True, accept=_code_secret,
            # on the lower-cased text: a quote, or after the ``:`` an annotation's start
            gate=_ends_then(_CODE_NAME_WORDS, r" ?(?::(?: ?" + _STARTS + r"| ?\\?[\"'])|= ?\\?[\"'])"),
            probe=_r(r"(?:key|secret|token) ?(?:= ?(?:'|\\?\")|: ?(?:'|\\?\"|" + _STARTS + r"))"),
            stems=_CODE_NAME_WORDS, starts=_code_name_starts),
    )


def rules_for(raw: bytes, value: Any = None) -> RuleSet:
    """The rules that may match some string of the JSON text ``raw`` (decoded: ``value``):
    the walk over the record then runs only these, redacts object fields by name only
    when some key can name a secret (``RuleSet.fields``) and strips ``<private>`` tags
    only when some string holds ``<private`` or ``</private`` (``RuleSet.private``).

    One pass of a :class:`~ledger.literals.LiteralScanner` over ``raw`` finds the
    literals; the last answer is kept, so a pre-check
    (:func:`ledger.privacy.may_hold_private`) and then the walk of the same bytes scan
    them once.

    A ``\\/`` escape, or a ``\\u`` escape of a printable ASCII character, in ``raw`` could
    hide a literal (:data:`_ESCAPES`): then the literals are looked for in ``value``
    dumped again without them (non-ASCII unescaped; only control characters, which no
    literal holds, stay escaped), or every rule runs when no ``value`` is given."""
    global _last_scan
    last = _last_scan
    batch = _prescanned
    if last is not None and (last[0] is raw or last[0] == raw):
        found, escaped = last[1]
    elif batch and (hit := batch.get(raw)) is not None:
        found, escaped = hit
    else:
        found, escaped = _scan(raw)
        _last_scan = (raw, (found, escaped))
    if not escaped:
        return found
    if value is None:
        return ruleset(catalogue(), fields=True)
    # the dump's only escapes are of control characters, which no literal holds
    return _scan(_dump_unescaped(value))[0]


_last_scan: tuple[bytes, tuple[RuleSet, bool]] | None = None
"""The last ``(raw, _scan(raw))`` (one tuple: replaced atomically)."""


def _dump_unescaped(value: Any) -> bytes:
    """``value`` as JSON text with no ``\\u`` or ``\\/`` escape but for control
    characters (orjson when importable, else the standard library)."""
    try:
        import orjson

        return orjson.dumps(value)
    except (ImportError, TypeError):  # no orjson; lone surrogates or a huge int
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def prescan(raws: Sequence[bytes]) -> None:
    """Scan these JSON texts together, ahead of the :func:`rules_for` calls the parsers
    will make for them, one by one (:meth:`LiteralScanner.present_many`: one automaton
    call instead of one per text). Remembered until the next ``prescan``, in any
    thread; a text not remembered is simply scanned when asked for."""
    global _prescanned
    found = _scanner().present_many(raws)
    _prescanned = {r: _rules_of(*f) for r, f in zip(raws, found, strict=True)}


_prescanned: dict[bytes, tuple[RuleSet, bool]] = {}
"""The last :func:`prescan`'s answers by text (one dict: replaced atomically)."""


def _scan(raw: bytes) -> tuple[RuleSet, bool]:
    """(the rules whose literals occur in ``raw``, whether ``raw`` holds an escape that
    could hide one: :data:`_ESCAPES`)."""
    return _rules_of(*_scanner().present(raw))


def _rules_of(exact: frozenset[bytes], folded: frozenset[bytes]) -> tuple[RuleSet, bool]:
    """:func:`_scan`'s answer for the literals found."""
    key = (exact, folded)
    found = _SCANNED.get(key)
    if found is None:
        chosen = tuple(
            r
            for r in catalogue()
            if not (hay := folded if r.ignore_case else exact).isdisjoint(_encoded(r)[0])
            and all(s in hay for s in _encoded(r)[1])
        )
        found = (
            ruleset(
                chosen,
                fields=not folded.isdisjoint(_FIELD_NAMES),
                private=not folded.isdisjoint(TAG_LITERALS),
            ),
            not folded.isdisjoint(_ESCAPES),
        )
        if len(_SCANNED) >= 4096:
            _SCANNED.clear()
        _SCANNED[key] = found
    return found


_SCANNED: dict[tuple[frozenset[bytes], frozenset[bytes]], tuple[RuleSet, bool]] = {}

_ESCAPES = frozenset({b"\\/", b"\\u002", b"\\u003", b"\\u004", b"\\u005", b"\\u006", b"\\u007"})
"""JSON escapes that could spell a literal: ``\\/`` and ``\\u0020``-``\\u007f`` (every literal
is printable ASCII; an escaped control or non-ASCII character is part of none). Found in
the lower-cased text, so a hex digit in either case counts; an escaped backslash before
``u00..`` counts too, which only sends a record down the slower, exact path."""

TAG_LITERALS = frozenset({b"<private", b"</private"})
"""Every ``<private>`` or ``</private>`` tag (any case) holds one of them, in JSON text
too (``<`` is never escaped but as ``\\u003c``, ``/`` as ``\\/``: see :data:`_ESCAPES`):
:mod:`ledger.privacy` strips tags only from records whose text holds one."""


@functools.cache
def _scanner() -> LiteralScanner:
    """One scanner over every literal of the catalogue (``any_of`` and ``all_of``), the
    field names (:data:`_FIELD_NAMES`), :data:`TAG_LITERALS` and :data:`_ESCAPES`."""
    rules = catalogue()
    exact = {s for r in rules if not r.ignore_case for s in (*_encoded(r)[0], *_encoded(r)[1])}
    folded = {s for r in rules if r.ignore_case for s in (*_encoded(r)[0], *_encoded(r)[1])}
    return LiteralScanner(exact, folded | _FIELD_NAMES | TAG_LITERALS | _ESCAPES)


def reset_scans() -> None:
    """Forget the scanner and the remembered scans: the next scan builds them again
    (reading :data:`ledger.literals.USE_AUTOMATON` afresh)."""
    global _last_scan, _prescanned
    _scanner.cache_clear()
    _SCANNED.clear()
    _last_scan = None
    _prescanned = {}


@dataclass(frozen=True)
class RuleSet:
    """Rules to try on the strings of one record, with two regexes finding any of their
    literals (case-sensitive ones in the text, lower-case ones in the lower-cased text):
    one C-level scan each tells whether a string needs any rule at all."""

    rules: tuple[Rule, ...]
    exact: re.Pattern[str] | None
    lower: re.Pattern[str] | None
    fields: bool = True
    private: bool = True
    """Whether some string may hold a ``<private>`` tag (:data:`TAG_LITERALS`)."""


_RULESETS: dict[tuple[Any, ...], RuleSet] = {}


def ruleset(rules: tuple[Rule, ...], fields: bool = True, private: bool = True) -> RuleSet:
    """The :class:`RuleSet` of ``rules`` (cached per set of kinds); ``fields``: whether
    object fields are redacted by name (:func:`redact_field_value`); ``private``: whether
    ``<private>`` tags are looked for."""
    key = (fields, private, *(r.kind for r in rules))
    found = _RULESETS.get(key)
    if found is None:

        def union(chosen: list[Rule]) -> re.Pattern[str] | None:
            # a rule with a probe is stood for by the words its literals start with
            # (fewer, plain literals keep the union a fast literal scan)
            literals = sorted(
                {s for r in chosen for s in (r.any_of if r.probe is None else r.stems)}, key=len
            )
            return re.compile("|".join(re.escape(s) for s in literals)) if literals else None

        found = RuleSet(
            rules,
            union([r for r in rules if not r.ignore_case]),
            union([r for r in rules if r.ignore_case]),
            fields,
            private,
        )
        _RULESETS[key] = found
    return found


_MIN_MATCH = 8
"""No rule matches fewer characters: shorter strings are skipped."""


def redact_secrets(text: str, rules: RuleSet | None = None) -> tuple[str, dict[str, int]]:
    """Replace every catalogued secret in ``text`` by ``[redacted:<kind>]``.

    ``rules``: the rules to try (default: the whole catalogue; see :func:`rules_for`).
    Returns the text (the same object when nothing matched) and ``{kind: count}``.
    """
    counts: dict[str, int] = {}
    if len(text) < _MIN_MATCH:
        return text, counts
    rs = ruleset(catalogue()) if rules is None else rules
    if not rs.rules:
        return text, counts
    lowered = text.lower() if rs.lower is not None else text
    if (rs.exact is None or rs.exact.search(text) is None) and (
        rs.lower is None or rs.lower.search(lowered) is None
    ):
        return text, counts
    for rule in rs.rules:
        if not rule.may_match(text, lowered):
            continue
        if rule.gate is not None and not rule.gate(lowered if rule.ignore_case else text):
            continue
        n = 0

        def replace(m: re.Match[str], rule: Rule = rule) -> str:
            nonlocal n
            if not rule.left_ok(m) or (rule.accept is not None and not rule.accept(m)):
                return m.group(0)
            n += 1
            placeholder = PLACEHOLDER.format(rule.kind)
            if "v" not in m.re.groupindex:
                return placeholder
            whole, start = m.group(0), m.start()
            return whole[: m.start("v") - start] + placeholder + whole[m.end("v") - start :]

        new = rule.sub(replace, text)
        if n:
            counts[rule.kind] = n
            text = new
            lowered = text.lower()
    return text, counts


_FIELD = re.compile(
    r"(?:.{0,64}[_\-.])?(?:password|passwd|secret|api_?key|access_?token|refresh_?token"
    r"|auth_?token|client_?secret|secret_?key|private_?key|token)",
    re.ASCII | re.DOTALL,
)
_FIELD_WORDS = ("password", "passwd", "secret", "key", "token")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])", re.ASCII)


def secret_field(name: str) -> bool:
    """True when a JSON object key names a secret (``password``, ``api_key``, ``apiKey``,
    ``client_secret``, ``GITHUB_TOKEN`` …; not ``jsonwebtoken`` or ``input_tokens``):
    its string value is redacted whole."""
    if len(name) > 80 or not name.lower().endswith(_FIELD_WORDS):
        return False
    snake = _CAMEL.sub("_", name).lower()
    return _FIELD.fullmatch(snake) is not None and not snake.endswith("public_key")


_HEX40 = re.compile(r"[0-9a-f]{40}", re.ASCII)


def redact_field_value(name: str, value: str) -> tuple[str, str | None]:
    """Redact ``value`` whole when the JSON object key ``name`` names a secret and the
    value is a non-trivial string not already redacted. Returns (value, kind or None):
    kind ``gcp_service_account_key_id`` for a service-account ``private_key_id``,
    ``secret_field`` for the names :func:`secret_field` accepts."""
    if len(value) < 6 or _PLACEHOLDER_PREFIX in value:
        return value, None
    if name == "private_key_id" and _HEX40.fullmatch(value):
        kind = "gcp_service_account_key_id"
    elif secret_field(name):
        kind = "secret_field"
    else:
        return value, None
    return PLACEHOLDER.format(kind), kind
