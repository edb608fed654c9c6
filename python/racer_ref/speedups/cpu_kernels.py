"""CPU kernels for the target's linear layers, chosen by measurement when the model is loaded.

Why this exists
---------------
Speculative decoding pays off when a verify pass over ``n`` draft-tree nodes costs little more
than a one-token step. For a small model on a CPU almost all of a pass is matrix products
against the weights (SmolLM2-135M: 210 linear layers plus the 49,152-row output layer), and
reading the ~540 MB of fp32 weights once is the floor of every pass. How close a kernel comes to
that floor depends on the CPU, the row count and the library:

- PyTorch's stock ``F.linear`` (MKL ``sgemm``) re-packs the whole weight matrix on every call
  with 4 or more rows: a 2-16 row product costs 1.5-2x a 1-row one.
- MKL's packed GEMM (``torch.ops.mkl._mkl_linear``, the weights packed once) removes that on
  the Intel CPU where it was tuned, and does nothing on an AMD EPYC.
- oneDNN's prepacked weights (``torch.ops.mkldnn._reorder_linear_weight`` +
  ``torch.ops.mkldnn._linear_pointwise``, what ``torch.compile`` uses for frozen linears on
  CPU) measured fastest on a 2-core AMD EPYC (AVX2, no AVX-512): 1 row about 20% cheaper than
  stock, 2 rows as cheap as 1, the output layer 2-3x cheaper for 4-64 rows.

No kernel is best everywhere, so :func:`apply_cpu_kernels` measures the candidates on the loaded
model, on this machine, for each *shape class* of call (:data:`SHAPE_CLASSES`: the one-token
steps, the tree passes, the prefill) and each *group* of layers (the transformer blocks' linears
and the output layer), and routes every later call of that class to the winner. It keeps what
it measured and what it chose (:meth:`CpuKernels.report`, recorded in ``racer-ref bench``'s
``meta.json``).

What it changes and what it does not
------------------------------------
- Same maths, another summation order: logits differ from stock by float rounding (checked on
  every layer before the model is touched, and reported as ``max_rel_error``); greedy tokens
  equal stock's except at float near-ties of two logits.
- Extra memory: one packed copy of the weights per kernel in use (about the fp32 weights' size).
- Only CPU, float32, inference: calls that autograd records, calls under ``torch.autocast``,
  other dtypes or devices take ``nn.Linear``'s own path. Only layers whose forward is
  ``nn.Linear.forward`` itself are routed (a subclass with its own forward keeps it).
- The packed copies are snapshots: call :meth:`CpuKernels.restore` before changing weights or
  before ``copy.deepcopy`` / ``torch.save(model)`` (``state_dict()`` is unaffected).

The one opt-out switch: ``apply_cpu_kernels(model, enabled=False)`` (or the environment
variable ``RACER_REF_CPU_KERNELS=off``) leaves every layer on PyTorch's stock path.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

#: The candidate kernels, in order of preference when they measure the same.
KERNELS = ("stock", "onednn", "mkl")
#: Shape classes of a call, by its row count (tokens in the pass): name -> (min rows, max rows).
SHAPE_CLASSES: Dict[str, Tuple[int, Optional[int]]] = {
    "1": (1, 1),          # one-token steps: plain decoding, and RACER steps with only a root
    "2-64": (2, 64),      # verify passes over a draft tree
    "65+": (65, None),    # the prefill of a prompt
}
#: Row counts timed for each class (their times are summed).
TIMED_ROWS: Dict[str, Tuple[int, ...]] = {"1": (1,), "2-64": (4, 16, 48), "65+": (128,)}
#: Layer groups that get their own choice: the blocks' linears, and the output layer (lm_head).
GROUPS = ("layers", "lm_head")
#: A kernel other than stock must beat stock's time by this fraction to be chosen: under noise
#: a tie goes to the stock path.
DEFAULT_MARGIN = 0.03
#: The environment variable of the opt-out switch (``off``, ``0``, ``false`` or ``no``).
ENV_SWITCH = "RACER_REF_CPU_KERNELS"
#: The largest relative error (max abs difference / max abs stock output, per layer) accepted.
TOLERANCE = 1e-4
#: Seconds of measuring after which no further timing round starts (at least one always runs).
DEFAULT_BUDGET_S = 3.0
#: Weights timed per group and round, in bytes: a sample of the layers spread over the model,
#: large enough (several times any CPU cache) that the weights stream from memory as in a pass.
TIMED_BYTES = 128 * 2**20
#: MKL's packed layout is built for a batch size; it is correct for any (measured fastest so).
_MKL_PACK_ROWS = 64

# A function that times one kernel on one row count: (group, kernel, rows) -> seconds.
Measure = Callable[[str, str, int], float]


def switched_off() -> bool:
    """Whether ``$RACER_REF_CPU_KERNELS`` says ``off`` (also ``0``, ``false``, ``no``)."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def shape_class(rows: int) -> str:
    """The :data:`SHAPE_CLASSES` name for a call with ``rows`` rows (``rows >= 1``)."""
    for name, (low, high) in SHAPE_CLASSES.items():
        if rows >= low and (high is None or rows <= high):
            return name
    raise ValueError(f"rows: expected an int >= 1, got {rows!r}")


def available_kernels() -> List[str]:
    """The :data:`KERNELS` this PyTorch build has (``stock`` always)."""
    out = ["stock"]
    dnn = getattr(torch.ops, "mkldnn", None)
    if (torch.backends.mkldnn.is_available() and hasattr(dnn, "_reorder_linear_weight")
            and hasattr(dnn, "_linear_pointwise")):
        out.append("onednn")
    mkl = getattr(torch.ops, "mkl", None)
    if torch.backends.mkl.is_available() and hasattr(mkl, "_mkl_linear") and hasattr(mkl, "_mkl_reorder_linear_weight"):
        out.append("mkl")
    return out


def _routable(model: Any) -> List[torch.nn.Linear]:
    """The layers we may route: plain ``nn.Linear`` (own forward not overridden), non-empty."""
    seen, out = set(), []
    for m in model.modules():
        if (isinstance(m, torch.nn.Linear) and type(m).forward is torch.nn.Linear.forward
                and m.in_features > 0 and m.out_features > 0 and id(m) not in seen):
            seen.add(id(m))
            out.append(m)
    return out


def cpu_kernel_support(model: Any) -> Tuple[bool, str]:
    """Whether :func:`apply_cpu_kernels` can do anything for ``model``, and why not.

    Returns:
        ``(True, "")`` for a model on the CPU with float32 linear layers and at least one
        packed kernel in this PyTorch build, else ``(False, reason)``.
    """
    params = list(model.parameters())
    if not params:
        return False, "the model has no parameters"
    if any(p.device.type != "cpu" for p in params):
        return False, "the model is not on the CPU"
    layers = _routable(model)
    if not layers:
        return False, "the model has no nn.Linear layers"
    if any(m.weight.dtype != torch.float32 for m in layers):
        return False, "the model's linear layers are not float32"
    if len(available_kernels()) < 2:
        return False, "this PyTorch build has neither oneDNN nor MKL packed linear kernels"
    return True, ""


def _pack(kernel: str, weight: torch.Tensor) -> Optional[torch.Tensor]:
    """The packed copy of ``weight`` that ``kernel`` needs (``None`` for stock)."""
    if kernel == "onednn":
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach())
    if kernel == "mkl":
        return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), _MKL_PACK_ROWS)
    return None


def _product(kernel: str, x2d: torch.Tensor, layer: torch.nn.Linear, packed: Optional[torch.Tensor]) -> torch.Tensor:
    """``x2d @ layer.weight.T + layer.bias`` with ``kernel``; ``x2d`` is ``(rows, in)`` contiguous."""
    if kernel == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x2d, packed, layer.bias, "none", [], "")
    if kernel == "mkl":
        return torch.ops.mkl._mkl_linear(x2d, packed, layer.weight, layer.bias, x2d.shape[0])
    return F.linear(x2d, layer.weight, layer.bias)


def choose_kernels(timings: Dict[str, Dict[str, Dict[str, float]]], margin: float = DEFAULT_MARGIN
                   ) -> Dict[str, Dict[str, str]]:
    """The kernel for each group and shape class: the fastest, unless it beats stock by less
    than ``margin`` (a fraction of stock's time), then stock.

    Args:
        timings: ``{group: {shape class: {kernel: seconds}}}``, as measured by
            :func:`apply_cpu_kernels` (``stock`` should be among the kernels).
        margin: in ``[0, 1)``.

    Returns:
        ``{group: {shape class: kernel}}``.

    Raises:
        ValueError: ``margin`` out of range, or a class with no timings.
    """
    if not 0 <= margin < 1:
        raise ValueError(f"margin: expected a float in [0, 1), got {margin!r}")
    choice: Dict[str, Dict[str, str]] = {}
    for group, classes in timings.items():
        choice[group] = {}
        for name, times in classes.items():
            if not times:
                raise ValueError(f"timings: no kernel timed for {group} / {name}")
            # Fastest first; among equal times the earlier kernel of KERNELS.
            order = sorted(times, key=lambda k: (times[k], KERNELS.index(k) if k in KERNELS else len(KERNELS)))
            best = order[0]
            if "stock" in times and best != "stock" and times[best] > (1 - margin) * times["stock"]:
                best = "stock"
            choice[group][name] = best
    return choice


class CpuKernels:
    """What :func:`apply_cpu_kernels` did to a model, and the way back.

    Attributes:
        choice: ``{group: {shape class: kernel}}`` in use (empty when nothing was applied).
        timings: ``{group: {shape class: {kernel: seconds}}}``: the fastest of the timed rounds
            of each kernel over all the group's layers, summed over :data:`TIMED_ROWS`.
        errors: ``{kernel: max relative error}`` against stock over all layers' self-check.
        reason: why nothing was applied (``""`` when something was).
        enabled: set to ``False`` to route every call to the stock path for a while (the
            benchmarks time both ways interleaved); ``True`` again to use the choice.
    """

    def __init__(self, choice: Dict[str, Dict[str, str]], timings: Dict[str, Dict[str, Dict[str, float]]],
                 errors: Dict[str, float], reason: str, rounds: int, seconds: float) -> None:
        self.choice = choice
        self.timings = timings
        self.errors = errors
        self.reason = reason
        self.rounds = rounds
        self.seconds = seconds  # wall time spent packing, checking and measuring
        self.enabled = bool(choice)
        self.layers: List[torch.nn.Linear] = []

    def kernel_for(self, group: str, rows: int) -> str:
        """The kernel a call of ``rows`` rows in ``group`` uses now."""
        if not self.enabled or group not in self.choice:
            return "stock"
        return self.choice[group].get(shape_class(rows), "stock")

    def restore(self) -> None:
        """Give every layer its original forward back and free the packed copies."""
        for layer in self.layers:
            layer.__dict__.pop("forward", None)  # the instance attribute shadowed the class's
            layer.__dict__.pop("_racer_packed", None)
        self.layers = []
        self.choice = {}
        self.enabled = False

    def report(self) -> Dict[str, Any]:
        """A JSON-ready summary for ``meta.json``: choice, timings (ms), errors, the CPU."""
        return {
            "applied": bool(self.layers),
            "enabled": self.enabled,
            "reason": self.reason,
            "choice": self.choice,
            "timings_ms": {g: {c: {k: round(s * 1e3, 3) for k, s in t.items()} for c, t in cl.items()}
                           for g, cl in self.timings.items()},
            "timed_rows": {c: list(r) for c, r in TIMED_ROWS.items()},
            "rounds": self.rounds,
            "max_rel_error": self.errors,
            "layers": len(self.layers),
            "setup_seconds": round(self.seconds, 3),
            "cpu": cpu_name(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
        }

    def describe(self) -> str:
        """One line for the console: what was chosen, or why nothing was."""
        if not self.layers:
            return f"cpu kernels: stock ({self.reason})"
        parts = []
        for group, classes in self.choice.items():
            parts.append(f"{group} " + ", ".join(f"{c} rows: {k}" for c, k in classes.items()))
        return f"cpu kernels ({cpu_name()}, {torch.backends.cpu.get_cpu_capability()}): " + "; ".join(parts)

    def __repr__(self) -> str:
        return f"CpuKernels({len(self.layers)} layers, choice={self.choice})"


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (or the platform's processor string)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _groups(model: Any, layers: List[torch.nn.Linear]) -> Dict[str, List[torch.nn.Linear]]:
    """The routable layers split into :data:`GROUPS` (the output layer, everything else)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out: Dict[str, List[torch.nn.Linear]] = {"layers": [], "lm_head": []}
    for layer in layers:
        out["lm_head" if layer is head else "layers"].append(layer)
    return {g: ls for g, ls in out.items() if ls}


def apply_cpu_kernels(
    model: Any,
    enabled: Optional[bool] = None,
    kernels: Sequence[str] = KERNELS,
    rounds: int = 3,
    margin: float = DEFAULT_MARGIN,
    measure: Optional[Measure] = None,
    budget_s: float = DEFAULT_BUDGET_S,
) -> CpuKernels:
    """Measure the candidate kernels on ``model``'s linear layers and route each call to the
    fastest for its group and shape class.

    Args:
        model: a causal LM (any ``torch.nn.Module``; transformers' ``get_output_embeddings``
            finds the output layer). On another device or dtype nothing is applied.
        enabled: ``False`` applies nothing (the opt-out switch); ``None`` (default) reads
            ``$RACER_REF_CPU_KERNELS``; ``True`` applies regardless of it.
        kernels: candidates among :data:`KERNELS` (``stock`` is always included).
        rounds: interleaved timing rounds (>= 1); the fastest round of each kernel counts.
            Rounds after the first are skipped once ``budget_s`` seconds have been spent
            (a loaded machine would otherwise make loading the model slow).
        margin: see :func:`choose_kernels`.
        measure: ``(group, kernel, rows) -> seconds`` used instead of timing (for tests).
        budget_s: seconds (> 0) after which no further round starts.

    Returns:
        a :class:`CpuKernels` (``reason`` says why when nothing was applied).

    Raises:
        ValueError: an unknown kernel, ``rounds < 1``, ``margin`` out of range, or the model
            already routed (``restore()`` first).
    """
    started = time.perf_counter()
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        raise ValueError(f"kernels: expected a subset of {KERNELS}, got {list(kernels)!r}")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"rounds: expected an int >= 1, got {rounds!r}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin: expected a float in [0, 1), got {margin!r}")
    if not budget_s > 0:
        raise ValueError(f"budget_s: expected seconds > 0, got {budget_s!r}")
    if any("_racer_packed" in m.__dict__ for m in model.modules()):
        raise ValueError("model: its linear layers are already routed (restore() first)")

    def nothing(reason: str) -> CpuKernels:
        return CpuKernels({}, {}, {}, reason, rounds, time.perf_counter() - started)

    if enabled is None:
        enabled = not switched_off()
        if not enabled:
            return nothing(f"switched off by ${ENV_SWITCH}")
    if not enabled:
        return nothing("switched off")
    ok, why = cpu_kernel_support(model)
    if not ok:
        return nothing(why)
    have = available_kernels()
    candidates = ["stock"] + [k for k in KERNELS if k != "stock" and k in kernels and k in have]
    if len(candidates) == 1:
        return nothing("no packed kernel among the candidates in this PyTorch build")
    groups = _groups(model, _routable(model))

    with torch.inference_mode():
        # Pack every layer for every candidate, and check each product against stock.
        packed: Dict[str, Dict[int, Optional[torch.Tensor]]] = {k: {} for k in candidates}
        errors: Dict[str, float] = {k: 0.0 for k in candidates if k != "stock"}
        gen = torch.Generator().manual_seed(0)
        for layer in (m for ls in groups.values() for m in ls):
            x = torch.randn(3, layer.in_features, generator=gen)
            want = F.linear(x, layer.weight, layer.bias)
            scale = float(want.abs().max()) or 1.0
            for kernel in errors:
                packed[kernel][id(layer)] = _pack(kernel, layer.weight)
                got = _product(kernel, x, layer, packed[kernel][id(layer)])
                errors[kernel] = max(errors[kernel], float((got - want).abs().max()) / scale)
        failed = [k for k, e in errors.items() if not e <= TOLERANCE]  # NaN fails too
        candidates = [k for k in candidates if k not in failed]
        if len(candidates) == 1:
            return nothing(f"the packed kernels disagree with stock here (relative errors {errors})")

        if measure is None:
            measure = _timer(groups, packed)
        # Interleaved rounds: a burst of load from other processes hits every kernel alike.
        samples: Dict[Tuple[str, str, str], List[float]] = {}
        done = 0
        for _ in range(rounds):
            if done and time.perf_counter() - started > budget_s:
                break
            done += 1
            for group in groups:
                for name, rows_list in TIMED_ROWS.items():
                    for kernel in candidates:
                        total = sum(measure(group, kernel, rows) for rows in rows_list)
                        samples.setdefault((group, name, kernel), []).append(total)
    timings: Dict[str, Dict[str, Dict[str, float]]] = {}
    for (group, name, kernel), times in samples.items():
        timings.setdefault(group, {}).setdefault(name, {})[kernel] = min(times)
    choice = choose_kernels(timings, margin)

    handle = CpuKernels(choice, timings, errors, "", done, 0.0)
    in_use = {k for classes in choice.values() for k in classes.values()}
    for group, layers in groups.items():
        for layer in layers:
            layer._racer_packed = {k: packed[k][id(layer)] for k in in_use if k != "stock"}
            layer.forward = _routed_forward(layer, group, handle)
        handle.layers.extend(layers)
    handle.seconds = time.perf_counter() - started
    return handle


def _timer(groups: Dict[str, List[torch.nn.Linear]], packed: Dict[str, Dict[int, Optional[torch.Tensor]]]) -> Measure:
    """The real ``measure``: seconds to run every layer of a group once with ``rows`` rows (in
    model order, so the weights stream from memory as in a forward pass)."""
    inputs: Dict[Tuple[int, int], torch.Tensor] = {}
    sampled = {g: _sample(ls) for g, ls in groups.items()}

    def measure(group: str, kernel: str, rows: int) -> float:
        layers = sampled[group]
        xs = []
        for layer in layers:
            key = (rows, layer.in_features)
            if key not in inputs:
                inputs[key] = torch.randn(rows, layer.in_features)
            xs.append(inputs[key])
        table = packed.get(kernel, {})
        tic = time.perf_counter()
        for layer, x in zip(layers, xs):
            _product(kernel, x, layer, table.get(id(layer)))
        return time.perf_counter() - tic

    return measure


def _sample(layers: List[torch.nn.Linear]) -> List[torch.nn.Linear]:
    """The first layers in model order that hold :data:`TIMED_BYTES` of weights (all of them
    when they hold less): whole transformer blocks, so every kind of layer is in the sample in
    its share. Every kernel is timed on the same sample."""
    out, total = [], 0
    for layer in layers:
        out.append(layer)
        total += layer.weight.numel() * layer.weight.element_size()
        if total >= TIMED_BYTES:
            break
    return out


def _routed_forward(layer: torch.nn.Linear, group: str, handle: CpuKernels) -> Callable[[torch.Tensor], torch.Tensor]:
    """The forward installed on ``layer``: the chosen kernel for inference calls on fp32 CPU
    tensors, ``nn.Linear.forward`` for everything else."""
    original = torch.nn.Linear.forward.__get__(layer)
    width = layer.in_features

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[-1] != width or x.dtype != torch.float32 or x.device.type != "cpu":
            return original(x)
        rows = x.numel() // width
        if rows == 0:
            return original(x)
        kernel = handle.kernel_for(group, rows)
        if (kernel == "stock" or _autocast_on()
                or (torch.is_grad_enabled() and (x.requires_grad or layer.weight.requires_grad))):
            return original(x)
        y = _product(kernel, x.reshape(rows, width).contiguous(), layer, layer._racer_packed[kernel])
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return forward


def _autocast_on() -> bool:
    """Whether CPU autocast is active (then the original path applies its casts)."""
    try:
        return bool(torch.is_autocast_enabled("cpu"))
    except TypeError:  # older PyTorch
        return bool(torch.is_autocast_cpu_enabled())


def routed_layer_count(model: Any) -> int:
    """How many of ``model``'s modules currently route to a chosen kernel (0 when none)."""
    return sum(1 for m in model.modules() if "_racer_packed" in m.__dict__)


# ----------------------------------------------------------------------------- the forward pass
#
# Besides the matrix products, a pass of transformers' model code spends real time in Python:
# decorators that rewrite keyword arguments on every call of every layer, the output-recording
# machinery, the mask builder, one module call per RMSNorm, MLP and attention. On SmolLM2 and a
# 2-core CPU that is about a quarter of a one-token step. For the plain decoder-only families
# below, :func:`install_fast_forward` gives the model a forward that computes the same layers
# directly (the same modules' weights, the routed linear layers, the same cache) for the calls a
# verify loop makes, and hands every other call to the model's own forward.

#: (model class, decoder layer class, attention class, MLP class, norm class) we know the maths of.
_FAMILIES = {
    "LlamaForCausalLM": ("LlamaDecoderLayer", "LlamaAttention", "LlamaMLP", "LlamaRMSNorm"),
    "Qwen2ForCausalLM": ("Qwen2DecoderLayer", "Qwen2Attention", "Qwen2MLP", "Qwen2RMSNorm"),
    "MistralForCausalLM": ("MistralDecoderLayer", "MistralAttention", "MistralMLP", "MistralRMSNorm"),
}


def fast_forward_support(model: Any) -> Tuple[bool, str]:
    """Whether :func:`install_fast_forward` knows ``model``'s architecture, and why not.

    Known: Llama, Qwen2 and Mistral causal LMs (transformers' classes, not subclasses) with SiLU
    MLPs, RMSNorm and full attention (no sliding window) on the CPU, in eval mode.
    """
    name = type(model).__name__
    if name not in _FAMILIES:
        return False, f"{name} is not among the known architectures ({', '.join(_FAMILIES)})"
    body = getattr(model, "model", None)
    layer_cls, attn_cls, mlp_cls, norm_cls = _FAMILIES[name]
    config = model.config
    if body is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        return False, f"{name} has no .model.layers / .model.rotary_emb"
    if getattr(config, "hidden_act", None) != "silu":
        return False, f"hidden_act {getattr(config, 'hidden_act', None)!r} is not silu"
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return False, "pretraining_tp > 1"
    if model.training:
        return False, "the model is in training mode"
    if any(p.device.type != "cpu" for p in model.parameters()):
        return False, "the model is not on the CPU"
    if type(body.norm).__name__ != norm_cls or len(body.layers) != config.num_hidden_layers:
        return False, "unexpected final norm or layer count"
    for layer in body.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if (type(layer).__name__ != layer_cls or type(attn).__name__ != attn_cls or type(mlp).__name__ != mlp_cls
                or type(layer.input_layernorm).__name__ != norm_cls
                or type(layer.post_attention_layernorm).__name__ != norm_cls):
            return False, f"layer {type(layer).__name__} is not a plain {layer_cls}"
        if getattr(attn, "sliding_window", None) is not None or getattr(config, "sliding_window", None) and name == "MistralForCausalLM":
            return False, "sliding-window attention"
    return True, ""


class FastForward:
    """The forward installed by :func:`install_fast_forward` (``model.forward`` is this object).

    Attributes:
        enabled: ``False`` hands every call to the model's own forward.
        calls, fallbacks: how many calls took the fast path / the model's own forward.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.original = type(model).forward.__get__(model)
        self.enabled = True
        self.calls = 0
        self.fallbacks = 0
        body = model.model
        self.embed = body.embed_tokens
        self.rotary = body.rotary_emb
        self.norm = body.norm
        self.lm_head = model.lm_head
        self.layers = list(body.layers)
        self.hidden = int(model.config.hidden_size)
        #: :class:`racer_ref.speedups.compiled.CompiledPasses` once compiled (opt-in), else None.
        self.compiled: Any = None

    #: Keyword arguments the fast path reads; any other (or a positional argument) falls back.
    _KNOWN = frozenset({"input_ids", "attention_mask", "position_ids", "cache", "past_key_values", "use_cache"})

    def _usable(self, kwargs: Dict[str, Any]) -> bool:
        """Whether a call is one the fast path computes exactly as the model would."""
        from transformers import DynamicCache

        if not self.enabled or not kwargs.keys() <= self._KNOWN or torch.is_grad_enabled() or _autocast_on():
            return False
        if kwargs.get("use_cache") is False:
            return False
        input_ids = kwargs.get("input_ids")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        mask = kwargs.get("attention_mask")
        position_ids = kwargs.get("position_ids")
        if not (isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] == 1
                and input_ids.shape[1] >= 1 and input_ids.device.type == "cpu"):
            return False
        if type(cache) is not DynamicCache or len(cache.layers) != len(self.layers):
            return False
        # Plain full-attention layers only (DynamicLayer or racer_ref's GrowingLayer).
        if any(type(layer).__name__ not in ("DynamicLayer", "GrowingLayer") for layer in cache.layers):
            return False
        n, past = input_ids.shape[1], cache.get_seq_length()
        if position_ids is not None and not (isinstance(position_ids, torch.Tensor)
                                             and tuple(position_ids.shape) == (1, n)):
            return False
        if mask is None:
            return n == 1 or past == 0  # one query sees everything / a causal prefill
        return (isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.dtype == torch.float32
                and tuple(mask.shape) == (1, 1, n, past + n))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args or not self._usable(kwargs):
            self.fallbacks += 1
            return self.original(*args, **kwargs)
        self.calls += 1
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        return self._forward(kwargs["input_ids"], kwargs.get("attention_mask"), kwargs.get("position_ids"), cache)

    def _forward(self, input_ids: torch.Tensor, mask: Optional[torch.Tensor], position_ids: Optional[torch.Tensor],
                 cache: Any) -> Any:
        from transformers.modeling_outputs import CausalLMOutputWithPast

        n = input_ids.shape[1]
        past = cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + n)[None]  # (1, n)
        compiled = self.compiled
        if compiled is not None and compiled.enabled and (n == 1 or mask is not None):
            size = compiled.size_for(n)  # the opt-in compiled graphs (racer_ref.speedups.compiled)
            if size is not None:
                logits = compiled.run(input_ids, position_ids, mask, cache, size)
                if logits is not None:
                    return CausalLMOutputWithPast(logits=logits)
        h = self.embed(input_ids)  # (1, n, hidden)
        cos, sin = self.rotary(h, position_ids)  # (1, n, head_dim) each
        causal = mask is None and n > 1  # a prefill with an empty cache

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i: int) -> torch.Tensor:
            k, v = cache.update(k, v, i)  # (1, kv_heads, past + n, d) each
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  scale=self.layers[i].self_attn.scaling,
                                                  enable_gqa=q.shape[1] != k.shape[1])  # (1, heads, n, d)

        logits = decoder_logits(self.layers, self.norm, self.lm_head, h, cos[:, None], sin[:, None], attend)
        return CausalLMOutputWithPast(logits=logits)  # (1, n, vocab)

    def restore(self) -> None:
        """Give the model its own forward back."""
        if self.model.__dict__.get("forward") is self:
            del self.model.__dict__["forward"]


def decoder_logits(layers: Sequence[Any], norm: torch.nn.Module, lm_head: torch.nn.Module, h: torch.Tensor,
                   cos: torch.Tensor, sin: torch.Tensor,
                   attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """The decoder layers of a Llama-like model, then the final norm and the output layer: the
    maths of :class:`FastForward` (and of the compiled passes, :mod:`racer_ref.speedups.compiled`).

    Args:
        layers: the model's decoder layers; norm, lm_head: its final norm and output layer.
        h: ``(1, n, hidden)`` float32 token embeddings.
        cos, sin: ``(1, 1, n, head_dim)`` the rotary tables of the n positions.
        attend: ``(q, k, v, layer index) -> (1, heads, n, head_dim)``, given the rotated
            ``(1, heads, n, d)`` queries and ``(1, kv_heads, n, d)`` new keys and values: it
            appends them to the KV cache and attends (the caller's cache and mask).

    Returns:
        ``(1, n, vocab)`` logits.
    """
    n = h.shape[1]
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        d = attn.head_dim
        x = _rms_norm(layer.input_layernorm, h)  # (1, n, hidden)
        q = attn.q_proj(x).view(1, n, -1, d).transpose(1, 2)  # (1, heads, n, d)
        k = attn.k_proj(x).view(1, n, -1, d).transpose(1, 2)  # (1, kv_heads, n, d)
        v = attn.v_proj(x).view(1, n, -1, d).transpose(1, 2)  # (1, kv_heads, n, d)
        q = q * cos + _rotate_half(q) * sin  # rotary position embedding, as transformers'
        k = k * cos + _rotate_half(k) * sin
        out = attend(q, k, v, i)  # (1, heads, n, d)
        h = h + attn.o_proj(out.transpose(1, 2).reshape(1, n, -1))  # (1, n, hidden)
        x = _rms_norm(layer.post_attention_layernorm, h)
        mlp = layer.mlp
        h = h + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))  # (1, n, hidden)
    return lm_head(_rms_norm(norm, h))  # (1, n, vocab)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[-x2, x1]`` for the two halves of the last axis (transformers' ``rotate_half``)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' Llama RMSNorm of ``x`` (float32 statistics), with ``norm``'s weight and eps."""
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def install_fast_forward(model: Any, check: bool = True) -> Optional[FastForward]:
    """Give ``model`` the direct forward of :class:`FastForward` where its architecture is known.

    Args:
        model: a transformers causal LM.
        check: compare the fast forward's logits with the model's own on a short random input
            first (a prefill and a one-token step); on a mismatch nothing is installed.

    Returns:
        the installed :class:`FastForward`, or ``None`` (see :func:`fast_forward_support`).
    """
    ok, _ = fast_forward_support(model)
    if not ok or isinstance(model.__dict__.get("forward"), FastForward):
        return model.__dict__.get("forward") if ok else None
    fast = FastForward(model)
    if check and not _agrees(model, fast):
        return None
    fast.calls = fast.fallbacks = 0  # count the model's calls, not the check's
    model.forward = fast
    return fast


def _agrees(model: Any, fast: FastForward) -> bool:
    """Whether ``fast`` computes the model's own logits (to float rounding) on a random input."""
    from transformers import DynamicCache

    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        outs = []
        for fn in (fast.original, fast):
            cache = DynamicCache(config=model.config)
            kw = {"use_cache": True}
            from racer_ref.verify import cache_keyword

            kw[cache_keyword(type(model))] = cache
            a = fn(input_ids=ids[:, :6], **kw).logits
            b = fn(input_ids=ids[:, 6:], **kw).logits
            outs.append(torch.cat([a, b], dim=1))
    want, got = outs
    scale = float(want.abs().max()) or 1.0
    return bool(torch.isfinite(got).all()) and float((got - want).abs().max()) <= 1e-4 * scale


# ----------------------------------------------------------------------------- one call for all


def speed_up_model(model: Any, enabled: Optional[bool] = None, **options: Any) -> Optional[CpuKernels]:
    """The CPU fast path in one call (what ``racer-ref`` does when it loads a model): the
    measured linear kernels (:func:`apply_cpu_kernels`) and the direct forward
    (:func:`install_fast_forward`). A model not on the CPU is left as it is.

    Args:
        model: a transformers causal LM.
        enabled: ``False`` is the opt-out (nothing changes); ``None`` reads
            ``$RACER_REF_CPU_KERNELS``; ``True`` applies regardless of it.
        options: passed to :func:`apply_cpu_kernels` (``rounds``, ``budget_s``, ...).

    Returns:
        the :class:`CpuKernels` handle (also kept as ``model.racer_cpu_kernels``), or ``None``
        when the model is not on the CPU.
    """
    if any(p.device.type != "cpu" for p in model.parameters()):
        return None
    handle = apply_cpu_kernels(model, enabled=enabled, **options)
    if enabled is False or (enabled is None and switched_off()):
        handle.fast_forward = None
    else:
        handle.fast_forward = install_fast_forward(model)
    model.racer_cpu_kernels = handle
    return handle


#: ``generate()`` installs the fast path only on a model of at least this many weights: a toy
#: (the tests', the tutorials') gains nothing worth the measuring.
DEFAULT_MIN_PARAMETERS = 10_000_000


def speed_up_by_default(model: Any, also: Optional[Callable[[Any], str]] = None) -> Optional[CpuKernels]:
    """What ``racer_ref.generate`` does with a model on the CPU that nobody prepared: the
    fast path of :func:`speed_up_model`, once per model, said in one ``racer_ref`` log line.

    Left as it is: a model not on the CPU or not float32, one below
    :data:`DEFAULT_MIN_PARAMETERS` weights, one that :func:`speed_up_model` already saw, and
    one switched off (``$RACER_REF_CPU_KERNELS=off``, or ``model.racer_cpu_kernels_off = True``
    as ``racer-ref --cpu-kernels off`` leaves it). The fast path changes float rounding (not
    the algorithm): ``model.generate`` then runs through it too, so the two still agree token
    for token; against PyTorch's stock kernels, tokens can differ only at a near-tie of two
    logits.

    Args:
        model: a transformers causal LM.
        also: called with the model once the direct forward is in, to load more of the fast
            path (:func:`racer_ref.speedups.compiled.load_cached_passes`); its phrase joins the line.

    Returns:
        the :class:`CpuKernels` handle when it was installed now, else ``None``.
    """
    import logging

    if (switched_off() or getattr(model, "racer_cpu_kernels_off", False)
            or getattr(model, "racer_cpu_kernels", None) is not None):
        return None
    params = list(model.parameters())
    if (not params or any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params)
            or sum(p.numel() for p in params) < DEFAULT_MIN_PARAMETERS):
        return None
    log = logging.getLogger("racer_ref")
    handle = speed_up_model(model)
    fast = "a direct forward" if handle.fast_forward is not None else "the model's own forward"
    # What else an earlier process left for this model (the compiled passes: ``also`` loads them).
    compiled = also(model) if also is not None and handle.fast_forward is not None else ""
    log.warning(
        "racer_ref.generate: the CPU fast path is on for this %s (%s; %s%s; measured in %.1f s, once per "
        "model). model.generate now uses it too. RACER_REF_CPU_KERNELS=off, or "
        "model.racer_cpu_kernels_off = True before the first call, keeps PyTorch's stock path.",
        type(model).__name__, handle.describe(), fast, compiled, handle.seconds)
    return handle


def kernels_report(model: Any) -> Optional[Dict[str, Any]]:
    """:meth:`CpuKernels.report` of the handle :func:`speed_up_model` left on ``model``, with
    whether the direct forward is installed; ``None`` when it was never called."""
    handle = getattr(model, "racer_cpu_kernels", None)
    if handle is None:
        return None
    report = handle.report()
    fast = getattr(handle, "fast_forward", None)
    report["fast_forward"] = fast is not None
    compiled = getattr(fast, "compiled", None)
    report["compiled_passes"] = compiled.report() if compiled is not None else None
    return report


class stock_path:
    """``with stock_path(model): ...`` runs the model as stock PyTorch / transformers would
    (no routed kernels, its own forward) and restores the fast path afterwards. The baselines
    that stand for stock transformers (``hf-greedy``, ``hf-pld``) run inside it."""

    def __init__(self, model: Any) -> None:
        self.handle = getattr(model, "racer_cpu_kernels", None)
        self.saved: Tuple[bool, bool] = (False, False)

    def __enter__(self) -> "stock_path":
        if self.handle is not None:
            fast = getattr(self.handle, "fast_forward", None)
            self.saved = (self.handle.enabled, fast.enabled if fast is not None else False)
            self.handle.enabled = False
            if fast is not None:
                fast.enabled = False
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.enabled = self.saved[0]
            fast = getattr(self.handle, "fast_forward", None)
            if fast is not None:
                fast.enabled = self.saved[1]
