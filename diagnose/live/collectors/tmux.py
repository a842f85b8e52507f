"""The tmux server the run was launched on: running, stale socket (server killed, socket file
left behind), or no socket; its sessions; dead panes (remain-on-exit) and their exit status.

Always `tmux -S <socket>` with $TMUX unset, so an enclosing tmux session never decides which
server we ask. tmux's own words are kept raw in the manifest and parsed by parsers/tmux.py,
live and from a bundle alike. Asking a dead server's socket does not remove it.
"""

from __future__ import annotations

import time
from typing import Any

from diagnose.evidence.parsers.tmux import PANE_FORMAT, SESSION_FORMAT, socket_path
from diagnose.live.collectors.base import Context, Output
from diagnose.live.hosts import CommandResult, FileStat

WINDOW_SLACK = 60.0  # seconds: a socket made just before the first log line is still the launch's


def _raw(result: CommandResult) -> dict[str, Any]:
    return {"rc": result.rc if result.rc is not None else -1, "stdout": result.out,
            "stderr": result.err if result.rc is not None else result.failure()}


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    host = ctx.host
    socket, how = socket_path(host.uid(), host.environ(), spec.tmux_socket_name, spec.tmux_socket)
    st: FileStat | None = None
    try:
        st = host.stat(socket)
        exists: bool | None = st is not None
    except PermissionError:
        exists = None
    base = ["tmux", "-u", "-S", socket]  # -u: in a C locale tmux would print our tab separators as "_"
    env: dict[str, str | None] = {"TMUX": None}
    sessions = ctx.run([*base, "list-sessions", "-F", SESSION_FORMAT], env=env)
    if sessions.error == "not found":
        reason = "tmux is not installed"
        return Output(status="gap" if spec.tmux_session else "skipped", reason=reason)
    if sessions.timed_out:
        return Output(status="timeout", reason=f"{sessions.failure()} (socket {socket})")
    if sessions.ok:
        panes = ctx.run([*base, "list-panes", "-a", "-F", PANE_FORMAT], env=env)
        if panes.timed_out:
            return Output(status="timeout", reason=f"{panes.failure()} (socket {socket})")
        pane_raw = _raw(panes)
    else:
        pane_raw = {"rc": sessions.rc, "stdout": "", "stderr": ""}
    names = {line.strip() for line in sessions.out.splitlines()} if sessions.ok else set()
    expected = spec.tmux_session
    if expected is None and spec.tmux_session_guess in names:
        expected = spec.tmux_session_guess  # no config, but a session named after the run exists
    capture = {
        "socket": socket,
        "socket_source": how,
        "socket_exists": exists,
        "socket_ctime": st.ctime if st is not None else None,
        "expected_session": expected,
        "list_sessions": _raw(sessions),
        "list_panes": pane_raw,
    }
    capture["launched"], capture["launched_basis"] = launched(ctx, expected, st)
    return Output(facts={"tmux": capture})


def launched(ctx: Context, expected: str | None, st: FileStat | None) -> tuple[bool, str]:
    """Whether the run was launched in tmux, and why we think so. A socket file alone says
    nothing (another user's or an old server's is left behind for weeks): only one made inside
    the run's launch window counts."""
    spec = ctx.spec
    record = spec.launch_record or {}
    if record.get("via") == "tmux" and spec.tmux_session == (record.get("launcher") or {}).get("tmux_session"):
        return True, f"the launch record {spec.launch_record_path} names its tmux session"
    if spec.tmux_session is not None:
        return True, "the config names its tmux session"
    if spec.launcher == "tmux":
        return True, "the config says launcher = tmux"
    if expected is not None:
        return True, f"a tmux session named like the run ({expected}) exists"
    made = st.ctime if st is not None and st.is_socket else None
    start, end = spec.launch_window()
    if made is None or start is None or (st is not None and st.uid != ctx.host.uid()):
        return False, ""
    until = end if end is not None else time.time()
    # Before the run's own first line, a minute of slack; before a sibling's last write (all a
    # never-started run has), none: a server older than the previous run's end is not this launch's.
    slack = WINDOW_SLACK if spec.started_at is not None else 0.0
    if start - slack <= made <= until + WINDOW_SLACK:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(made))
        return True, f"its socket was made at {when}, inside the run's launch window"
    return False, ""
