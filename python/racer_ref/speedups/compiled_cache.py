"""Compiled CPU passes built once per machine: AOTInductor packages kept on disk.

:func:`racer_ref.speedups.compiled.compile_passes` compiles with ``torch.compile`` in every
process (about two minutes per pass size on two cores: with frozen weights neither the
AOTAutograd cache nor inductor's graph cache applies). This module compiles each pass size
*ahead of time* instead, with the same inductor options (weights frozen, C++ matrix kernels
timed against ATen's), into an AOTInductor package (a ``.pt2`` zip holding a shared library
and, beside it, the weights freezing packed for it), and keeps it under the project's cache
folder::

    $RACER_REF_CACHE/compiled/<key>/passes.pt2 + manifest.json    (default ~/.cache/racer-ref)

A later process loads the package (:func:`load_pass`: the library, the packed weights from the
zip, and the model's own weights shared, not copied) and checks it before use. What a package depends on is in its key, so another model, dtype, pass
size, torch version, CPU, thread count or version of this code gets a package of its own:

- ``weights``: a BLAKE2 hash of every parameter's bytes, names and shapes (about a second for
  SmolLM2-135M; after a fine-tune the key changes);
- ``dtype``, ``size`` (rows), ``torch`` version, ``cpu`` (model name and
  ``torch.backends.cpu.get_cpu_capability()``), ``threads`` (inductor writes the thread count
  into its kernels), ``code`` (a hash of the sources that define the pass).

Never loaded wrongly: a manifest that does not parse or whose fields differ from the wanted
key, a package that does not load, or logits that differ from the eager path's by more than
:data:`racer_ref.speedups.compiled.TOLERANCE` on one random pass (checked on every load), and
the entry is rebuilt (or, when building is not allowed, not used). Written atomically (a
temporary folder renamed into place) under a file lock, so two processes never build the same
entry at once: the second waits and loads what the first built.

The attention operator ``racer_ref::cached_attention`` stays opaque in the package: the
shared library calls it through PyTorch's dispatcher, so :mod:`racer_ref.speedups.compiled`
(which registers it) is imported before any package loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence

import torch

#: Bumped when the layout of an entry changes (old entries are then simply not found).
FORMAT = 3

Progress = Callable[[str], None]


def print_to_stderr(line: str) -> None:
    """The default progress: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


def cache_root() -> Path:
    """``<cache>/compiled``, where ``<cache>`` is ``$RACER_REF_CACHE`` or ``~/.cache/racer-ref``
    (the folder that also keeps the converted default model)."""
    root = os.environ.get("RACER_REF_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "racer-ref") / "compiled"


def weights_hash(model: Any) -> str:
    """A hash of the model's parameters and buffers: names, shapes, dtypes and every byte."""
    h = hashlib.blake2b(digest_size=16)
    h.update(type(model).__name__.encode())
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
            t = t.detach()
            if t.device.type != "cpu" or t.dtype == torch.bfloat16:
                t = t.float().cpu()
            h.update(t.contiguous().view(-1).numpy().data)
    return h.hexdigest()


def _code_hash() -> str:
    """A hash of the sources that define the pass, ``compiled.py`` and ``cpu_kernels.py`` next
    to this file (read as files, not imported: a change to either rebuilds)."""
    h = hashlib.blake2b(digest_size=8)
    for name in ("compiled.py", "cpu_kernels.py"):
        h.update(Path(__file__).with_name(name).read_bytes())
    return h.hexdigest()


def entry_key(model: Any, size: int, weights: Optional[str] = None) -> Dict[str, Any]:
    """The fields a package of ``size`` rows for ``model`` depends on (see the module doc)."""
    from racer_ref.speedups.cpu_kernels import cpu_name

    dtype = next(model.parameters()).dtype
    return {"format": FORMAT, "model": type(model).__name__, "weights": weights or weights_hash(model),
            "dtype": str(dtype).replace("torch.", ""), "size": int(size), "torch": torch.__version__,
            "cpu": f"{cpu_name()} / {torch.backends.cpu.get_cpu_capability()}",
            "threads": torch.get_num_threads(), "code": _code_hash()}


def entry_dir(key: Dict[str, Any]) -> Path:
    """``<cache root>/<digest of the key>``."""
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=10).hexdigest()
    return cache_root() / f"{key['model']}-{key['size']}-{digest}"


def read_manifest(folder: Path, key: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The entry's manifest when it exists, parses and matches ``key`` field for field, and the
    package it names is there with the size it records; else ``None``."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if not isinstance(manifest, dict) or manifest.get("key") != key:
            return None
        if not isinstance(manifest["faster"], bool) or not isinstance(manifest["pass_ms"], dict):
            return None
        if manifest["faster"] and (folder / manifest["package"]).stat().st_size != manifest["bytes"]:
            return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``<folder>.lock`` (another process building the entry waits)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(str(folder) + ".lock", "a+") as f:
        try:
            import fcntl
        except ImportError:  # (no fcntl: no lock; the rename below is still atomic)
            yield
            return
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def sweep_leftovers(root: Optional[Path] = None) -> int:
    """Remove the temporary folders (``.tmp-*``, ``.load-*``, ``.old-*``) that processes which
    are no longer running left in the cache root (a build or load killed half-way); returns
    how many were removed."""
    removed = 0
    root = root or cache_root()
    for path in root.glob(".*-*") if root.is_dir() else ():
        kind, _, rest = path.name[1:].partition("-")
        pid = rest.split("-")[0] if kind == "load" else rest.rsplit("-", 1)[-1]
        if kind not in ("tmp", "load", "old") or not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (ours always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (exists, another user's)
        return True
    return True


def _remove(folder: Path) -> None:
    """Delete an entry folder (moved aside first, so that no reader sees half of it)."""
    if folder.exists():
        aside = folder.with_name(f".old-{folder.name}-{os.getpid()}")
        os.replace(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)


def export_pass(passes: Any, size: int, package: Path, autotune: bool = True) -> None:
    """Export the pass of ``size`` rows (``torch.export``, the attention operator opaque) and
    compile it with AOTInductor into ``package``: weights frozen, and kept beside the shared
    library (``package_constants_in_so=False``), one pickled tensor each, so that
    :func:`load_pass` can share the model's own instead of loading a copy."""
    import torch._inductor

    fast = passes.fast
    handle = getattr(fast.model, "racer_cpu_kernels", None)
    ids, cos, sin = passes.example_inputs(size)
    configs: Dict[str, Any] = {"freezing": True, "aot_inductor.package_constants_in_so": False,
                               "aot_inductor.package_constants_on_disk_format": "pickle_weights"}
    if autotune:
        configs.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN",
                       autotune_num_choices_displayed=0, max_autotune_report_choices_stats=False)
    enabled = getattr(handle, "enabled", None)
    try:
        if handle is not None:
            handle.enabled = False  # plain linears in the graph: inductor packs the frozen weights itself
        with torch.no_grad():
            program = torch.export.export(passes.module, (ids, cos, sin), strict=False)
    finally:
        if handle is not None:
            handle.enabled = enabled
    scratch = package.parent / "build"  # inductor's build folder, inside the entry's temporary one
    try:
        with _temp_dirs(scratch):
            torch._inductor.aoti_compile_and_package(program, package_path=str(package), inductor_configs=configs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load_pass(package: Path, module: torch.nn.Module) -> Any:
    """The callable of a package (``runner(ids, cos, sin) -> logits``), its weights shared with
    ``module`` (the module the pass was exported from).

    A frozen package needs two kinds of constants: the module's own parameters (about half of
    them by size for SmolLM2-135M: 514 MB) and those freezing made from them (weights packed
    for the matrix kernels: another 514 MB). The first kind is handed over as the module
    holds it, without a copy; only the second is read from the zip. The runner keeps both
    alive (``runner.constants``: AOTInductor stores only their pointers).
    """
    from torch.export.pt2_archive._package import load_pt2

    # racer_ref::cached_attention must be registered first: every caller comes through
    # racer_ref.speedups.compiled, which registers it when it is imported.
    # The loader unzips the shared library into a fresh ``$TMPDIR/aotinductor_*`` folder that
    # it does not always remove (never when the process is killed). Unzipped into a folder of
    # ours instead, removed as soon as the library is loaded (a loaded library does not need
    # its file).
    where = Path(tempfile.mkdtemp(prefix=f".load-{os.getpid()}-", dir=package.parent.parent))
    try:
        with _temp_dirs(where):
            runner = load_pt2(str(package)).aoti_runners["model"]
    finally:
        shutil.rmtree(where, ignore_errors=True)
    own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    constants: Dict[str, torch.Tensor] = {}
    with zipfile.ZipFile(package) as archive:
        config = next(n for n in archive.namelist() if n.endswith("data/aotinductor/model/weights_config.json"))
        folder = config[: -len("aotinductor/model/weights_config.json")] + "weights/"
        read: Dict[str, torch.Tensor] = {}
        for name, (file, shape, stride, offset) in json.loads(archive.read(config)).items():
            mine = own.get(name)
            if (mine is not None and list(mine.shape) == shape and list(mine.stride()) == stride
                    and offset == 0):
                constants[name] = mine.detach()  # the module's tensor itself (same storage)
                continue
            if file not in read:
                read[file] = torch.load(io.BytesIO(archive.read(folder + file)), weights_only=True)
            constants[name] = read[file].as_strided(shape, stride, offset)
    runner.load_constants(constants, check_full_update=True, user_managed=True)
    runner.constants = constants
    return runner


@contextlib.contextmanager
def _temp_dirs(where: Path) -> Iterator[None]:
    """``$TMPDIR`` (read by AOTInductor's C++ loader) and ``$TORCHINDUCTOR_CACHE_DIR`` (where
    inductor writes the sources and libraries it builds) pointed into ``where`` for the block,
    then restored: what they receive is removed with ``where``, not left in ``/tmp``."""
    names = {"TMPDIR": where, "TORCHINDUCTOR_CACHE_DIR": where / "inductor"}
    saved = {name: os.environ.get(name) for name in names}
    try:
        os.environ.update({name: str(path) for name, path in names.items()})
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_or_build(passes: Any, size: int, weights: str, build: bool, progress: Progress,
                  autotune: bool = True) -> Optional[Any]:
    """The checked runner of ``size`` rows for ``passes``: loaded from the cache, or (``build``)
    compiled into it first. ``None`` when there is none (with one progress line saying why) or
    when the build measured the compiled pass no faster than the eager one on this CPU (the
    entry then keeps only its manifest, so that the size is neither rebuilt nor loaded)."""
    tolerance = passes.tolerance  # racer_ref.speedups.compiled.TOLERANCE
    sweep_leftovers()
    key = entry_key(passes.fast.model, size, weights)
    folder = entry_dir(key)

    def checked(where: Path, manifest: Dict[str, Any]) -> Optional[Any]:
        try:
            runner = load_pass(where / manifest["package"], passes.module)
            error = passes.check_runner(runner, size)
        except Exception as exc:  # a package that does not load or run: stale or damaged
            progress(f"compiled passes: the size-{size} package in {where} does not run "
                     f"({type(exc).__name__}: {str(exc)[:200]})")
            return None
        if not error <= tolerance:
            progress(f"compiled passes: the size-{size} package in {where} differs from the eager path "
                     f"(relative error {error:.1e})")
            return None
        passes.max_rel_error[size] = error
        return runner

    def use(manifest: Dict[str, Any], seconds: float) -> Optional[Any]:
        """The runner of a matching entry (``None`` for a size measured not faster)."""
        passes.pass_ms[size] = manifest["pass_ms"]
        passes.compile_seconds[size] = seconds
        passes.cache_dirs[size] = str(folder)
        if not manifest["faster"]:
            passes.not_faster.append(size)
            return None
        return checked(folder, manifest)

    manifest = read_manifest(folder, key)
    if manifest is not None:
        runner = use(manifest, 0.0)
        if runner is not None or not manifest["faster"]:
            return runner
    if not build:
        return None
    rejected = manifest
    with build_lock(folder):
        manifest = read_manifest(folder, key)  # built by another process while we waited?
        if manifest is not None and manifest != rejected:
            runner = use(manifest, 0.0)
            if runner is not None or not manifest["faster"]:
                return runner
        tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        progress(f"compiled passes: building the size-{size} pass of this {key['model']} with AOTInductor "
                 f"(once per machine; about 2 min per size for SmolLM2-135M on 2 cores; {torch.get_num_threads()} threads) "
                 f"into {folder} ...")
        tic = time.perf_counter()
        try:
            export_pass(passes, size, tmp / "passes.pt2", autotune=autotune)
            nbytes = (tmp / "passes.pt2").stat().st_size
            runner = checked(tmp, {"package": "passes.pt2"})
            if runner is None:
                shutil.rmtree(tmp, ignore_errors=True)
                return None
            ms = passes.time_runner(runner, size)
            faster = ms["compiled"] < ms["eager"]
            if not faster:  # not worth its memory here: keep the measurement, not the package
                runner = None
                (tmp / "passes.pt2").unlink()
            manifest = {"key": key, "package": "passes.pt2" if faster else None, "bytes": nbytes if faster else 0,
                        "faster": faster, "pass_ms": ms, "build_seconds": round(time.perf_counter() - tic, 1),
                        "built": time.strftime("%Y-%m-%d %H:%M:%S")}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            _remove(folder)  # a stale entry under the same name
            os.replace(tmp, folder)  # atomic: readers see no entry or a whole one
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    seconds = time.perf_counter() - tic
    passes.compile_seconds[size] = seconds
    passes.cache_dirs[size] = str(folder)
    passes.pass_ms[size] = ms
    verdict = (f"{manifest['bytes'] / 2**20:.0f} MB on disk; later processes load it in seconds" if faster else
               "not faster than the eager pass on this CPU, so not used (the measurement is kept; delete "
               f"{folder} to measure again)")
    progress(f"compiled passes: size {size} built in {seconds:.0f} s; a pass takes {ms['compiled']:.1f} ms "
             f"compiled, {ms['eager']:.1f} ms eager: {verdict}")
    if not faster:
        passes.not_faster.append(size)
    return runner


def cached_sizes(model: Any, sizes: Sequence[int]) -> Dict[int, Path]:
    """Which of ``sizes`` have an entry for ``model`` (manifest match only; not loaded)."""
    weights = weights_hash(model)
    out = {}
    for size in sizes:
        folder = entry_dir(entry_key(model, size, weights))
        if read_manifest(folder, entry_key(model, size, weights)) is not None:
            out[int(size)] = folder
    return out
