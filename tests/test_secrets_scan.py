"""The one-pass literal scan that decides, per record, which secret rules (and whether
tags or secret-named fields) the privacy walk tries: the Aho–Corasick automaton and
the standard-library fallback find the same literals, and a walk narrowed by the scan
redacts exactly what the full walk redacts — on every fixture record and every shape,
plain and hidden behind ``\\u`` escapes.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator

import pytest
from test_secrets import RECORDS, SHAPES

from ledger import literals, secrets
from ledger.literals import LiteralScanner
from ledger.privacy import may_hold_private, strip_private


@pytest.fixture(params=[True, False], ids=["automaton", "fallback"])
def automaton(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    monkeypatch.setattr(literals, "USE_AUTOMATON", request.param)
    secrets.reset_scans()
    assert secrets._scanner().uses_automaton is request.param
    yield request.param
    secrets.reset_scans()


def _all_escaped(text: str, hex_format: str = "04x") -> str:
    """``text`` as a JSON string literal with every character a ``\\u`` escape: no
    literal of any rule is left in the bytes."""
    return '"' + "".join(f"\\u{ord(c):{hex_format}}" for c in text) + '"'


def test_scanner_finds_the_same_literals_with_and_without_the_automaton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact = [b"KEY", b"sk-", b"AKIA", b"@", b"ghp_", b"Q~"]
    folded = [b"bearer", b'key"', b"private", b"sk-"]
    with_ac = LiteralScanner(exact, folded)
    monkeypatch.setattr(literals, "USE_AUTOMATON", False)
    without = LiteralScanner(exact, folded)
    assert with_ac.uses_automaton and not without.uses_automaton
    rng = random.Random(7)
    alphabet = 'KEYkeysSK-AIaip@ghp_Q~bearBEARER"rvt '
    texts = [b"", b"KEY", b"key", b"Bearer sk-1 @x", b'{"API_KEY": "v"}', b"<PRIVATE>"]
    texts += [line for _, line, _ in RECORDS[:400]]
    texts += [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(60))).encode()
        for _ in range(2000)
    ]
    for raw in texts:
        expected = (
            frozenset(s for s in exact if s in raw),
            frozenset(s for s in folded if s in raw.lower()),
        )
        assert with_ac.present(raw) == expected, raw
        assert without.present(raw) == expected, raw


def test_one_call_over_many_texts_finds_what_one_call_per_text_finds(automaton: bool) -> None:
    """``present_many`` joins the texts for one automaton call: no literal may be
    found across two texts, none missed at a text's edges."""
    scanner = LiteralScanner([b"sk-", b"KEY", b"@"], [b"bearer", b"token", b"sk-"])
    edges = [b"a sk", b"-b", b"tok", b"en", b"", b"KEY", b"@", b"bearer", b"BEARER x token",
             b"K", b"EY"]
    lines = [line for _, line, _ in RECORDS[:300]]
    rng = random.Random(11)
    for texts in (edges, lines, rng.sample(lines + edges, 200), [b"sk-"], []):
        assert scanner.present_many(texts) == [scanner.present(t) for t in texts]
    assert scanner.present_many([b"sk", b"-"]) == [(frozenset(), frozenset())] * 2


def test_rules_after_a_prescan_are_the_rules_of_a_scan_of_each_record(automaton: bool) -> None:
    lines = [line for _, line, _ in RECORDS[:400]] + [
        json.dumps({"note": text}).encode() for _, text, _ in SHAPES
    ]
    expected = []
    for line in lines:
        secrets.reset_scans()
        expected.append(secrets.rules_for(line))
    secrets.reset_scans()
    secrets.prescan(lines)
    assert len(secrets._prescanned) == len(set(lines))  # the answers come from the prescan
    assert [secrets.rules_for(line) for line in lines] == expected


def test_scanner_refuses_upper_case_folded_or_empty_literals() -> None:
    with pytest.raises(ValueError, match="lower-case"):
        LiteralScanner([b"KEY"], [b"Bearer"])
    with pytest.raises(ValueError, match="empty"):
        LiteralScanner([b""], [])


def test_a_walk_narrowed_by_the_scan_redacts_what_the_full_walk_redacts(
    automaton: bool,
) -> None:
    skipped = 0
    for name, line, rec in RECORDS:
        full = strip_private(rec)
        narrowed = strip_private(rec, raw=line)
        assert narrowed == full, name
        if not may_hold_private(line):
            skipped += 1
            assert full[1] == [], name
    assert skipped > len(RECORDS) // 2  # the pre-check does spare most lines


@pytest.mark.parametrize(
    ("kind", "text", "parts"), SHAPES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(SHAPES)]
)
def test_each_shape_is_redacted_from_a_record_plain_and_behind_u_escapes(
    automaton: bool, kind: str, text: str, parts: list[str]
) -> None:
    for field in (
        json.dumps(text),
        json.dumps("é " + text, ensure_ascii=True),
        _all_escaped(text),
        _all_escaped(text, "04X"),
        json.dumps("\x1b[0m\u2014 " + text),
    ):
        line = ('{"type":"user","message":{"content":' + field + "}}").encode()
        rec = json.loads(line)
        assert may_hold_private(line)
        cleaned, redactions = strip_private(rec, raw=line)
        stored = json.dumps(cleaned, ensure_ascii=False)
        assert not any(s in stored for s in parts), field
        assert kind in {r["kind"] for r in redactions}, (field, redactions)


def test_a_private_tag_hidden_behind_u_escapes_is_stripped(automaton: bool) -> None:
    for field in (
        '"a \\u003cprivate>hidden words</private> b"',
        '"a <\\u0050RIVATE>hidden words</private> b"',
        '"a <Private >hidden words<\\/private> b"',
        '"a <private>hidden words"',
    ):
        line = ('{"prompt":' + field + "}").encode()
        cleaned, redactions = strip_private(json.loads(line), raw=line)
        assert "hidden words" not in cleaned["prompt"]
        assert [r["kind"] for r in redactions] == ["private_tag"]


def test_a_record_with_u_escapes_and_nothing_to_redact_is_not_walked(automaton: bool) -> None:
    line = b'{"text":"caf\\u00e9 \\u2014 nothing here","n":[1,2,{"k":"v"}]}'
    rec = json.loads(line)
    cleaned, redactions = strip_private(rec, raw=line)
    assert cleaned is rec and redactions == []


def test_a_lone_surrogate_record_is_scanned_through_the_standard_library_dump(
    automaton: bool,
) -> None:
    secret = "ghp_" + "a1B2c3D4" * 5
    rec = {"bad": "\ud800", "text": f"token {secret}"}
    line = json.dumps(rec).encode()  # ASCII: the surrogate and nothing else escaped
    assert b"\\ud800" in line
    cleaned, redactions = strip_private(json.loads(line), raw=line)
    assert secret not in cleaned["text"] and cleaned["bad"] == "\ud800"
    assert {r["kind"] for r in redactions} == {"github_pat"}


def _nested(rng: random.Random, text: str) -> object:
    """``text`` placed in a record as a string value, as an object key's value inside
    JSON text in a string, or one level deeper still (JSON text in JSON text)."""
    depth = rng.randrange(3)
    value: object = text
    for _ in range(depth):
        value = json.dumps({"content": value, "api_key": "k" + text[-12:]})
    return {"type": "user", "message": {"content": [{"text": value}]}, "n": depth}


def test_the_narrowed_walk_equals_the_full_walk_on_nested_records(automaton: bool) -> None:
    rng = random.Random(11)
    records: list[object] = [
        {"type": "service_account", "private_key_id": "ab" * 20},
        {"out": json.dumps({"x": json.dumps({"api_key": "abcdef123456"})})},
    ]
    records += [_nested(rng, text) for _kind, text, _parts in SHAPES for _ in range(3)]
    for rec in records:
        for line in (json.dumps(rec).encode(), json.dumps(rec, ensure_ascii=False).encode()):
            full = strip_private(rec)
            assert full[1], rec  # every record holds something to redact
            assert strip_private(json.loads(line), raw=line) == full, line


def test_one_escaped_character_anywhere_hides_no_secret(automaton: bool) -> None:
    # each printable character of each shape escaped alone (\u00XX): the scan must
    # notice an escape that could split a literal, whichever character it is
    for kind, text, parts in SHAPES:
        for i, c in enumerate(text):
            if not " " <= c <= "~":
                continue
            dumped = json.dumps(text[:i] + "\x00" + text[i + 1 :])
            line = ('{"prompt":' + dumped.replace("\\u0000", f"\\u{ord(c):04x}") + "}").encode()
            rec = json.loads(line)
            assert rec["prompt"] == text
            cleaned, _ = strip_private(rec, raw=line)
            assert not any(s in cleaned["prompt"] for s in parts), (kind, i)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _redacts_alike(rules: list[secrets.Rule], texts: list[str], **changed: None) -> int:
    """Assert that each rule alone redacts every text as it does with the fields
    ``changed`` set (to None); return how many (rule, text) redacted something."""
    hits = 0
    for rule in rules:
        alone = secrets.ruleset((rule,))
        other = dataclasses.replace(alone, rules=(dataclasses.replace(rule, **changed),))
        for text in texts:
            expected = secrets.redact_secrets(text, other)
            assert secrets.redact_secrets(text, alone) == expected, (rule.kind, text)
            hits += bool(expected[1])
    return hits


def test_rule_gates_never_skip_a_text_the_rule_redacts_something_in() -> None:
    gated = [r for r in secrets.catalogue() if r.gate is not None]
    assert {r.kind for r in gated} >= {
        "env_secret_assignment",
        "secret_field",
        "code_secret_assignment",
    }
    rng = random.Random(5)
    names = [
        "API_KEY",
        "MY_TOKEN",
        "DB_PASSWORD",
        "X_PWD",
        "AWS_CREDENTIALS",
        "PASS",
        "PUBLIC_KEY",
        "apiKey",
        "client_secret",
        "access_token",
        "Password",
        "KEY_ID",
    ]
    joins = ["=", " = ", ":", ": ", '":"', '\\": \\"', "'='", "  =  ", "\t=", '"  :']
    joins += [": str = ", ":str=", " : Final[str] = ", ": Optional[str]  =  ", ": string | null = "]
    values = ["hunter2hunter2", '"quoted value 12"', "$OTHER_VAR", "abc", "os.environ[x]"]
    values += ["'live_9f8e7d6c5b4a'", '"Zx9Qw8Er7Ty6Ui5Op4"', "None"]
    texts = [text for _, text, _ in SHAPES]
    texts += [s for _, _, rec in RECORDS for s in _strings(rec)]
    texts += [
        rng.choice(["", "export ", "x", '{"', "\\n"])
        + rng.choice(names)
        + rng.choice(joins)
        + rng.choice(values)
        + rng.choice(["", '"', " tail"])
        for _ in range(3000)
    ]
    hits = _redacts_alike(gated, texts, gate=None)
    assert hits > 500  # the generated texts do exercise both rules


def _assignments(rng: random.Random, n: int) -> Iterator[str]:
    """Texts of several code-like assignments in a row, with what makes the code rule's
    scan tricky: names too long or after a ``\\n`` escape or a backslash, names that are
    not secrets (whose rejected match hides what it spans), values holding ``=`` and
    ``:``, annotations, escaped quotes, case."""
    names = ["api_key", "apiKey", "CLIENT_SECRET", "token", "x", "cache_key", "public_key"]
    names += ["my_secret_token", "a" * 64 + "_key", "b" * 61 + "key", "_", "9token", "Key"]
    names += ["password", "DB_PASSWORD", "passwd", "PassWord", "mypassword", "passw"]
    before = ["", " ", "\\n", "\\t", "\\r", "\\", "\\\\", ".", "-", "/", "(", "\n", '"', "'"]
    before += ['\\"', "x", "é", "n"]
    signs = ["=", " = ", ":", ": ", " :", "= ", ": str = ", ": Optional[str] = ", ":str="]
    signs += [": typing.Token = ", "==", ":=", " == ", ": MyType = ", ": &str = ", "  = "]
    quotes = ["'", '"', '\\"', "", "\\'"]
    values = ["live_9f8e7d6c5b4a3928", "abc", "user_profile_v2", "R3disPw9xQ2kL"]
    values += ["x=y:z1234567890", "aaaaaaa.api_key=", "$abc12345678", "[redacted:x]"]
    values += ["a1" * 300, "tok:en=" * 3, "k" * 7, "Zx9Qw8Er7Ty6Ui5Op4"]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            name = rng.choice(names)
            name = name.upper() if rng.random() < 0.2 else name
            q = rng.choice(quotes)
            parts += [rng.choice(before), name, rng.choice(signs), q, rng.choice(values)]
            parts.append(q if rng.random() < 0.8 else rng.choice(quotes))
        yield "".join(parts)


def test_a_rule_tried_only_at_its_starts_redacts_what_its_pattern_redacts() -> None:
    """``Rule.starts`` is a speed-up only: the rule tried at those positions alone
    gives what ``pattern.sub`` gives (the same matches, the same rejected ones hiding
    what they span), on the fixtures' strings, every shape and generated assignments."""
    started = [r for r in secrets.catalogue() if r.starts is not None]
    assert {r.kind for r in started} >= {"code_secret_assignment", "password_assignment"}
    texts = [text for _, text, _ in SHAPES]
    texts += [s for _, _, rec in RECORDS for s in _strings(rec)]
    texts += list(_assignments(random.Random(7), 6000))
    redacted = _redacts_alike(started, texts, starts=None)
    assert redacted > 2000  # the generated texts do reach the rules' accepted matches
