"""The words of a remote command: --host parsed strictly, the exec prefix split like a shell
would, and the one string ssh hands the remote login shell built so that a real POSIX shell
(sh, here) turns it back into exactly the argument list, whatever the arguments hold. No
server needed: the remote shell is played by /bin/sh itself."""

from __future__ import annotations

import subprocess

import pytest

from diagnose.errors import DiagnoseError
from diagnose.live.ssh import (
    Target,
    check_options,
    env_words,
    explain,
    parse_exec,
    parse_target,
    remote_command,
)

HOSTILE = ["x; touch /tmp/diagnose-pwned", "$(id)", "`id`", "a\nb", "'", '"', "\\", "-rf", "", " ", "*", "~",
           "é", "\u00ff", "a" * 5000, "$HOME", "!!", "%s", "\t", "${IFS}", "--", ";|&<>(){}"]


@pytest.mark.parametrize(("text", "target"), [
    ("root@10.1.2.6", Target("10.1.2.6", "root")),
    ("10.1.2.6", Target("10.1.2.6")),
    ("gpu-box:2222", Target("gpu-box", None, 2222)),
    ("u.s-er@h.example.org:22", Target("h.example.org", "u.s-er", 22)),
    ("[::1]:2200", Target("::1", None, 2200)),
    ("fe80::1%eth0", Target("fe80::1%eth0")),
    ("alice@[2001:db8::2]", Target("2001:db8::2", "alice")),
])
def test_targets(text: str, target: Target) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", ["-oProxyCommand=id", "a b", "h:0", "h:65536", "h:x", "@h", "u;x@h", "h;id", "",
                                  "[::1", "[::1]x", "h`id`", "-h"])
def test_bad_targets(text: str) -> None:
    with pytest.raises(DiagnoseError, match="--host"):
        parse_target(text)


def test_target_shown_as_given() -> None:
    assert str(parse_target("root@10.1.2.6:2222")) == "root@10.1.2.6:2222"
    assert str(parse_target("[::1]:22")) == "[::1]:22"


def test_exec_prefixes() -> None:
    assert parse_exec("pct exec 200 --") == ("pct", "exec", "200", "--")
    assert parse_exec("docker exec -i 'my box'") == ("docker", "exec", "-i", "my box")
    assert parse_exec(["sudo", "-u", "alice"]) == ("sudo", "-u", "alice")
    assert parse_exec(None) == ()
    with pytest.raises(DiagnoseError, match="--exec"):
        parse_exec("pct exec 'unclosed")


def shell_argv(command: str) -> list[str]:
    """What a POSIX login shell makes of the command string: the argv its command receives."""
    import json

    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


PROBE = ["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]


@pytest.mark.parametrize("argument", HOSTILE, ids=range(len(HOSTILE)))
def test_one_level_of_quoting_round_trips(argument: str, tmp_path) -> None:
    command = remote_command(["env"], [*PROBE, argument, "fixed"])
    assert shell_argv(command) == [argument, "fixed"]
    assert not list(tmp_path.glob("*"))


@pytest.mark.parametrize("argument", HOSTILE, ids=range(len(HOSTILE)))
def test_a_prefix_ending_in_sh_c_gets_it_quoted_twice(argument: str) -> None:
    """`--exec 'bash -c'`-like prefixes take the command as one word: a second shell parses it."""
    command = remote_command(["sh", "-c"], [*PROBE, argument])
    assert shell_argv(command) == [argument]


def test_env_words() -> None:
    assert env_words({"TMUX": None}) == ["env", "-u", "TMUX", "LC_ALL=C"]
    assert env_words({"LC_ALL": "C.UTF-8", "A": "x y"}) == ["env", "LC_ALL=C.UTF-8", "A=x y"]
    with pytest.raises(ValueError):
        env_words({"A;id": "x"})


def test_ssh_options_are_key_value_only() -> None:
    assert check_options(["IdentityFile=~/.ssh/lab", "Port=22"], "x") == ("IdentityFile=~/.ssh/lab", "Port=22")
    for bad in ["-oProxyCommand=id", "Foo", "A=b\nc", "=x"]:
        with pytest.raises(DiagnoseError):
            check_options([bad], "[host] ssh_options")


@pytest.mark.parametrize(("stderr", "words"), [
    ("Host key verification failed.\r\n", "host key verification failed (add it to known_hosts: ssh-keyscan -p 2222 h"),
    ("No ED25519 host key is known for [h]:2222 and you have requested strict checking.\r\nHost key verification failed.",
     "host key verification failed"),
    ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", "host key changed"),
    ("root@h: Permission denied (publickey,password).", "permission denied (publickey,password)"),
    ("ssh: Could not resolve hostname h: Name or service not known", "could not resolve the host name"),
    ("ssh: connect to host h port 2222: Connection refused", "connection refused (no sshd listening on port 2222?)"),
    ("ssh: connect to host h port 2222: Connection timed out", "connection timed out after 10 s"),
    ("something else entirely", "ssh failed: something else entirely"),
])
def test_ssh_failures_in_one_line(stderr: str, words: str) -> None:
    line = explain(Target("h", "root", 2222), stderr, 10.0)
    assert words in line and "\n" not in line and line.startswith("root@h:2222: ")


def test_host_table_of_the_config(tmp_path) -> None:
    from diagnose.errors import ConfigError
    from diagnose.live.config import load_config

    path = tmp_path / "diagnose.toml"
    path.write_text('[host]\ntarget = "root@10.1.2.6"\nexec = "pct exec 200 --"\nssh_options = ["Port=2222"]\n'
                    'connect_timeout = 5\n')
    config = load_config(path)
    assert config.host == {"target": "root@10.1.2.6", "exec": ["pct", "exec", "200", "--"], "ssh_options": ["Port=2222"],
                           "connect_timeout": 5.0}
    for text, words in [('[host]\nport = 22\n', "diagnose.toml:2: unknown key 'port' in [host]"),
                        ('[host]\ntarget = 3\n', "diagnose.toml:2: target in [host] must be a non-empty string"),
                        ('[host]\nexec = "pct \'x"\n', "diagnose.toml:2: exec in [host]"),
                        ('[host]\nssh_options = ["-oProxyCommand=id"]\n', "ssh_options in [host] must be a list"),
                        ('[host]\nscan_timeout = -1\n', "scan_timeout in [host] must be a positive number")]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            load_config(path)
