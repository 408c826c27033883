"""``install-hooks`` / ``uninstall-hooks`` / ``doctor`` through the real CLI, on real
Claude Code settings files (user scope via ``HOME``, project scope via the cwd)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_access import TOKEN, non_loopback_ip

from ledger.config import Settings

from conftest import Server, free_port

ROOT = Path(__file__).resolve().parent.parent
# FORMATS.md A1: the hook events of Claude Code, written here independently.
A1_EVENTS = {
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Notification",
    "Stop",
    "SubagentStop",
    "SubagentStart",
    "PreCompact",
    "SessionEnd",
    "PermissionRequest",
}
ORIGINAL = """{
    "model": "opus",
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo pre >> /tmp/x"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    },
    "permissions": {"allow": ["Bash(ls:*)"]}
}
"""


def hookledger(
    home: Path, data: Path, *args: str, cwd: Path | None = None, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    env["HOME"] = str(home)
    if token is not None:
        env["HOOKLEDGER_TOKEN"] = token
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "api.cli", "--data-dir", str(data), *args],
        env=env,
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ours(settings: dict, data: Path) -> dict[str, list[str]]:
    """Event -> commands that mention our hot-path module and data dir."""
    out: dict[str, list[str]] = {}
    for event, groups in settings.get("hooks", {}).items():
        for g in groups:
            for h in g["hooks"]:
                if "hot_path/run.py" in h["command"] and str(data) in h["command"]:
                    out.setdefault(event, []).append(h["command"])
    return out


def test_install_merges_is_idempotent_and_uninstall_restores(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    path = home / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(ORIGINAL)

    out = hookledger(home, data, "install-hooks", "claude-code")
    assert out.returncode == 0, out.stderr
    installed = json.loads(path.read_text())
    assert set(ours(installed, data)) == A1_EVENTS
    assert all(len(v) == 1 for v in ours(installed, data).values())
    # Other hooks and settings kept.
    before = json.loads(ORIGINAL)
    assert installed["model"] == "opus" and installed["permissions"] == before["permissions"]
    assert before["hooks"]["PreToolUse"][0] in installed["hooks"]["PreToolUse"]
    assert before["hooks"]["Stop"][0] in installed["hooks"]["Stop"]
    backups = list(path.parent.glob("settings.json.hookledger-*.bak"))
    assert [b.read_text() for b in backups] == [ORIGINAL]

    # The command written is the real interpreter with -S and the hot-path module.
    command = ours(installed, data)["PostToolUse"][0]
    assert command.split()[:2] == [os.path.realpath(sys.executable), "-S"]
    assert "shims" not in command
    ran = subprocess.run(
        command,
        shell=True,
        input=b'{"session_id":"s","hook_event_name":"PostToolUse"}',
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == b"{}"
    assert (data / "spool" / "hooks.journal").read_bytes().startswith(b"HLJ1 ")

    written = path.read_bytes()
    out = hookledger(home, data, "install-hooks", "claude-code")
    assert out.returncode == 0 and "nothing changed" in out.stdout
    assert path.read_bytes() == written
    assert len(list(path.parent.glob("settings.json.hookledger-*.bak"))) == 1

    out = hookledger(home, data, "uninstall-hooks", "claude-code")
    assert out.returncode == 0, out.stderr
    assert path.read_text() == ORIGINAL
    out = hookledger(home, data, "uninstall-hooks", "claude-code")
    assert out.returncode == 0 and path.read_text() == ORIGINAL


def test_hooks_written_by_another_name_of_the_interpreter_are_still_ours(tmp_path: Path) -> None:
    """A virtualenv made by ``scripts/dev.py`` holds copies, not links: ``bin/python`` and
    ``bin/python3``. After ``pip install -e '.[notebooks]'`` the ``hookledger`` script
    ran as ``bin/python3`` where install-hooks had written ``bin/python``. The entries
    are still ours (same hot path, agent and data directory): doctor finds them,
    install-hooks points them at the current interpreter instead of adding a second
    set (every hook would be captured twice), uninstall-hooks removes them."""
    home, data = tmp_path / "home", tmp_path / "data"
    path = home / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(ORIGINAL)
    assert hookledger(home, data, "install-hooks", "claude-code").returncode == 0
    interpreter = os.path.realpath(sys.executable)
    path.write_text(path.read_text().replace(interpreter, "/opt/venv/bin/python3"))

    report = json.loads(hookledger(home, data, "doctor", "--json").stdout)
    assert report["hooks"]["user"]["missing"] == []

    out = hookledger(home, data, "install-hooks", "claude-code")
    assert out.returncode == 0, out.stderr
    commands = ours(json.loads(path.read_text()), data)
    assert set(commands) == A1_EVENTS and all(len(c) == 1 for c in commands.values())
    assert {c[0].split()[0] for c in commands.values()} == {interpreter}

    out = hookledger(home, data, "uninstall-hooks", "claude-code")
    assert out.returncode == 0, out.stderr
    assert path.read_text() == ORIGINAL


def test_uninstall_after_user_edits_keeps_their_edits(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    path = home / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(ORIGINAL)
    assert hookledger(home, data, "install-hooks", "claude-code").returncode == 0
    edited = json.loads(path.read_text())
    edited["theme"] = "dark"
    edited["hooks"]["PostToolUse"].append(
        {"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}
    )
    path.write_text(json.dumps(edited))
    assert hookledger(home, data, "uninstall-hooks", "claude-code").returncode == 0
    after = json.loads(path.read_text())
    expected = json.loads(ORIGINAL)
    expected["theme"] = "dark"
    expected["hooks"]["PostToolUse"] = [
        {"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}
    ]
    assert after == expected


def test_project_scope_without_a_settings_file(tmp_path: Path) -> None:
    home, data, project = tmp_path / "home", tmp_path / "data", tmp_path / "project"
    project.mkdir()
    home.mkdir()
    out = hookledger(home, data, "install-hooks", "claude-code", "--scope", "project", cwd=project)
    assert out.returncode == 0, out.stderr
    path = project / ".claude" / "settings.json"
    assert set(ours(json.loads(path.read_text()), data)) == A1_EVENTS
    assert not (home / ".claude").exists()
    out = hookledger(
        home, data, "uninstall-hooks", "claude-code", "--scope", "project", cwd=project
    )
    assert out.returncode == 0, out.stderr
    assert not path.exists(), "there was no settings file before install"


def test_invalid_settings_are_left_alone(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    path = home / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"hooks": ')
    out = hookledger(home, data, "install-hooks", "claude-code")
    assert out.returncode != 0 and "not valid JSON" in out.stderr
    assert path.read_text() == '{"hooks": '


def test_doctor_reports_hooks_server_and_spool(settings: Settings, tmp_path: Path) -> None:
    home, data = tmp_path / "home", settings.data_dir
    home.mkdir()
    srv = Server(settings)
    env_url = ["--url", srv.url]
    report = json.loads(hookledger(home, data, "doctor", "--json", *env_url).stdout)
    assert report["ok"] is False
    assert report["hooks"]["user"]["events"] == []
    assert report["server"]["reachable"] is False
    assert report["spool"]["empty"] is True

    assert hookledger(home, data, "install-hooks", "claude-code").returncode == 0
    subprocess.run(
        ours(json.loads((home / ".claude" / "settings.json").read_text()), data)["Stop"][0],
        shell=True,
        input=b'{"session_id":"s","hook_event_name":"Stop"}',
        check=True,
        capture_output=True,
    )
    out = hookledger(home, data, "doctor", "--json", *env_url)
    report = json.loads(out.stdout)
    assert out.returncode == 1
    assert set(report["hooks"]["user"]["events"]) == A1_EVENTS
    assert report["spool"]["empty"] is False and report["spool"]["pending"] == ["hooks.journal"]

    srv.start()
    try:
        out = hookledger(home, data, "doctor", "--json", *env_url)
    finally:
        srv.stop()
    report = json.loads(out.stdout)
    assert report["server"]["reachable"] is True
    assert report["spool"]["empty"] is True, "the server ingested and trimmed the journal"
    assert report["ok"] is True and out.returncode == 0


def test_doctor_reads_a_journal_gone_since_the_listing_as_drained(
    settings: Settings, tmp_path: Path
) -> None:
    # the server renames the journal aside while it drains: listed, then gone when
    # doctor looked at its size (FileNotFoundError traceback). A dangling link is a
    # journal listed and gone, without racing a server.
    home, data = tmp_path / "home", settings.data_dir
    home.mkdir()
    (data / "spool").mkdir(parents=True)
    (data / "spool" / "hooks.journal").symlink_to(tmp_path / "renamed-aside")
    out = hookledger(home, data, "doctor", "--json", "--url", "http://127.0.0.1:9")
    assert "Traceback" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["spool"]["empty"] is True


def test_doctor_tells_when_the_local_server_serves_another_data_directory(
    settings: Settings, tmp_path: Path
) -> None:
    # Hooks installed for one data directory spool there; a local server started on
    # another never drains it. Before, doctor called that server "reachable" and stopped.
    home = tmp_path / "home"
    home.mkdir()
    other = tmp_path / "other-data"
    assert hookledger(home, other, "install-hooks", "claude-code").returncode == 0
    srv = Server(settings).start()
    try:
        wrong = hookledger(home, other, "doctor", "--json", "--url", srv.url)
        right = hookledger(home, settings.data_dir, "doctor", "--json", "--url", srv.url)
        text = hookledger(home, other, "doctor", "--url", srv.url)
    finally:
        srv.stop()
    report = json.loads(wrong.stdout)
    assert wrong.returncode == 1 and report["ok"] is False
    assert report["server"]["reachable"] is True and report["server"]["same_data_dir"] is False
    assert str(other) in report["server"]["error"] and "data directory" in text.stdout
    assert json.loads(right.stdout)["server"]["same_data_dir"] is True


def test_hooks_installed_with_a_url_send_there_and_doctor_and_uninstall_find_them(
    settings: Settings, tmp_path: Path
) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    home, laptop = tmp_path / "home", tmp_path / "laptop"
    # a dotfiles setup: ~/.claude/settings.json links to a private file elsewhere
    dotfile = tmp_path / "dotfiles" / "settings.json"
    dotfile.parent.mkdir()
    dotfile.write_text(ORIGINAL)
    dotfile.chmod(0o600)
    link = home / ".claude" / "settings.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(dotfile)
    srv = Server(settings, env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    remote = f"http://{ip}:{srv.port}"

    first = f"http://{ip}:{free_port()}"
    assert hookledger(home, laptop, "install-hooks", "claude-code", "--url", first).returncode == 0
    out = hookledger(home, laptop, "install-hooks", "claude-code", "--url", remote)
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and link.resolve() == dotfile, "written through the link"
    assert stat.S_IMODE(dotfile.stat().st_mode) == 0o600
    backups = list(link.parent.glob("settings.json.hookledger-*.bak"))
    assert backups and all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in backups)
    commands = ours(json.loads(dotfile.read_text()), laptop)
    assert set(commands) == A1_EVENTS
    assert all(v == [commands["Stop"][0]] for v in commands.values()), "the URL changed, not doubled"
    assert commands["Stop"][0].endswith(" " + remote)

    srv.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
        ran = subprocess.run(
            commands["Stop"][0], shell=True, capture_output=True, timeout=60,
            input=b'{"session_id":"sent-to-the-url","hook_event_name":"Stop"}',
            env={**env, "HOOKLEDGER_TOKEN": TOKEN},
        )
        assert ran.returncode == 0 and ran.stdout.strip() == b"{}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        found = httpx.get(f"{remote}/v1/sessions/sent-to-the-url", headers=auth, timeout=30)
        assert found.status_code == 200, "the hook sent to the URL install-hooks wrote"
        report = json.loads(hookledger(home, laptop, "doctor", "--json", token=TOKEN).stdout)
    finally:
        srv.stop()
    assert report["hooks"]["user"]["missing"] == []
    assert report["hooks"]["user"]["urls"] == [remote]
    assert report["server"]["url"] == remote and report["server"]["reachable"] is True

    out = hookledger(home, laptop, "uninstall-hooks", "claude-code")
    assert out.returncode == 0 and "removed" in out.stdout, out.stdout
    assert link.is_symlink() and dotfile.read_text() == ORIGINAL
    assert stat.S_IMODE(dotfile.stat().st_mode) == 0o600


def test_doctor_tells_when_the_server_refuses_the_hooks_token(
    settings: Settings, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    srv = Server(settings, env={"HOOKLEDGER_TOKEN": TOKEN}).start()
    try:
        wrong = hookledger(home, settings.data_dir, "doctor", "--json", "--url", srv.url, token="nope")
        right = hookledger(home, settings.data_dir, "doctor", "--json", "--url", srv.url, token=TOKEN)
    finally:
        srv.stop()
    report = json.loads(wrong.stdout)
    assert wrong.returncode == 1 and report["server"]["reachable"] is False
    assert "refuses the token" in report["server"]["error"]
    assert json.loads(right.stdout)["server"] == {
        "url": srv.url, "reachable": True, "status": 200, "accepts_token": True,
        "same_data_dir": True,
    }
