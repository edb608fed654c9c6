"""The busy-machine rule shared by the demo, ``racer-ref generate`` and tutorial 08."""

from __future__ import annotations

import os
from pathlib import Path

from racer_ref.harness import load


def test_load_report_names_both_loads_and_the_cpus():
    assert load.load_report(0.5, 2.25, 2) == "load average (1 min): 0.50 before, 2.25 after the timed runs, 2 CPUs"
    assert load.load_report(None, None, 4) == ("load average (1 min): unknown before, unknown after "
                                               "the timed runs, 4 CPUs")


def test_busy_warnings_uses_the_higher_known_load():
    assert load.busy_warnings(0.3, 2.4, 2) == []  # 2.4 on 2 CPUs: the program's own threads
    busy = load.busy_warnings(3.1, 0.4, 2)
    assert len(busy) == 1 and "load average 3.1 on 2 CPUs" in busy[0] and "Rerun on a quiet machine" in busy[0]
    assert load.busy_warnings(None, 2.6, 2) == load.timing_warnings(2.6, 2) != []
    assert load.busy_warnings(None, None, 2) == []


def test_the_demo_and_the_tutorial_use_the_same_rule():
    import racer_ref.app.demo

    assert racer_ref.app.demo.timing_warnings is load.timing_warnings
    tutorial = Path(__file__).resolve().parents[1] / "tutorials" / "08_racer_on_a_real_model.py"
    text = tutorial.read_text(encoding="utf-8")
    assert "from racer_ref.harness.load import busy_warnings, load_average, load_report" in text


def test_load_average_is_the_one_minute_figure():
    value = load.load_average()
    if hasattr(os, "getloadavg"):
        assert value is not None and value >= 0.0
    else:
        assert value is None
