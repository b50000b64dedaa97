"""Showback bills the replicas an autoscaled engine ran (issue 34, item 13), counted by a real Prometheus from
vLLM's series: two hours of them written as vLLM's exporter shapes them (one series per replica, a sample a
minute), loaded with promtool's backfill, and asked through read_replica_hours as `tenantry showback
--prometheus` asks."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tenantry.showback import Period, SpendRecords, ShowbackError, read_replica_hours, showback
from tenantry.stacks import plan_stack
from tests.ports import free_port

STEP = 60
"""Seconds between two samples, as a scrape every minute writes them."""


def _series(engine: str, replicas: dict[str, tuple[datetime, datetime]]) -> str:
    """OpenMetrics of vllm:num_requests_running, one series per replica (its pod), sampled every STEP seconds
    between its start and end."""
    lines = ["# TYPE vllm:num_requests_running gauge"]
    for pod, (start, end) in replicas.items():
        at = start
        while at <= end:
            lines.append(f'vllm:num_requests_running{{model_name="{engine}",pod="{pod}"}} 0 {at.timestamp():.0f}')
            at += timedelta(seconds=STEP)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def two_hours(tmp_path_factory):
    """(Prometheus's URL, the period): llama-70b (h200-many-adapters: floor 2, ceiling 4) ran its two floor
    replicas throughout, a third for the second hour only, and a fourth never."""
    if not shutil.which("prometheus"):
        pytest.fail("prometheus is missing: run `make test` (it installs Debian's prometheus)")
    folder = tmp_path_factory.mktemp("prometheus")
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    start = end - timedelta(hours=2)
    text = _series("llama-70b", {"a": (start, end), "b": (start, end), "c": (start + timedelta(hours=1), end)})
    (folder / "series.om").write_text(text)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(folder / "series.om"),
                    str(folder / "data")], check=True, capture_output=True)
    (folder / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    server = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                               f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "Prometheus did not become ready"
            time.sleep(0.2)
        yield url, Period(start=start.replace(tzinfo=None), end=end.replace(tzinfo=None))
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_replica_hours_are_the_replicas_prometheus_saw_run(two_hours):
    url, period = two_hours
    plan = plan_stack("h200-many-adapters")
    ran = read_replica_hours(url, plan, period)
    # 2 replicas x 2 h + 1 x 1 h; a count a minute may take in or miss one step at each edge.
    assert ran["llama-70b"] == pytest.approx(5.0, abs=3 * STEP / 3600)
    report = showback(plan, period, SpendRecords(period=(), budget_window=()), replica_hours=ran)
    (bill,) = report.engines
    per_replica = plan.engine("llama-70b").tokens.usd_per_hour / 2
    assert bill.replica_hours == ran["llama-70b"] and bill.bill_usd == pytest.approx(per_replica * ran["llama-70b"])
    assert not [w for w in report.warnings if "autoscaled" in w]


def test_hours_with_fewer_replicas_than_the_floor_are_billed_at_the_floor(two_hours):
    """The floor's GPUs are held whether or not its replicas report: a replica down, or none at all for a
    while, is still the floor's bill (an average over the steps that reported would bill the busy hour twice)."""
    url, period = two_hours
    plan = plan_stack("h200-many-adapters")
    later = Period(start=period.end - timedelta(hours=1), end=period.end + timedelta(hours=1))  # 2nd hour: 3 ran
    ran = read_replica_hours(url, plan, later)["llama-70b"]
    # 3 for the hour seen, the floor after (an average of the steps that reported would say 3 x 2 h); Prometheus
    # counts a series for its lookback, 5 minutes, past its last sample: a scrape that finds a pod gone ends its
    # series at once with a stale marker, which a backfill cannot write, so a third replica is seen 5 minutes on.
    assert ran == pytest.approx(3 * 1 + 2 * 1 + 5 / 60, abs=3 * STEP / 3600)


def test_without_prometheus_an_autoscaled_engine_is_billed_on_its_floor_and_says_so(two_hours):
    _, period = two_hours
    report = showback(plan_stack("h200-many-adapters"), period, SpendRecords(period=(), budget_window=()))
    (bill,) = report.engines
    assert bill.replica_hours == pytest.approx(2 * 2.0)
    assert any("engine llama-70b is autoscaled (2 to 4 replicas) and billed on its floor of 2" in w
               for w in report.warnings)


def test_an_unreachable_prometheus_is_a_clear_error():
    period = Period(start=datetime(2026, 1, 1), end=datetime(2026, 1, 1, 2))
    with pytest.raises(ShowbackError, match="the replicas engine llama-70b ran could not be read from"):
        read_replica_hours(f"http://127.0.0.1:{free_port()}", plan_stack("h200-many-adapters"), period)
