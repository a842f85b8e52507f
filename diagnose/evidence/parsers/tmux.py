"""tmux state from what tmux printed (list-sessions / list-panes) and a stat of its socket."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from diagnose.evidence.model import TmuxPane, TmuxServer, TmuxSession, TmuxState

# The format asked of `tmux list-panes -a -F`: tab-separated so names with spaces survive.
# The last two fields came later (tmux 3.3 has pane_dead_signal); captures with only the
# first five still parse.
PANE_FORMAT = (
    "#{session_name}\t#{session_name}:#{window_index}.#{pane_index}\t#{pane_dead}\t#{pane_dead_status}"
    "\t#{pane_current_command}\t#{pane_dead_signal}\t#{pane_pid}"
)
SESSION_FORMAT = "#{session_name}"


def socket_path(uid: int, environ: Mapping[str, str], name: str | None = None, path: str | None = None) -> tuple[str, str]:
    """The socket a plain `tmux` (or `tmux -L NAME` / `tmux -S PATH`) talks to, and how we chose it.

    Mirrors tmux: -S wins, then -L NAME under the socket directory, then the server of $TMUX,
    then `default`. The directory is $TMUX_TMPDIR (or /tmp) + /tmux-UID.
    """
    if path:
        return path, "-S"
    directory = (environ.get("TMUX_TMPDIR") or "/tmp").rstrip("/") or "/"
    base = f"{directory}/tmux-{uid}"
    if name:
        return f"{base}/{name}", "-L"
    inside = environ.get("TMUX", "")
    if inside:
        return inside.split(",", 1)[0], "$TMUX"
    return f"{base}/default", "TMUX_TMPDIR" if environ.get("TMUX_TMPDIR") else "default"

_NO_SERVER = re.compile(r"no server running on (?P<socket>\S+)")
_CONNECT = re.compile(r"error connecting to (?P<socket>\S+) \((?P<why>[^)]*)\)")


def server_state(rc: int, stderr: str, socket_exists: bool | None) -> TmuxServer:
    if rc == 0:
        return TmuxServer.RUNNING
    if _NO_SERVER.search(stderr):
        # tmux says this when the socket file is there but nothing listens on it.
        return TmuxServer.STALE_SOCKET if socket_exists is not False else TmuxServer.NO_SOCKET
    match = _CONNECT.search(stderr)
    if match:
        if "No such file" in match.group("why"):
            return TmuxServer.NO_SOCKET
        if "Connection refused" in match.group("why"):
            return TmuxServer.STALE_SOCKET
    if "no sessions" in stderr:
        return TmuxServer.RUNNING
    return TmuxServer.ERROR


def parse_tmux(capture: Mapping[str, Any], expected_session: str | None) -> TmuxState:
    """Build TmuxState from a capture: {socket, socket_exists, list_sessions: {rc, stdout, stderr},
    list_panes: {rc, stdout, stderr}} as the tmux collector stores it.

    A capture of the wrong shape (a hand-edited bundle, a pane status of `--1`) reads field by
    field as unknown: a field that is not what tmux prints never raises."""
    if not isinstance(capture, Mapping):
        capture = {}
    socket = str(capture.get("socket") or "?")
    sessions_out = _mapping(capture.get("list_sessions"))
    rc = _rc(sessions_out.get("rc", 1))
    stderr = str(sessions_out.get("stderr") or "").strip()
    exists = capture.get("socket_exists")
    server = server_state(rc, stderr, exists if isinstance(exists, bool) else None)
    names = [line.strip() for line in str(sessions_out.get("stdout") or "").splitlines() if line.strip()] if rc == 0 else []
    panes: dict[str, list[TmuxPane]] = {name: [] for name in names}
    panes_out = _mapping(capture.get("list_panes"))
    if _rc(panes_out.get("rc", 1)) == 0:
        for line in str(panes_out.get("stdout") or "").splitlines():
            parts = line.split("\t")
            if len(parts) < 5:
                continue
            session, target, dead, status, command = parts[:5]
            signal = parts[5] if len(parts) > 5 else ""
            pid = parts[6] if len(parts) > 6 else ""
            panes.setdefault(session, []).append(TmuxPane(
                target, dead == "1", _int(status), command,
                dead_signal=_int(signal) if dead == "1" else None, pid=_int(pid),
            ))
    sessions = tuple(TmuxSession(name, tuple(p)) for name, p in panes.items())
    expected = expected_session if isinstance(expected_session, str) else None
    launched = capture.get("launched")
    basis = capture.get("launched_basis")
    return TmuxState(server, socket, stderr.splitlines()[0] if stderr else "", sessions, expected,
                     launched if isinstance(launched, bool) else None, basis if isinstance(basis, str) else "")


_INT = re.compile(r"-?[0-9]{1,18}")  # not str.isdigit(): "--1" and "²" pass that, and int() refuses them


def _int(text: str) -> int | None:
    match = _INT.fullmatch(text.strip())
    return int(match.group()) if match else None


def _rc(value: object) -> int:
    """An exit status as stored (an int; a string in an edited bundle); anything else is a failure."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return value
    number = _int(value) if isinstance(value, str) else None
    return number if number is not None else 1


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
