"""RACER inside vLLM on the default model (SmolLM2-135M-Instruct, float32, CPU backend).

Three engines, each in its own subprocess (engine_run.py): plain decoding, RACER
(racer_ref.integrations.vllm.RacerProposer, K = 5) and vLLM's own ``ngram`` proposer (K = 5). Greedy
outputs with RACER must equal plain decoding token for token, for every prompt run alone
(batch of 1) and for all prompts submitted at once (a batch of concurrent requests). The
run reports acceptance and tokens/s of RACER and ngram against plain decoding, measured in
this run on whatever machine runs it: speed as ratios only.

The model folder comes from ``$RACER_REF_VLLM_MODEL`` (``make test-vllm`` converts the
default model with the main environment and sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPORT

HERE = Path(__file__).resolve().parent
METHODS = ("plain", "racer", "ngram")
K = 5


def run_engine(method: str, model: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "engine_run.py"), "--method", method, "--model", model, "--k", str(K)],
        capture_output=True, text=True, timeout=900)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("ENGINE_RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"engine {method!r} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return json.loads(lines[-1][len("ENGINE_RESULT "):])


@pytest.fixture(scope="module")
def runs() -> dict:
    model = os.environ.get("RACER_REF_VLLM_MODEL")
    if not model:
        pytest.fail("RACER_REF_VLLM_MODEL is not set: run `make test-vllm` (it converts the default model)")
    results = {m: run_engine(m, model) for m in METHODS}
    REPORT.extend(report_lines(results))
    return results


def acceptance(phase: dict) -> str:
    """Acceptance of one phase: accepted of drafted tokens, and MAT over every decoding step.

    Each step after a request's prefill commits its accepted drafts plus one token, so with
    N new tokens over R requests and A accepted drafts the steps number N - R - A and MAT =
    (N - R) / (N - R - A) (1.00 for plain decoding), comparable to our loop's MAT.
    """
    spec, n, r = phase["spec"], phase["new_tokens"], len(phase["tokens"])
    proposed, accepted = spec["draft_tokens"], spec["accepted_tokens"]
    mat = (n - r) / max(n - r - accepted, 1)
    return f"MAT {mat:.2f}; {accepted}/{proposed} draft tokens accepted ({accepted / max(proposed, 1):.0%})"


def report_lines(results: dict) -> list:
    import platform
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    lines = [f"CPU: {cpu}, {os.cpu_count()} cores; vLLM CPU backend, float32, greedy, K = {K}, 64 new tokens "
             "per prompt; tokens/s as a ratio to plain decoding in this run (timings under this "
             "machine's load, not project figures)"]
    for phase in ("single", "batch"):
        base = results["plain"][phase]
        base_tps = base["new_tokens"] / base["wall_s"]
        label = "batch of 1 (each prompt alone)" if phase == "single" else "all prompts at once"
        lines.append(f"{label}:")
        for method in METHODS:
            r = results[method][phase]
            ratio = (r["new_tokens"] / r["wall_s"]) / base_tps
            acc = acceptance(r) if method != "plain" else "MAT 1.00"
            lines.append(f"  {method:6s} tokens/s x{ratio:.2f} of plain; {acc}")
    return lines


@pytest.mark.parametrize("phase", ["single", "batch"])
def test_racer_greedy_equals_plain_decoding(runs, phase):
    plain, racer = runs["plain"][phase]["tokens"], runs["racer"][phase]["tokens"]
    assert all(len(t) > 0 for t in plain)
    for i, (want, got) in enumerate(zip(plain, racer)):
        assert got == want, f"prompt {i}: RACER differs from plain decoding at token " \
                            f"{next(j for j, (a, b) in enumerate(zip(got + [-1], want + [-2])) if a != b)}"


@pytest.mark.parametrize("phase", ["single", "batch"])
def test_ngram_greedy_equals_plain_decoding(runs, phase):
    assert runs["ngram"][phase]["tokens"] == runs["plain"][phase]["tokens"]


def test_racer_drafts_are_verified_and_accepted(runs):
    """vLLM verified RACER's chains and accepted some; the copy-logit hook fed the tables
    with rows that matched what vLLM verified; drafters were per request and freed."""
    for phase in ("single", "batch"):
        spec = runs["racer"][phase]["spec"]
        assert spec["drafts"] > 0 and spec["draft_tokens"] > 0
        assert 0 < spec["accepted_tokens"] <= spec["draft_tokens"]
    stats = runs["racer"]["proposer"]
    assert stats["observed_rows"] > 0 and stats["misaligned"] == 0
    # One drafter per request (warm-up + 4 alone + 4 together), at most max_num_seqs alive.
    assert stats["created"] == 9
    assert stats["live_drafters"] <= 4
