"""The vLLM tests run in their own environment (`make test-vllm`, .venv-vllm), never from the
main suite: the main `pytest` collects tests/ only (pyproject.toml, testpaths)."""

from __future__ import annotations

#: Report lines the tests add (acceptance, tokens/s ratios); printed after the run.
REPORT: list = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if REPORT:
        terminalreporter.section("RACER in vLLM: acceptance and speed (this run)")
        for line in REPORT:
            terminalreporter.write_line(line)
