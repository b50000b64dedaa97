"""What counts as a crash of a stack process: a real supervisord runs two programs, one stopped the way the gate's
stop-engine stops an engine (supervisorctl stop, escalated to SIGKILL because it ignores SIGTERM) and one killed
behind supervisord's back, as a segfault or the gate's kill-engine would. Only the second is a crash."""

from __future__ import annotations

import subprocess
import time

from tenantry.local.layout import Layout
from tenantry.local.supervisor import SUPERVISORCTL, SUPERVISORD, crashes

WAIT_SECONDS = 30


def _conf(layout: Layout) -> str:
    sock = layout.run / "supervisor.sock"
    stubborn = "sh -c 'trap \"\" TERM; while :; do sleep 1; done'"  # ignores SIGTERM, as a hung engine does
    return "\n".join([
        "[unix_http_server]", f"file={sock}", "[supervisord]", f"logfile={layout.logs / 'supervisord.log'}",
        f"pidfile={layout.supervisor_pid}", f"childlogdir={layout.logs}", "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory=supervisor.rpcinterface:make_main_rpcinterface",
        "[supervisorctl]", f"serverurl=unix://{sock}",
        "[program:engine-tiny]", f"command={stubborn}", "startsecs=1", "stopwaitsecs=1", "stopasgroup=true",
        "killasgroup=true", "autorestart=false",
        "[program:gateway-0]", "command=sleep 600", "startsecs=1", "autorestart=false", "",
    ])


def _ctl(layout: Layout, *args: str) -> str:
    return subprocess.run([str(SUPERVISORCTL), "-c", str(layout.supervisor_conf), *args], capture_output=True,
                          text=True, check=False).stdout


def _until(condition, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not seen within {WAIT_SECONDS} s: {what}"
        time.sleep(0.1)
    return found


def test_a_stop_escalated_to_sigkill_is_not_a_crash_and_a_kill_nobody_asked_for_is(tmp_path):
    layout = Layout(tmp_path, 0)
    for folder in (layout.logs, layout.run):
        folder.mkdir()
    layout.supervisor_conf.write_text(_conf(layout))
    subprocess.run([str(SUPERVISORD), "-c", str(layout.supervisor_conf)], check=True)
    supervisord = int(_until(lambda: layout.supervisor_pid.exists() and layout.supervisor_pid.read_text().strip(),
                             "supervisord's pid file"))
    try:
        _until(lambda: _ctl(layout, "status").count("RUNNING") == 2, "both programs running")
        _ctl(layout, "stop", "engine-tiny")  # returns once stopped: SIGTERM ignored, SIGKILL after 1 s
        log = (layout.logs / "supervisord.log").read_text()
        assert "stopped: engine-tiny (terminated by SIGKILL)" in log, log
        assert crashes(layout) == []
        gateway = int(_ctl(layout, "pid", "gateway-0").strip())
        subprocess.run(["kill", "-KILL", str(gateway)], check=True)
        died = _until(lambda: crashes(layout), "gateway-0's death in supervisord's log")
        assert len(died) == 1 and "exited: gateway-0 (terminated by SIGKILL; not expected)" in died[0], died
    finally:
        subprocess.run(["kill", "-TERM", str(supervisord)], check=False)
        _until(lambda: subprocess.run(["kill", "-0", str(supervisord)], capture_output=True).returncode != 0,
               "supervisord's exit")
