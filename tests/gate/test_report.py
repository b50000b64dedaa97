"""The report opens in headless Chromium (Debian's), its plots render, and
nothing is logged to the console."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

from tenantry.gate.records import Record, write_records
from tenantry.gate.report import RunView, write_report
from tenantry.gate.scenarios import scenario as build_scenario
from tenantry.gate.verdict import verdict
from tenantry.stacks import plan_stack

CHROMIUM = shutil.which("chromium")


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def png_ink(path: Path) -> float:
    """Share of the decoded (filtered) image bytes that are neither 0 nor 255: about
    0 for a blank page, well above for one with plots."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat = 8, b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        if kind == b"IDAT":
            idat += data[position + 8:position + 8 + length]
        position += 12 + length
    pixels = zlib.decompress(idat)
    return sum(1 for b in pixels if b not in (0, 255)) / len(pixels)


def assert_renders(report: Path, tmp_path: Path, figures: int) -> None:
    """Headless Chromium opens the report: nothing on the console, every plotly
    figure drawn (each draws three main-svg layers), and a screenshot with ink."""
    assert CHROMIUM, "Debian's chromium is missing: `make test` installs it"
    shot = tmp_path / "report.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1400,2400", report.as_uri())
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    assert shot.exists() and png_ink(shot) > 0.01
    dom = chromium("--dump-dom", report.as_uri()).stdout
    assert len(re.findall(r'class="main-svg"', dom)) >= 3 * figures, "every plotly figure drawn"


def test_a_report_renders_and_the_ink_measure_tells_it_from_a_blank_page(tmp_path):
    records = [Record(tenant, tier, "chat", "tiny", stage, second + offset, True, status, 0.4, 0.1 if status == 200
                      else None, [0.02] * 10 if status == 200 else [], 11, 60, error="" if status == 200 else "x")
               for second in range(0, 60, 2) for offset, (tenant, tier) in enumerate(
                   (("acme", "guaranteed"), ("initech", "spot")))
               for stage, status in ((("alone" if second < 20 else "flood"), 200 if second % 6 else 429),)]
    plan = plan_stack(Path(__file__).resolve().parents[2] / "stacks" / "local.yaml")
    scenario = build_scenario("noisy-neighbour", plan, short=True)
    views = []
    for label in ("tenantry policy", "plain LiteLLM (no policy, FCFS)"):
        directory = tmp_path / label.split()[0]
        directory.mkdir()
        write_records(directory, records)
        judged = verdict(records, plan, scenario).to_dict() | {"actions": [{"at": 20.0, "action": "stage flood",
                                                                             "result": ""}], "seconds": 60}
        views.append(RunView(label, directory, records, judged))
    report = write_report(tmp_path / "report.html", "tenantry gate: local / noisy-neighbour", views, ["a note"])
    text = report.read_text()
    assert "What tenantry" in text and text.count("<section>") == 3
    assert_renders(report, tmp_path, figures=6)
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body></body></html>")
    chromium(f"--screenshot={tmp_path / 'blank.png'}", "--window-size=1400,2400", blank.as_uri())
    assert png_ink(tmp_path / "blank.png") < 0.01
