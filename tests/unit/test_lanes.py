"""`make test` runs tests/local beside the rest (tests/lanes.py): every test directory runs in exactly one lane, a
lane that fails fails the run with its output shown, and arguments naming tests run one session as pytest would."""

from __future__ import annotations

from pathlib import Path

from tests import lanes

TESTS = Path(__file__).resolve().parents[1]


def _collected_by(lane: lanes.Lane, folder: Path) -> bool:
    paths = [TESTS.parent / s for s in lane.selection if not s.startswith("-")]
    ignored = [TESTS.parent / s.removeprefix("--ignore=") for s in lane.selection if s.startswith("--ignore=")]
    return any(folder.is_relative_to(p) for p in paths) and not any(folder.is_relative_to(i) for i in ignored)


def test_every_test_directory_runs_in_exactly_one_lane():
    folders = {path.parent for path in TESTS.rglob("test_*.py")}
    assert len(folders) > 5
    assert {f.relative_to(TESTS).as_posix(): sum(_collected_by(lane, f) for lane in lanes.LANES) for f in folders} \
        == {f.relative_to(TESTS).as_posix(): 1 for f in folders}


def test_options_run_the_lanes_and_test_names_run_one_session():
    assert not lanes.names_tests(["-m", "not slow", "-x"])
    assert lanes.names_tests(["tests/unit"]) and lanes.names_tests(["tests/unit/test_lanes.py::test_x"])


def test_a_failing_lane_fails_the_run_and_its_output_is_shown(tmp_path, monkeypatch, capfd):
    for name, body in (("passes", "assert True"), ("fails", "assert 1 == 2, 'the local lane broke'")):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"test_{name}.py").write_text(f"def test_it():\n    {body}\n")
    monkeypatch.setattr(lanes, "LOGS", tmp_path / "logs")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # two bare sessions: the plugins' imports cost seconds
    monkeypatch.setattr(lanes, "LANES", (lanes.Lane("local", (str(tmp_path / "fails"),), False),
                                         lanes.Lane("rest", (str(tmp_path / "passes"),), True)))
    assert lanes.run(["-p", "no:cacheprovider"]) == 1
    out = capfd.readouterr().out
    assert "the local lane broke" in out and "1 passed" in out
    assert "lane local" in out and "exit 1" in out and "exit 0" in out
