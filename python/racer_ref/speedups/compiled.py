"""Compiled verify passes on a CPU: inductor with the weights frozen, built once per machine.

Why this exists
---------------
After :mod:`racer_ref.speedups.cpu_kernels` (oneDNN's prepacked linears and a direct forward),
a pass of SmolLM2-135M on a 2-core AMD EPYC still streams the weights at about 11 GB/s, and a
16-token pass costs about 1.7 one-token passes. Inductor, PyTorch's compiler, can do better
*when the weights are constants*: with ``freezing`` and ``max_autotune`` it generates C++
matrix kernels for the exact shapes of the model (its "CPP GEMM template", weights packed once
into the kernel's blocks) and fuses the small operators between them. Measured on that machine
(``benchmarks/bench_capacity.py --compile 1,2,4,8,16``): a one-token pass 38 ms instead of 90,
a 16-token pass 92 ms instead of 143 (stock transformers: 95 and 205).

The price is compile time: inductor's Python lowering of ~210 matrix products takes about two
minutes per pass size on two cores, and it is paid in every process (with frozen weights
inductor's on-disk graph cache does not apply). :func:`compile_passes` (``torch.compile``) pays it in
every process; :func:`load_or_compile` pays it **once per machine**: it compiles each size
ahead of time with AOTInductor into a package on disk (:mod:`racer_ref.speedups.compiled_cache`)
that later processes load in seconds. ``racer-ref`` (``--compile auto``, the default) and the
demo build or load sizes 1 and the capacity; ``racer_ref.generate`` loads what is cached.

How it works
------------
- One compiled graph per *pass size* (rows): the whole model from token ids to logits, the
  weights frozen into it. Shapes are static, so a tree pass of ``n`` nodes runs in the graph of
  the smallest compiled size ``>= n``, padded with dummy rows (their outputs are dropped).
  Calls no graph fits (the prefill, trees larger than every size) take the eager path.
- Attention stays outside the compiled code: an opaque custom operator
  (``racer_ref::cached_attention``) appends the real rows' keys and values to the KV cache and
  runs ``scaled_dot_product_attention`` with the call's tree mask. The cache length and the mask
  change every step; the graph never sees them, so nothing is recompiled. The operator finds
  them in :data:`_CALL`, which :meth:`CompiledPasses.run` fills for the duration of one pass.
- A call that would make ``torch.compile`` recompile (a changed guard) is not compiled again:
  it takes the eager path and counts as a fallback.

Same maths, another summation order: logits equal the eager path's to float rounding (checked
for every size before use; greedy tokens can differ only at near-ties of two logits, as with
any kernel choice). Extra memory: one packed copy of the weights per compiled size. The frozen
weights are snapshots: after changing the model's weights, call :meth:`CompiledPasses.restore`.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

#: The call in progress, read by the attention operator: ``cache``, ``mask`` (``None`` or
#: ``(1, 1, rows, past + rows)`` additive float), ``rows`` (real rows, the rest is padding),
#: ``scale`` and ``gqa``. Filled by :meth:`CompiledPasses.run` and cleared after the pass.
_CALL: Dict[str, Any] = {}


@torch.library.custom_op("racer_ref::cached_attention", mutates_args=())
def cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    """Attention of one layer against the KV cache of the call in :data:`_CALL`.

    Args:
        q: ``(1, heads, size, head_dim)`` float32 queries, rotary applied; rows past
            ``_CALL["rows"]`` are padding.
        k, v: ``(1, kv_heads, size, head_dim)`` the pass's new keys (rotary applied) and values.
        layer: the layer's index in the cache.

    Returns:
        ``(1, heads, size, head_dim)`` contiguous; padding rows are zeros. Only the real rows'
        keys and values are appended to the cache.
    """
    rows = _CALL["rows"]
    keys, values = _CALL["cache"].update(k[:, :, :rows], v[:, :, :rows], layer)
    out = F.scaled_dot_product_attention(q[:, :, :rows], keys, values, attn_mask=_CALL["mask"],
                                         scale=_CALL["scale"], enable_gqa=_CALL["gqa"])
    if rows < q.shape[2]:
        out = F.pad(out, (0, 0, 0, q.shape[2] - rows))
    return out.contiguous()


@cached_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    return q.new_empty(q.shape)


class _Passes(torch.nn.Module):
    """The model's layers from padded token ids to logits, as :class:`FastForward` computes them,
    with attention through :func:`cached_attention` (what ``torch.compile`` compiles)."""

    def __init__(self, fast: Any) -> None:
        super().__init__()
        self.embed = fast.embed
        self.layers = torch.nn.ModuleList(fast.layers)
        self.norm = fast.norm
        self.lm_head = fast.lm_head

    def forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from racer_ref.speedups.cpu_kernels import decoder_logits

        h = self.embed(ids)  # (1, size, hidden)
        return decoder_logits(self.layers, self.norm, self.lm_head, h, cos, sin,
                              torch.ops.racer_ref.cached_attention)  # (1, size, vocab)


class CompiledPasses:
    """The compiled graphs of a model, one per pass size (installed on its :class:`FastForward`).

    Attributes:
        sizes: the compiled pass sizes (rows), ascending.
        compile_seconds: ``{size: seconds}`` spent compiling and checking each.
        max_rel_error: ``{size: max |compiled - eager| / max |eager|}`` of the check.
        calls, fallbacks: passes run compiled / sent to the eager path by a guard failure.
        enabled: ``False`` sends every call to the eager path.
    """

    def __init__(self, fast: Any) -> None:
        self.fast = fast
        self.module = _Passes(fast).eval()
        self.compiled = None
        #: ``{size: runner}``: the AOTInductor packages loaded from the on-disk cache
        #: (:mod:`racer_ref.speedups.compiled_cache`); sizes not in it use :attr:`compiled`.
        self.runners: Dict[int, Any] = {}
        #: ``{size: folder}`` of the cache entries in use.
        self.cache_dirs: Dict[int, str] = {}
        #: ``"torch.compile"`` (:func:`compile_passes`) or ``"aoti-cache"`` (:func:`load_or_compile`).
        self.source = "torch.compile"
        self.sizes: List[int] = []
        self.compile_seconds: Dict[int, float] = {}
        self.max_rel_error: Dict[int, float] = {}
        #: ``{size: {"compiled": ms, "eager": ms}}`` measured when each size was built
        #: (:func:`time_pass`); a size whose compiled pass was not faster is not used.
        self.pass_ms: Dict[int, Dict[str, float]] = {}
        #: sizes measured not faster than the eager path on this CPU (not loaded, eager path).
        self.not_faster: List[int] = []
        self.calls = 0
        self.fallbacks = 0
        self.enabled = True
        self.threads = torch.get_num_threads()
        self.tolerance = TOLERANCE  # (read by racer_ref.speedups.compiled_cache when it checks a package)
        cfg = fast.model.config
        self.scale = float(fast.layers[0].self_attn.scaling)
        self.gqa = int(cfg.num_attention_heads) != int(getattr(cfg, "num_key_value_heads", cfg.num_attention_heads))

    def size_for(self, rows: int) -> Optional[int]:
        """The smallest compiled size ``>= rows``, or ``None``."""
        for size in self.sizes:
            if size >= rows:
                return size
        return None

    def example_inputs(self, size: int) -> Any:
        """``(ids, cos, sin)`` of a pass of ``size`` rows, as :meth:`run` gives the graph."""
        positions = torch.arange(5, 5 + size)[None]
        ids = torch.zeros(1, size, dtype=torch.long)
        cos, sin = self.fast.rotary(self.fast.embed.weight[:1, None], positions)
        return ids, cos[:, None].contiguous(), sin[:, None].contiguous()

    def check_runner(self, runner: Any, size: int) -> float:
        """The relative error of ``runner``'s logits (a pass of ``size`` rows) against the eager
        path's (what a loaded package must pass before use)."""
        saved = self.runners.get(size)
        self.runners[size] = runner
        try:
            return _check(self, size)
        finally:
            if saved is None:
                del self.runners[size]
            else:
                self.runners[size] = saved

    def time_runner(self, runner: Any, size: int) -> Dict[str, float]:
        """:func:`time_pass` of ``runner`` (what a newly built package is measured with)."""
        return time_pass(self, runner, size)

    def run(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: Optional[torch.Tensor],
            cache: Any, size: int, may_compile: bool = False) -> Optional[torch.Tensor]:
        """One pass of ``rows = input_ids.shape[1] <= size`` tokens in the graph of ``size``.

        Args:
            input_ids, position_ids: ``(1, rows)`` int64.
            mask: ``None`` (one row, or rows that see everything) or ``(1, 1, rows, past + rows)``
                additive float32.
            cache: the ``DynamicCache`` to append to.
            size: a compiled size ``>= rows``.
            may_compile: compile when no graph fits the call (only :func:`compile_passes` does).

        Returns:
            ``(1, rows, vocab)`` logits, or ``None`` when the call would recompile (then
            nothing was computed and the cache is unchanged: take the eager path).
        """
        rows = input_ids.shape[1]
        stance = "default" if may_compile else "fail_on_recompile"
        try:
            # Inputs made fresh inside inference mode: the graph's guards expect inference tensors.
            with torch.inference_mode(), torch.compiler.set_stance(stance):
                ids = F.pad(input_ids, (0, size - rows))  # (1, size): padding is token 0, dropped later
                positions = torch.cat([position_ids, position_ids[:, -1:].expand(1, size - rows)], dim=1)
                dummy = self.fast.embed.weight[:1, None]  # (1, 1, hidden): rotary reads its dtype/device
                cos, sin = self.fast.rotary(dummy, positions)  # (1, size, head_dim) each
                _CALL.update(cache=cache, mask=mask, rows=rows, scale=self.scale, gqa=self.gqa)
                runner = self.runners.get(size)
                if runner is not None:  # an AOTInductor package: fixed shapes, never recompiles
                    logits = runner(ids, cos[:, None].contiguous(), sin[:, None].contiguous())
                else:
                    logits = self.compiled(ids.clone(), cos[:, None], sin[:, None])
        except RuntimeError as exc:  # raised before the graph runs: nothing computed
            if "Detected recompile" not in str(exc):
                raise
            self.fallbacks += 1
            self.last_fallback = str(exc)
            return None
        finally:
            _CALL.clear()
        self.calls += 1
        return logits[:, :rows]

    def report(self) -> Dict[str, Any]:
        """JSON-ready: sizes, compile seconds, check errors, calls and fallbacks."""
        return {"sizes": list(self.sizes), "compile_seconds": {str(s): round(t, 1) for s, t in self.compile_seconds.items()},
                "max_rel_error": {str(s): e for s, e in self.max_rel_error.items()},
                "calls": self.calls, "fallbacks": self.fallbacks, "enabled": self.enabled,
                "pass_ms": {str(s): t for s, t in self.pass_ms.items()}, "not_faster": list(self.not_faster),
                "torch_threads": self.threads, "source": self.source,
                "cache_dirs": {str(s): d for s, d in self.cache_dirs.items()}}

    def restore(self) -> None:
        """Stop using the compiled graphs (the model's eager fast path takes every call)."""
        self.enabled = False
        self.compiled = None
        self.runners = {}
        self.sizes = []
        if getattr(self.fast, "compiled", None) is self:
            self.fast.compiled = None


def _check(passes: CompiledPasses, size: int) -> float:
    """Compile ``size`` (its first call) and return the relative error of its logits against
    the eager fast path's on a random pass over a short random prefix."""
    from transformers import DynamicCache

    from racer_ref.tree import tree_attention_mask
    from racer_ref.verify import tree_attention_bias

    fast = passes.fast
    model = fast.model
    gen = torch.Generator().manual_seed(size)
    prefix = torch.randint(0, int(model.config.vocab_size), (1, 5), generator=gen)
    ids = torch.randint(0, int(model.config.vocab_size), (1, size), generator=gen)
    positions = torch.arange(5, 5 + size)[None]
    chain = torch.from_numpy(tree_attention_mask(list(range(-1, size - 1))))  # (size, size) bool
    mask = None if size == 1 else tree_attention_bias(chain, 5, torch.float32)
    outs = []
    for compiled in (False, True):
        cache = DynamicCache(config=model.config)
        with torch.inference_mode():
            fast._forward(prefix, None, None, cache)  # eager prefill
            if compiled:
                got = passes.run(ids, positions, mask, cache, size, may_compile=True)
                if got is None:
                    raise RuntimeError(f"compiled passes: size {size} would not run compiled")
                outs.append(got)
            else:
                outs.append(fast._forward(ids, mask, positions, cache).logits)
            if cache.get_seq_length() != 5 + size:
                raise RuntimeError(f"compiled passes: size {size} left {cache.get_seq_length()} cached tokens, "
                                   f"expected {5 + size}")
    want, got = outs
    scale = float(want.abs().max()) or 1.0
    return float((got - want).abs().max()) / scale


#: The largest relative error of the compiled logits against the eager path's accepted.
TOLERANCE = 1e-4


def time_pass(passes: CompiledPasses, runner: Any, size: int, reps: int = 5) -> Dict[str, float]:
    """Milliseconds per pass of ``size`` rows over a 64-token prefix: ``runner`` (a loaded
    package) against the eager fast path, ``reps`` of each interleaved, the median of each
    (``{"compiled": ms, "eager": ms}``). Whether a compiled size pays for its memory depends on
    the CPU (a 16-row pass: 0.96x of eager on a 2-vCPU Xeon, 1.55x on a 2-core EPYC), so it is
    measured where it runs."""
    from transformers import DynamicCache

    fast = passes.fast
    gen = torch.Generator().manual_seed(size)
    prefix = torch.randint(0, int(fast.model.config.vocab_size), (1, 64), generator=gen)
    ids = torch.randint(0, int(fast.model.config.vocab_size), (1, size), generator=gen)
    positions = torch.arange(64, 64 + size)[None]
    from racer_ref.tree import tree_attention_mask
    from racer_ref.verify import tree_attention_bias

    chain = torch.from_numpy(tree_attention_mask(list(range(-1, size - 1))))  # (size, size) bool
    mask = None if size == 1 else tree_attention_bias(chain, 64, torch.float32)
    cache = DynamicCache(config=fast.model.config)
    saved = passes.runners.get(size)
    passes.runners[size] = runner
    times: Dict[str, List[float]] = {"compiled": [], "eager": []}
    try:
        with torch.inference_mode():
            fast._forward(prefix, None, None, cache)
            for rep in range(reps + 1):  # the first round warms up and is not counted
                for kind in ("compiled", "eager"):
                    tic = time.perf_counter()
                    if kind == "compiled":
                        passes.run(ids, positions, mask, cache, size)
                    else:
                        fast._forward(ids, mask, positions, cache)
                    if rep:
                        times[kind].append(1000 * (time.perf_counter() - tic))
                    cache.crop(-size)  # back to the prefix (a negative count: every transformers version)
    finally:
        if saved is None:
            del passes.runners[size]
        else:
            passes.runners[size] = saved
    return {kind: round(sorted(ts)[len(ts) // 2], 2) for kind, ts in times.items()}


def _pass_sizes(sizes: Sequence[int]) -> List[int]:
    """``sizes`` as sorted distinct ints in 1..1024; ``ValueError`` naming ``sizes`` otherwise."""
    try:
        wanted = sorted({int(s) for s in sizes})
    except (TypeError, ValueError):
        raise ValueError(f"sizes: expected ints in 1..1024, got {sizes!r}") from None
    if not wanted or any(s < 1 or s > 1024 for s in wanted) or any(isinstance(s, bool) for s in sizes):
        raise ValueError(f"sizes: expected ints in 1..1024, got {sizes!r}")
    return wanted


def compile_passes(model: Any, sizes: Sequence[int], autotune: bool = True) -> CompiledPasses:
    """Compile ``model``'s passes of ``sizes`` rows with inductor (weights frozen) and route
    the calls that fit them through the compiled graphs.

    Needs the direct forward of :func:`racer_ref.speedups.cpu_kernels.install_fast_forward`
    (``speed_up_model`` installs it) and a C++ compiler (inductor's). Each size takes about two
    minutes on two cores for SmolLM2-135M (seconds for a tiny test model).

    Args:
        model: a causal LM on the CPU, float32, with the direct forward installed.
        sizes: pass sizes in rows (ints in 1..1024), e.g. ``(1, 16)`` for plain steps and trees
            of up to 16 nodes.
        autotune: let inductor time its C++ matrix kernels against ATen's (``max_autotune``);
            ``False`` compiles faster and fuses only the small operators.

    Returns:
        the :class:`CompiledPasses` (also ``model.forward.compiled``).

    Raises:
        ValueError: bad ``sizes``; a model without the direct forward, not float32 or not on the CPU.
        RuntimeError: a compiled size disagrees with the eager path beyond :data:`TOLERANCE`
            (nothing is installed then).
    """
    from racer_ref.speedups.cpu_kernels import FastForward

    wanted = _pass_sizes(sizes)
    fast = model.__dict__.get("forward")
    if not isinstance(fast, FastForward):
        raise ValueError("model: compile_passes needs the direct forward (speed_up_model or install_fast_forward first)")
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("model: compile_passes needs a float32 model on the CPU")
    import torch._inductor.config as inductor

    passes = CompiledPasses(fast)
    patches = {"freezing": True}
    if autotune:
        patches.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN",
                       autotune_num_choices_displayed=0,  # quiet: no timing table per product
                       max_autotune_report_choices_stats=False)
    # One graph per size: the compiled code object may hold that many (dynamo's limit is 8).
    limit = {"recompile_limit": max(8, len(wanted) + 1)}
    with inductor.patch(patches), torch._dynamo.config.patch(limit):
        passes.compiled = torch.compile(passes.module, dynamic=False, options=None)
        passes.sizes = wanted
        for size in wanted:
            tic = time.perf_counter()
            error = _check(passes, size)
            passes.compile_seconds[size] = time.perf_counter() - tic
            passes.max_rel_error[size] = error
            if not error <= TOLERANCE:
                passes.restore()
                raise RuntimeError(f"compiled passes: size {size} differs from the eager path "
                                   f"(relative error {error:.2e} > {TOLERANCE})")
    passes.calls = passes.fallbacks = 0
    fast.compiled = passes
    return passes


def _prepared(model: Any) -> Any:
    """The model's :class:`FastForward`, or a ``ValueError`` saying why it cannot be compiled."""
    from racer_ref.speedups.cpu_kernels import FastForward

    fast = model.__dict__.get("forward")
    if not isinstance(fast, FastForward):
        raise ValueError("the model has no direct forward (speed_up_model or install_fast_forward first)")
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("the model is not float32 on the CPU")
    return fast


def load_or_compile(model: Any, sizes: Sequence[int], build: bool = True,
                    progress: Optional[Callable[[str], None]] = None,
                    autotune: bool = True) -> Optional[CompiledPasses]:
    """The compiled passes of ``sizes`` rows, **built once per machine**: loaded from the
    on-disk cache of :mod:`racer_ref.speedups.compiled_cache` (seconds), or, with ``build``,
    compiled ahead of time with AOTInductor into it first (about two minutes per size on two
    cores for SmolLM2-135M; a progress line says what is built and how long it took). Every
    loaded size is checked against the eager path first (one pass); a stale or damaged entry is
    rebuilt (``build``) or skipped.

    Args:
        model: a causal LM on the CPU, float32, with the direct forward installed
            (``speed_up_model`` installs it).
        sizes: pass sizes in rows (ints in 1..1024), e.g. ``(1, 16)``.
        build: compile the sizes not in the cache; ``False`` only loads what is there.
        progress: called with each progress line (default: printed on stderr).
        autotune: as in :func:`compile_passes` (part of what is built, not of the key: leave
            it ``True`` outside tests).

    Returns:
        the :class:`CompiledPasses` (also ``model.forward.compiled``) of the sizes that loaded
        or built and were measured faster than the eager pass when built (``sizes``; the
        others in ``not_faster``), or ``None`` when none loaded or built: then the model keeps
        the eager path and, unless nothing was cached and ``build`` is ``False``, one progress
        line said why.

    Raises:
        ValueError: bad ``sizes``.
    """
    from racer_ref.speedups import compiled_cache

    say = progress or compiled_cache.print_to_stderr
    wanted = _pass_sizes(sizes)
    try:
        fast = _prepared(model)
    except ValueError as exc:
        if build:
            say(f"compiled passes: off, eager path ({exc})")
        return None
    if os.environ.get("RACER_REF_COMPILE", "").strip().lower() in ("off", "0", "false", "no"):
        return None
    passes = CompiledPasses(fast)
    passes.source = "aoti-cache"
    try:
        weights = compiled_cache.weights_hash(model)
        for size in wanted:
            runner = compiled_cache.load_or_build(passes, size, weights, build, say, autotune=autotune)
            if runner is not None:
                passes.runners[size] = runner
    except Exception as exc:  # no C++ compiler, an export or inductor failure, an unwritable cache
        say(f"compiled passes: off, eager path (the build failed: {type(exc).__name__}: {str(exc)[:300]})")
        return None
    if not passes.runners and not passes.not_faster:
        return None
    # (Sizes measured not faster stay off: with none left, every pass takes the eager path,
    # and report()["not_faster"] says why.)
    passes.sizes = sorted(passes.runners)
    passes.calls = passes.fallbacks = 0
    fast.compiled = passes
    return passes


def default_sizes(capacity: Any = None) -> List[int]:
    """The pass sizes compiled by default: plain steps (1) and trees of up to ``capacity`` nodes
    (an int; otherwise the CPU default capacity, 16)."""
    from racer_ref.reference.limits import DEFAULT_CPU_CAPACITY

    big = capacity if isinstance(capacity, int) and not isinstance(capacity, bool) and 1 <= capacity <= 1024 \
        else DEFAULT_CPU_CAPACITY
    return sorted({1, int(big)})


def compile_by_default(model: Any, capacity: Any = None, build: bool = True,
                       progress: Optional[Callable[[str], None]] = None) -> Optional[CompiledPasses]:
    """What ``racer-ref`` (``--compile auto``, the default), the demo and ``racer_ref.generate``
    do: :func:`load_or_compile` of :func:`default_sizes` on a real model the CPU fast path
    prepared (a float32 model on the CPU with the direct forward and at least
    :data:`racer_ref.speedups.cpu_kernels.DEFAULT_MIN_PARAMETERS` weights); anything else,
    ``$RACER_REF_COMPILE=off`` or ``$RACER_REF_CPU_KERNELS=off`` is left on the eager path
    silently. ``build=False`` (``generate()``) only loads what an earlier process built."""
    from racer_ref.speedups.cpu_kernels import DEFAULT_MIN_PARAMETERS, FastForward, switched_off

    if switched_off() or os.environ.get("RACER_REF_COMPILE", "").strip().lower() in ("off", "0", "false", "no"):
        return None
    fast = model.__dict__.get("forward")
    if not isinstance(fast, FastForward) or not fast.enabled:
        return None
    if fast.compiled is not None:
        return fast.compiled
    params = list(model.parameters())
    if (any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params)
            or sum(p.numel() for p in params) < DEFAULT_MIN_PARAMETERS):
        return None
    return load_or_compile(model, default_sizes(capacity), build=build, progress=progress)


def load_cached_passes(model: Any) -> str:
    """What ``racer_ref.generate`` adds to the CPU fast path: :func:`compile_by_default` with
    ``build=False`` (only what an earlier process built is loaded); returns the phrase for
    its one log line (:func:`racer_ref.speedups.cpu_kernels.speed_up_by_default`)."""
    import logging

    passes = compile_by_default(model, build=False, progress=logging.getLogger("racer_ref").warning)
    if passes is not None and passes.sizes:
        return f"; compiled passes of {passes.sizes} tokens from the cache"
    if passes is not None:
        return f"; compiled passes of {passes.not_faster} tokens not used (not faster than eager on this CPU)"
    return ("; no compiled passes cached (racer-ref generate, or racer_ref.speedups.compiled."
            "load_or_compile(model, (1, 16)), builds them once per machine)")
