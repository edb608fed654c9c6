"""Compiled passes built once per machine (racer_ref.speedups.compiled_cache): a build writes a
checked entry, a second process loads it without building, a changed key or a corrupted,
stale or damaged entry is rebuilt (never loaded), a failed build leaves the eager path with one
line saying why, and greedy decoding through the loaded passes is lossless.

Each build of the tiny model takes seconds (``autotune=False``); the module builds three.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models import greedy_reference, tiny_model
from racer_ref.decoding import generate
from racer_ref.speedups import compiled_cache as cc
from racer_ref.speedups import cpu_kernels as ck
from racer_ref.speedups.compiled import load_or_compile

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="inductor needs a C++ compiler")

PROMPT = list(range(5, 30))


def fresh_model(seed: int = 0):
    model = tiny_model("llama", seed=seed)
    assert ck.install_fast_forward(model) is not None
    return model


class Spy:
    """Counts the builds (``export_pass`` calls) and keeps the progress lines."""

    def __init__(self, monkeypatch):
        self.builds = 0
        self.lines = []
        real = cc.export_pass

        def export(*args, **kwargs):
            self.builds += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(cc, "export_pass", export)

    def __call__(self, line):
        self.lines.append(line)


@pytest.fixture(scope="module", autouse=True)
def measured_faster():
    """A build times its pass against the eager one and keeps it only when faster: on tiny
    models either can win, so the tests fix the measurement (compiled twice as fast) unless
    they set their own."""
    from racer_ref.speedups.compiled import CompiledPasses

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CompiledPasses, "time_runner", lambda self, runner, size: {"compiled": 1.0, "eager": 2.0})
        yield


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("racer-cache")
    saved = os.environ.get("RACER_REF_CACHE")
    os.environ["RACER_REF_CACHE"] = str(root)
    yield root
    if saved is None:
        os.environ.pop("RACER_REF_CACHE", None)
    else:
        os.environ["RACER_REF_CACHE"] = saved


@pytest.fixture(scope="module")
def built(cache_root):
    """One build of size 1 for the seed-0 tiny model."""
    lines = []
    model = fresh_model()
    passes = load_or_compile(model, (1,), progress=lines.append, autotune=False)
    return model, passes, lines


def test_a_build_writes_a_checked_entry_and_says_so(built, cache_root):
    model, passes, lines = built
    assert passes is not None and passes.sizes == [1] and model.forward.compiled is passes
    assert passes.source == "aoti-cache" and passes.compile_seconds[1] > 0
    assert 0 <= passes.max_rel_error[1] <= 1e-4
    assert any("building the size-1 pass" in line for line in lines)
    assert any("built in" in line and "MB on disk" in line for line in lines)
    folder = Path(passes.cache_dirs[1])
    assert folder.parent == cache_root / "compiled"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["key"] == cc.entry_key(model, 1) and manifest["key"]["threads"] == torch.get_num_threads()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".tmp-")]  # renamed into place


def test_the_real_measurement_times_both_paths(built):
    from racer_ref.speedups.compiled import time_pass

    model, passes, _ = built
    ms = time_pass(passes, passes.runners[1], 1, reps=2)
    assert set(ms) == {"compiled", "eager"} and all(t > 0 for t in ms.values())
    assert model.forward.compiled is passes and passes.runners[1] is not None  # left as it was


def test_a_size_measured_not_faster_keeps_only_its_measurement(cache_root, monkeypatch):
    """Size 2 measured slower than the eager pass: not used, its package deleted, its
    manifest kept so that later processes neither rebuild nor load it."""
    from racer_ref.speedups.compiled import CompiledPasses

    def slower_at_2(self, runner, size):
        return {"compiled": 3.0, "eager": 2.0} if size == 2 else {"compiled": 1.0, "eager": 2.0}

    monkeypatch.setattr(CompiledPasses, "time_runner", slower_at_2)
    spy = Spy(monkeypatch)
    model = fresh_model(seed=3)
    passes = load_or_compile(model, (1, 2), progress=spy, autotune=False)
    assert spy.builds == 2 and passes.sizes == [1] and passes.not_faster == [2]
    assert passes.report()["not_faster"] == [2] and passes.report()["pass_ms"]["2"] == {"compiled": 3.0, "eager": 2.0}
    assert any("size 2 built" in line and "not faster than the eager pass" in line for line in spy.lines)
    folder = Path(passes.cache_dirs[2])
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["faster"] is False and manifest["package"] is None
    again = load_or_compile(fresh_model(seed=3), (1, 2), progress=spy, autotune=False)
    assert spy.builds == 2 and again.sizes == [1] and again.not_faster == [2]  # nothing rebuilt


def test_loading_leaves_nothing_in_the_temporary_folder(built, cache_root, tmp_path, monkeypatch):
    """AOTInductor's loader unzips each package (hundreds of MB for a real model) under
    $TMPDIR; the cache unzips it into a folder of its own and removes it once loaded."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    passes = load_or_compile(fresh_model(), (1,), build=False)
    assert passes is not None and passes.sizes == [1]
    assert list(scratch.iterdir()) == []
    assert os.environ["TMPDIR"] == str(scratch)  # restored
    assert not [p.name for p in (cache_root / "compiled").iterdir() if p.name.startswith(".load-")]


def test_leftovers_of_dead_processes_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    names = [f".tmp-Llama-1-abc-{dead}", f".load-{dead}-x1y2", f".old-Llama-16-def-{dead}",
             f".tmp-Llama-1-abc-{os.getpid()}", "Llama-1-abc", "Llama-1-abc.lock"]
    for name in names:
        (tmp_path / name).mkdir()
    assert cc.sweep_leftovers(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


def test_greedy_through_loaded_passes_is_lossless(built):
    model, passes, _ = built
    want = greedy_reference(tiny_model("llama"), PROMPT, 30)
    calls = passes.calls
    assert generate(model, None, PROMPT, max_new_tokens=30, capacity=1).token_ids == want
    assert passes.calls > calls


def test_a_second_process_loads_the_cache_without_building(built, cache_root):
    code = (
        "import sys, json, torch\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        f"torch.set_num_threads({torch.get_num_threads()})\n"
        "from models import tiny_model\n"
        "from racer_ref.speedups import compiled_cache as cc, cpu_kernels as ck\n"
        "from racer_ref.speedups.compiled import load_or_compile\n"
        "def no_build(*a, **k): raise AssertionError('built again')\n"
        "cc.export_pass = no_build\n"
        "m = tiny_model('llama'); ck.install_fast_forward(m)\n"
        "p = load_or_compile(m, (1,), build=False)\n"
        "print(json.dumps(p.report()))\n")
    env = dict(os.environ, RACER_REF_CACHE=str(cache_root))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["sizes"] == [1] and report["compile_seconds"] == {"1": 0.0} and report["source"] == "aoti-cache"


def test_without_build_nothing_cached_means_no_passes_and_no_line(built):
    lines = []
    model = fresh_model()
    assert load_or_compile(model, (2,), build=False, progress=lines.append) is None
    assert lines == [] and model.forward.compiled is None


def test_changed_weights_change_the_key_and_build_anew(built, monkeypatch):
    model, passes, _ = built
    other = fresh_model(seed=1)
    assert cc.entry_key(other, 1)["weights"] != cc.entry_key(model, 1)["weights"]
    assert cc.cached_sizes(other, (1,)) == {}  # never the seed-0 entry
    spy = Spy(monkeypatch)
    got = load_or_compile(other, (1,), progress=spy, autotune=False)
    assert spy.builds == 1 and got is not None and got.cache_dirs[1] != passes.cache_dirs[1]
    assert cc.cached_sizes(model, (1,))  # the first entry is still there


@pytest.mark.parametrize("damage", ["garbage", "other torch"])
def test_a_corrupted_or_stale_manifest_is_not_loaded(built, monkeypatch, damage):
    model, passes, _ = built
    manifest_path = Path(passes.cache_dirs[1]) / "manifest.json"
    saved = manifest_path.read_text()
    try:
        if damage == "garbage":
            manifest_path.write_text("{not json")
        else:
            manifest = json.loads(saved)
            manifest["key"]["torch"] = "0.0.1"
            manifest_path.write_text(json.dumps(manifest))
        spy = Spy(monkeypatch)
        assert load_or_compile(fresh_model(), (1,), build=False, progress=spy) is None
        assert spy.builds == 0
    finally:
        manifest_path.write_text(saved)


def test_a_package_that_disagrees_is_rebuilt_not_used(built, monkeypatch):
    """A stale package (here: one whose logits are off) is detected on load and rebuilt."""
    model, passes, _ = built
    from racer_ref.speedups.compiled import CompiledPasses

    real = CompiledPasses.check_runner
    calls = []

    def wrong_first(self, runner, size):
        calls.append(size)
        return 1.0 if len(calls) == 1 else real(self, runner, size)

    monkeypatch.setattr(CompiledPasses, "check_runner", wrong_first)
    spy = Spy(monkeypatch)
    got = load_or_compile(fresh_model(), (1,), progress=spy, autotune=False)
    assert any("differs from the eager path" in line for line in spy.lines)
    assert spy.builds == 1 and got is not None and got.sizes == [1]
    assert cc.cached_sizes(model, (1,))  # the rebuilt entry is in place


def test_a_damaged_package_is_not_loaded(built, tmp_path, monkeypatch):
    model, passes, _ = built
    folder = Path(passes.cache_dirs[1])
    package = folder / "passes.pt2"
    saved = tmp_path / "saved.pt2"
    shutil.copy(package, saved)
    try:
        size = package.stat().st_size
        with open(package, "r+b") as f:  # same length, other bytes: the manifest still matches
            f.seek(0)
            f.write(b"\0" * 4096)
        assert package.stat().st_size == size
        lines = []
        assert load_or_compile(fresh_model(), (1,), build=False, progress=lines.append) is None
        assert len(lines) == 1 and "does not run" in lines[0]
    finally:
        shutil.copy(saved, package)


def test_a_failed_build_leaves_the_eager_path_with_one_line(built, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(cc, "export_pass", broken)
    lines = []
    model = fresh_model(seed=2)
    assert load_or_compile(model, (1,), progress=lines.append, autotune=False) is None
    failures = [line for line in lines if "eager path" in line]
    assert len(failures) == 1 and "no C++ compiler" in failures[0]
    assert model.forward.compiled is None
    assert not [p for p in cc.cache_root().iterdir() if p.name.startswith(".tmp-")]


def test_a_model_without_the_direct_forward_gets_one_line():
    lines = []
    assert load_or_compile(tiny_model("llama"), (1,), progress=lines.append) is None
    assert len(lines) == 1 and "direct forward" in lines[0]


def test_the_switch_turns_it_off(built, monkeypatch):
    monkeypatch.setenv("RACER_REF_COMPILE", "off")
    assert load_or_compile(fresh_model(), (1,), build=False) is None


@pytest.mark.parametrize("sizes", [(), (0,), (2000,), ("x",), (True,)])
def test_bad_sizes_are_refused(sizes):
    with pytest.raises(ValueError):
        load_or_compile(fresh_model(), sizes)
