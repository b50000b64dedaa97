#!/usr/bin/python3
"""Runs inside the throwaway virtual machine only (tests/ansible/vm.py copies it there; no node ever has it): answers
commands from the test on the second serial port, one JSON line each way. Python's standard library only: it runs on
the node's own python3."""

import base64
import json
import os
import subprocess
import tty

PORT = "/dev/ttyS1"


def answer(request: dict) -> dict:
    done = subprocess.run(["/bin/sh", "-c", request["command"]], capture_output=True, check=False)
    return {"id": request["id"], "rc": done.returncode, "stdout": base64.b64encode(done.stdout).decode(),
            "stderr": base64.b64encode(done.stderr).decode()}


def send(port: int, data: bytes) -> None:
    while data:  # a tty may take a long answer in parts
        data = data[os.write(port, data):]


def main() -> None:
    port = os.open(PORT, os.O_RDWR | os.O_NOCTTY)
    tty.setraw(port)  # no echo, no line editing: the bytes as sent
    reader = os.fdopen(port, "rb", buffering=0)
    send(port, b'{"ready": true}\n')
    pending = b""
    while True:
        chunk = reader.read(4096)
        if not chunk:
            continue
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                send(port, json.dumps(answer(json.loads(line))).encode() + b"\n")


if __name__ == "__main__":
    main()
