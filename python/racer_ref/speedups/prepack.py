"""Prepacked GEMM weights: cheaper verify passes on a CPU (fp32, Intel MKL).

Why this exists
---------------
Speculative decoding pays off when verifying ``n`` draft tokens in one forward pass costs
little more than decoding one token. On a GPU that holds up to a few dozen tokens. On a CPU it
does not, and part of the reason is not arithmetic at all: for a matrix product with 4 or more
rows, MKL's ``sgemm`` first copies ("packs") the whole weight matrix into a cache-friendly
layout, *on every call*. A 1-token pass takes the matrix-vector path and never packs; a
16-token verify pass re-packs all 135 M weights of SmolLM2 every step.

MKL can pack a weight matrix once and reuse it (``cblas_sgemm_pack`` / ``cblas_sgemm_compute``);
PyTorch exposes that as ``torch.ops.mkl._mkl_reorder_linear_weight`` and
``torch.ops.mkl._mkl_linear`` (what ``torch.compile`` uses for frozen fp32 linears on CPU).
:func:`prepack_linear_weights` packs every ``nn.Linear`` of a model once and routes the verify
passes (between ``min_rows`` and ``max_rows`` rows) to the packed product; every other call,
including the 1-token decoding steps of plain greedy decoding and the prefill, runs the
original ``nn.Linear.forward`` unchanged. Measured with ``benchmarks/bench_capacity.py
--prepack both`` on a 2-core Xeon (SmolLM2, fp32): a 16-token pass costs about 1.6x a 1-token
pass instead of 1.8-2.0x, an 8-token pass about 1.35-1.45x instead of 1.6-1.8x.

What it changes and what it does not
------------------------------------
- Same maths, other summation order: logits differ from the unpacked model's by float
  rounding (about 1e-5 relative), exactly as a 16-row and a 1-row product already differ from
  each other. Greedy outputs are still checked token for token against plain decoding by
  ``racer-ref bench`` (``matches_ar``) and by the tests.
- Extra memory: one packed copy of the weights (about the size of the fp32 weights).
- Only CPU, float32, inference (no autograd through the packed product), and only where the
  MKL ops exist (the x86 PyTorch wheels). :func:`prepack_support` says why not otherwise.
- The packed copy is a snapshot: call :meth:`PrepackedLinears.restore` before changing
  weights, and before copying or pickling the model (the packed tensors are opaque MKL
  buffers that ``copy.deepcopy`` and ``torch.save(model)`` cannot handle; ``state_dict()``
  and ``save_pretrained`` are unaffected).
- Only layers that compute ``nn.Linear.forward`` itself are packed: a subclass with its own
  ``forward`` (an adapter, say) and empty layers keep their own path. Calls under
  ``torch.autocast`` and calls of the wrong width also take the original path.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

#: Row counts routed to the packed product by default. Below 4 rows MKL does not pack anyway
#: (its small-matrix kernels are as fast); above a few dozen rows its per-call packing is
#: amortised and the packed product measured no faster (slower at 64 rows on our CPU).
DEFAULT_MIN_ROWS = 4
DEFAULT_MAX_ROWS = 32
#: Largest ``max_rows`` accepted (a verify pass is a draft tree: at most 4096 nodes).
MAX_ROWS_LIMIT = 4096


def _packable(model: Any) -> List[Any]:
    """The modules :func:`prepack_linear_weights` packs: those whose forward is
    ``nn.Linear.forward`` itself (subclasses that override it are left alone), with at least
    one input and one output feature."""
    import torch

    return [m for m in model.modules()
            if isinstance(m, torch.nn.Linear) and type(m).forward is torch.nn.Linear.forward
            and m.in_features > 0 and m.out_features > 0]


def prepack_support(model: Any) -> Tuple[bool, str]:
    """Whether :func:`prepack_linear_weights` can be used on ``model``, and why not.

    Returns:
        ``(True, "")`` when the model is on the CPU in float32 and PyTorch has the MKL packed
        GEMM ops, else ``(False, reason)``.
    """
    import torch

    ops = getattr(torch.ops, "mkl", None)
    if not (torch.backends.mkl.is_available() and hasattr(ops, "_mkl_linear")
            and hasattr(ops, "_mkl_reorder_linear_weight")):
        return False, "this PyTorch build has no MKL packed GEMM (torch.ops.mkl._mkl_linear)"
    params = list(model.parameters())
    if not params:
        return False, "the model has no parameters"
    if any(p.device.type != "cpu" for p in params):
        return False, "the model is not on the CPU (packed GEMM is an MKL, CPU-only feature)"
    linears = _packable(model)
    if not linears:
        return False, "the model has no nn.Linear layers that can be packed"
    if any(m.weight.dtype != torch.float32 for m in linears):
        return False, "the model's linear layers are not float32"
    return True, ""


class PrepackedLinears:
    """Handle returned by :func:`prepack_linear_weights`: what was packed, and the way back.

    Attributes:
        layers: the ``nn.Linear`` modules now routed to the packed product.
        min_rows, max_rows: calls with this many rows (all leading dimensions multiplied)
            use the packed product; all others the original forward.
        enabled: set to ``False`` to route every call to the original forward for a while
            (``benchmarks/bench_capacity.py --prepack both`` times both ways interleaved).
    """

    def __init__(self, layers: List[Any], min_rows: int, max_rows: int) -> None:
        self.layers = layers
        self.min_rows = min_rows
        self.max_rows = max_rows
        self.enabled = True

    def restore(self) -> None:
        """Give every layer its original forward back and free the packed copies."""
        for layer in self.layers:
            layer.__dict__.pop("forward", None)  # the instance attribute shadowed the class's
            layer.__dict__.pop("_racer_packed_weight", None)
        self.layers = []

    def __repr__(self) -> str:
        return f"PrepackedLinears({len(self.layers)} layers, rows {self.min_rows}..{self.max_rows})"


def prepack_linear_weights(
    model: Any, min_rows: int = DEFAULT_MIN_ROWS, max_rows: int = DEFAULT_MAX_ROWS
) -> PrepackedLinears:
    """Pack every ``nn.Linear`` weight of ``model`` once for MKL and use it in verify passes.

    Args:
        model: a causal LM (any ``torch.nn.Module``) on the CPU in float32.
        min_rows, max_rows: inclusive range of row counts (tokens in the pass) that use the
            packed product; ``1 <= min_rows <= max_rows``.

    Returns:
        a :class:`PrepackedLinears` handle (``restore()`` undoes it).

    Raises:
        ValueError: ``min_rows`` / ``max_rows`` out of range, or the model already prepacked.
        RuntimeError: :func:`prepack_support` says no (its reason in the message), or the packed
            product disagrees with ``nn.Linear`` on a self-check (the model is left unchanged).
    """
    import torch
    import torch.nn.functional as F

    if not isinstance(min_rows, int) or isinstance(min_rows, bool) or min_rows < 1:
        raise ValueError(f"min_rows: expected an int >= 1, got {min_rows!r}")
    if (not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < min_rows
            or max_rows > MAX_ROWS_LIMIT):
        raise ValueError(f"max_rows: expected an int in [min_rows, {MAX_ROWS_LIMIT}] = "
                         f"[{min_rows}, {MAX_ROWS_LIMIT}], got {max_rows!r}")
    ok, why = prepack_support(model)
    if not ok:
        raise RuntimeError(f"model: cannot prepack: {why}")
    linears = _packable(model)
    if any("_racer_packed_weight" in m.__dict__ for m in linears):
        raise ValueError("model: its linear layers are already prepacked (restore() first)")

    packed = []
    with torch.no_grad():
        for layer in linears:
            # The packed layout does not depend on the row count given here (checked: one
            # packing gives bit-identical products for every row count).
            packed.append(torch.ops.mkl._mkl_reorder_linear_weight(layer.weight.detach(), max_rows))
        # Self-check on the first layer before touching the model.
        layer, w = linears[0], packed[0]
        x = torch.randn(min_rows, layer.in_features, generator=torch.Generator().manual_seed(0))
        want = F.linear(x, layer.weight, layer.bias)
        got = torch.ops.mkl._mkl_linear(x, w, layer.weight, layer.bias, min_rows)
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()) + 1e-6):
            raise RuntimeError("model: packed GEMM disagrees with nn.Linear here; not prepacked")

    handle = PrepackedLinears(linears, min_rows, max_rows)
    for layer, w in zip(linears, packed):
        layer._racer_packed_weight = w
        layer.forward = _packed_forward(layer, handle)
    return handle


def _packed_forward(layer: Any, handle: PrepackedLinears) -> Any:
    """The forward installed on ``layer``: packed product for verify-sized inference calls."""
    import torch

    original = type(layer).forward.__get__(layer)
    mkl_linear = torch.ops.mkl._mkl_linear

    def forward(x: Any) -> Any:
        width = x.shape[-1] if x.dim() else 0
        rows = x.numel() // width if width else 0
        if (handle.enabled and handle.min_rows <= rows <= handle.max_rows
                and width == layer.in_features
                and x.device.type == "cpu" and x.dtype == torch.float32
                and not _autocast_on()
                and not (torch.is_grad_enabled() and (x.requires_grad or layer.weight.requires_grad))):
            y = mkl_linear(x.reshape(rows, width).contiguous(), layer._racer_packed_weight, layer.weight,
                           layer.bias, rows)
            return y.reshape(*x.shape[:-1], y.shape[-1])
        return original(x)

    return forward


def _autocast_on() -> bool:
    """Whether CPU autocast is active (then the original path applies its casts)."""
    import torch

    try:
        return bool(torch.is_autocast_enabled("cpu"))
    except TypeError:  # older PyTorch
        return bool(torch.is_autocast_cpu_enabled())


def maybe_prepack(model: Any, mode: str) -> Optional[PrepackedLinears]:
    """Apply the CLI's ``--prepack`` choice: ``"auto"`` packs when :func:`prepack_support`
    allows (CPU, fp32, MKL), ``"on"`` packs or raises, ``"off"`` does nothing.

    Returns:
        the handle, or ``None`` when nothing was packed.

    Raises:
        ValueError: ``mode`` is not ``auto``, ``on`` or ``off``.
        RuntimeError: ``mode == "on"`` and packing is not possible.
    """
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"prepack: expected 'auto', 'on' or 'off', got {mode!r}")
    if mode == "off":
        return None
    if mode == "auto" and not prepack_support(model)[0]:
        return None
    return prepack_linear_weights(model)


def prepacked_layer_count(model: Any) -> int:
    """How many of ``model``'s modules currently use a prepacked weight (0 when none)."""
    return sum(1 for m in model.modules() if "_racer_packed_weight" in m.__dict__)
