"""Which verify passes a model can take exactly: trees, chains or one token a step.

The promise of :func:`racer_ref.generate` is that its greedy output equals
``model.generate(do_sample=False)``. That rests on one assumption (docs/explanation/spec.md,
step 5): a forward pass over a draft tree, with each node's position id and a tree attention
mask, gives every node the logits that a plain sequential decode of that node's path would
give. Most transformers models honour it; some do not:

* **ALiBi** (MPT, Bloom, Falcon with ``alibi=True``): the attention bias comes from the key's
  *slot* in the cache, not from ``position_ids``. A node off the tree's first path sits in a
  slot further right than its depth, so it gets a wrong bias (MPT), or the model cannot take
  a 4-D mask at all (Bloom, Falcon build ALiBi from a 2-D mask). In a **chain** the slot of a
  node is its depth: chain drafts are exact.
* **LongRoPE** (Phi-3-mini-128k, Phi-3.5, Phi-4-mini: ``rope_type="longrope"``): the rotary
  factors of a forward pass are chosen from its largest position (short factors up to
  ``original_max_position_embeddings``, long ones past it), and Phi-3's ``generate`` rebuilds
  the whole cache once, when the sequence first passes that length. A pass that reaches past
  the switch rotates every node, the root included, with the long factors. Here no pass
  straddles the switch, and the cache is rebuilt at the switch as ``generate`` rebuilds it
  (:class:`RopeSwitch`).

:func:`make_plan` decides, once per model object (and again if its dtype, device, attention or
forward change), with a **probe** of one forward pass (:func:`probe_tree`): a branching tree
whose first path sits in slots equal to its positions, as in a plain decode, and whose last
branch repeats that path's tokens 4 slots to the right; an exact pass gives the copies the
same logits (to :data:`TOLERANCE`). A model that fails it, or one with a known cause above, is
checked with a chain pass against one-token passes (:func:`probe_chain`, 5 passes); it then
decodes with chain drafts, or one token a step when even a chain is not exact, and says so once
in one line (a ``racer_ref`` log warning). A model that keeps no KV cache, or fails a plain
pass, is refused by name. The one pass costs about 2.5% of a 128-token decode of SmolLM2-135M
on a 2-core CPU (``benchmarks/probe_cost.py``); ``generate(..., probe=False)`` skips it for a
model known to pass (the known causes above still apply: they cost nothing). The families and
what they run: docs/reference/models.md.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch

from racer_ref.tree import DraftTree, clip_draft_tree, tree_attention_mask
from racer_ref.verify import forward_chain, forward_prompt, forward_tree

#: The largest relative logit error (``max |tree - sequential| / max |sequential|``) of an
#: exact pass, per dtype: float rounding of another summation order stays orders of magnitude
#: below it, a wrong position or bias does not (ALiBi on a random 2-layer MPT: about 1e-2).
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 2e-2}

#: Model types whose attention bias comes from cache slots (ALiBi), not from position ids.
ALIBI_MODEL_TYPES = frozenset({"bloom", "mpt"})

#: The probe's tree (:func:`probe_tree`), parents first: 4 prefix tokens in a row (nodes
#: 0-3), the root (4), its first child A (5) and A's child B (6), two more children of the root
#: (7, 8), and A' (9) and B' (10), copies of A and B under the root, 4 slots right of A and B.
PROBE_PARENTS = np.array([-1, 0, 1, 2, 3, 4, 5, 4, 4, 4, 9], dtype=np.int64)
PROBE_DEPTHS = np.array([0, 1, 2, 3, 4, 5, 6, 5, 5, 5, 6], dtype=np.int64)
#: The first path's A and B, and their copies: their rows must be equal.
PROBE_PATH, PROBE_COPIES = [5, 6], [9, 10]


@dataclass
class Plan:
    """How a model is decoded exactly (the result of :func:`make_plan`).

    Attributes:
        mode: ``"tree"`` (draft trees, the paper's), ``"chain"`` (the first path of each tree)
            or ``"ar"`` (one token a step).
        cause: why not trees (``None`` for ``"tree"``).
        switch: position ids at which the rotary factors switch or ``generate`` rebuilds the
            cache (LongRoPE); no verify pass reaches one of them from below. Empty otherwise.
        rebuild: the cache length at which ``model.generate`` drops and recomputes the cache
            (Phi-3's LongRoPE switch), or ``None``.
        key: what the plan was made for (the boundary's: dtype, device, attention, the
            ``probe`` option, the CPU fast path, a replaced forward, training mode).
        device: where the inputs and the KV cache go (:func:`input_device`).
        wraps: whether the loop's drafting and forward pass need :meth:`apply` (not plain trees).
        error: the probe's largest relative logit error of a tree pass (``nan``: not probed).
        seconds: what the probe cost, in seconds of wall time.
    """

    mode: str
    cause: Optional[str] = None
    switch: Tuple[int, ...] = ()
    rebuild: Optional[int] = None
    key: Tuple[Any, ...] = field(default=(), repr=False)
    device: torch.device = torch.device("cpu")
    error: float = float("nan")
    seconds: float = 0.0
    notice: Optional[str] = field(default=None, repr=False)
    wraps: bool = field(init=False)

    def __post_init__(self) -> None:
        self.wraps = self.mode != "tree" or bool(self.switch)

    def apply(self, drafting: Any) -> Tuple[Any, Callable[..., torch.Tensor]]:
        """The drafting context manager and the forward pass of one ``generate()`` call.

        Args:
            drafting: the call's drafting (a context manager that gives the loop its step).

        Returns:
            ``(drafting, forward)``: ``drafting`` wrapped so that its trees fit this plan, and
            ``forward(model, cache, tree) -> (n, vocab) logits`` to verify them with.
        """
        def wrap(step: Any) -> Any:
            return step if self.mode == "tree" else ChainStep(step, root_only=self.mode == "ar")

        forward = forward_tree if self.mode == "tree" else forward_chain
        if not self.switch:
            return _wrapped(drafting, wrap), forward
        switch = RopeSwitch(self.switch, self.rebuild, forward)  # (chains too must not straddle a switch)
        return _wrapped(drafting, lambda step: switch.wrap(wrap(step))), switch.forward


@contextlib.contextmanager
def _wrapped(drafting: Any, wrap: Callable[[Any], Any]) -> Iterator[Any]:
    with drafting as step:
        yield wrap(step)


class ChainStep:
    """A drafting step whose trees are the first-child path of the wrapped step's trees
    (``root_only=False``: a chain, exact where slots are positions) or the root alone
    (``root_only=True``: one token a step). ``observe`` and ``commit`` pass through, so the
    drafter learns what it learns with trees."""

    def __init__(self, step: Any, root_only: bool) -> None:
        self.step, self.root_only = step, root_only
        self.observe, self.commit = step.observe, step.commit

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        if self.root_only:
            return DraftTree.root_only(root)
        tree = self.step.draft(root, last_topk)
        keep, tip = [0], 0
        for node, parent in enumerate(tree.parents.tolist()):
            if parent == tip and node > 0:  # in breadth-first order the first child comes first
                keep.append(node)
                tip = node
        return tree.subtree_trusted(np.asarray(keep, dtype=np.int64))


class RopeSwitch:
    """Verify passes that never straddle a rotary switch, and the cache rebuilt at it.

    transformers' LongRoPE picks the short or the long factors for a whole forward pass from
    its largest position, and Phi-3's ``generate`` drops the cache and recomputes the whole
    sequence in one pass when the sequence first passes ``original_max_position_embeddings``.
    So that a draft tree's nodes get what a sequential decode gives them:

    * a tree whose root sits below a switch position is clipped in depth to end before it;
    * at the rebuild length the tree is the root alone, and the pass recomputes every cached
      token and the root from an empty cache (as ``generate`` does), in one pass.

    ``wrap(step)`` gives the loop a step that clips (and counts the committed tokens: they are
    exactly the tokens in the KV cache); ``forward`` is the loop's forward pass.
    """

    def __init__(self, switch: Tuple[int, ...], rebuild: Optional[int],
                 inner: Callable[..., torch.Tensor] = forward_tree) -> None:
        self.switch, self.rebuild, self.inner = switch, rebuild, inner  # inner: the plan's verify pass
        self.cached: List[int] = []  # the token ids in the KV cache, oldest first

    def wrap(self, step: Any) -> "RopeSwitch":
        self.step = step
        return self

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        self.step.observe(token_ids, topk_ids)

    def commit(self, token_ids: Any) -> None:
        self.step.commit(token_ids)
        self.cached.extend(int(t) for t in token_ids)

    def draft(self, root: int, last_topk: Any = None) -> DraftTree:
        length = len(self.cached)  # the root's position
        if length == self.rebuild:
            return DraftTree.root_only(root)
        tree = self.step.draft(root, last_topk)
        ahead = [s for s in self.switch if s > length]  # positions this pass must stay below
        return clip_draft_tree(tree, min(ahead) - 1 - length) if ahead else tree

    def forward(self, model: Any, cache: Any, tree: DraftTree) -> torch.Tensor:
        if cache.get_seq_length() != self.rebuild:
            return self.inner(model, cache, tree)
        device = cache.layers[0].keys.device
        truncate(cache, 0)  # as generate: the whole sequence again, in one pass from an empty cache
        ids = torch.tensor(self.cached + [int(tree.tokens[0])], device=device)  # (L + 1,)
        return forward_prompt(model, cache, ids)[-1:]  # (1, vocab): the root's row


def truncate(cache: Any, length: int) -> None:
    """Keep the first ``length`` entries of every layer of a ``DynamicCache`` (as
    :func:`racer_ref.verify.keep_accepted` cuts it)."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, :length], layer.values[:, :, :length]


def input_device(model: Any) -> torch.device:
    """Where a model's inputs and KV cache live: ``model.device``, or for a model whose weights
    accelerate offloads (``model.device`` is ``meta``: ``cpu_offload``, or a ``device_map``
    with cpu or disk offload) the execution device of its hooks (``hf_device_map``'s first
    real device, else the CPU)."""
    device = model.device
    if device.type != "meta":
        return device
    hook = getattr(model, "_hf_hook", None)
    if getattr(hook, "execution_device", None) is not None:
        return torch.device(hook.execution_device)
    for module in model.modules():
        hook = getattr(module, "_hf_hook", None)
        if getattr(hook, "execution_device", None) is not None:
            return torch.device(hook.execution_device)
    for place in getattr(model, "hf_device_map", {}).values():
        if place not in ("cpu", "disk", "meta"):
            return torch.device(f"cuda:{place}" if isinstance(place, int) else place)
    return torch.device("cpu")


def _rope_parameters(config: Any) -> List[dict]:
    """The rotary settings of ``config`` (transformers 5's ``rope_parameters``, or the older
    ``rope_scaling``): one dict, or one per layer type; ``[]`` without any."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if params and all(isinstance(v, dict) for v in params.values()):  # one per layer type
        return list(params.values())
    return [dict(params)] if params else []


def _rebuilds_at_switch(model: Any) -> bool:
    """Whether ``model.generate`` recomputes the cache at the LongRoPE switch: Phi-3's and
    PhiMoE's ``prepare_inputs_for_generation`` do, also under a subclass of theirs."""
    return any("prepare_inputs_for_generation" in vars(cls) and cls.__module__.startswith("transformers.models.")
               for cls in type(model).__mro__)


def known_cause(model: Any) -> Tuple[Optional[str], Tuple[int, ...], Optional[int]]:
    """What the config says against plain trees: ``(chain cause or None, switch positions,
    rebuild length or None)``.

    Known causes: ALiBi (Bloom, MPT, Falcon with ``alibi=True``) and GPT-Neo's local layers
    (a tree mask replaces their window), for chains; LongRoPE (in any layer type), for the
    switch positions (its ``original_max_position_embeddings``, and where ``generate``
    rebuilds the cache, the config's own).
    """
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    name = type(model).__name__
    alibi = config.model_type in ALIBI_MODEL_TYPES or getattr(config, "alibi", False) is True
    if config.model_type == "mpt":
        alibi = bool(getattr(getattr(config, "attn_config", None), "alibi", True))
    if alibi:
        return (f"{name} takes attention positions from cache slots (ALiBi), which a branching tree "
                "pass cannot honour"), (), None
    if config.model_type == "gpt_neo" and "local" in (getattr(config, "attention_layers", None) or []):
        return (f"{name} has local attention layers (window_size {getattr(config, 'window_size', '?')}), "
                "whose window a tree attention mask replaces"), (), None
    ropes = [r for r in _rope_parameters(config) if r.get("rope_type") == "longrope"]
    if not ropes:
        return None, (), None
    switch = {int(r.get("original_max_position_embeddings") or config.max_position_embeddings) for r in ropes}
    rebuild = None
    if _rebuilds_at_switch(model) and getattr(config, "original_max_position_embeddings", None) is not None:
        rebuild = int(config.original_max_position_embeddings)
        switch.add(rebuild)
    return None, tuple(sorted(switch)), rebuild


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    if not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        same = torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
        return 0.0 if same else float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))


def _probe_ids(model: Any, vocab_size: int) -> Tuple[torch.Tensor, np.ndarray]:
    """The probe's prefix (4 token ids, on the model's input device) and its tree's 6 tokens."""
    ids = (np.arange(10, dtype=np.int64) * 7919 + 11) % vocab_size  # spread-out token ids
    return torch.as_tensor(ids[:4], device=input_device(model)), ids[4:]


def plain_pass(model: Any, cache: Any, ids: torch.Tensor) -> torch.Tensor:
    """A plain causal pass over ``ids`` (a prefill into the empty ``cache``, or one token
    after it); a model that fails it, or keeps no KV cache, is refused by name."""
    name = type(model).__name__
    before = cache.get_seq_length() if cache.layers else 0
    try:
        logits = forward_prompt(model, cache, ids)  # (n, vocab)
    except Exception as error:  # (any failure of the model's own passes: refuse it, naming it)
        raise ValueError(f"model: {name} failed a plain forward pass in racer-ref's exactness probe "
                         f"({type(error).__name__}: {error})") from error
    if not cache.layers or cache.get_seq_length() != before + len(ids):
        raise ValueError(f"model: {name} keeps no transformers KV cache (a DynamicCache stays empty after "
                         "a forward pass: the model keeps its own state); racer-ref verifies draft trees "
                         "against a KV cache")
    return logits


def probe_tree(model: Any, vocab_size: int) -> Tuple[float, str]:
    """Does a branching tree pass give its nodes the logits of a plain decode? One pass.

    The tree :data:`PROBE_PARENTS` from an empty cache: 4 prefix tokens, a root, then the
    root's first child A and A's child B (the first path: slots equal positions, as in a plain
    decode), two more children, and copies A', B' of A and B as the root's last child and its
    child, 4 slots right of their positions. An exact tree pass gives A' and B' the rows of A
    and B; a slot-based bias (ALiBi), positions taken from slots, a windowed mask or a model
    that cannot take a 4-D mask do not. The model's own state is not touched (a cache of its own).

    Returns:
        ``(error, raised)``: the largest relative logit error (``max |copy - first path| /
        max |first path|``), or ``inf`` and the error for a tree pass that raised.
    """
    from transformers import DynamicCache

    prefix, tokens = _probe_ids(model, vocab_size)
    cache = DynamicCache(config=model.config)
    marker = torch.empty(0, dtype=model.dtype, device=prefix.device)
    for layer in cache.layers:  # empty, on the input device, where forward_tree places its inputs
        layer.lazy_initialization(marker, marker)
    ids = np.concatenate([prefix.cpu().numpy(), tokens[:5], tokens[1:3]])  # ..., r, A, B, c2, c3, A', B'
    tree = DraftTree(ids, PROBE_PARENTS, PROBE_DEPTHS, tree_attention_mask(PROBE_PARENTS), None,
                     np.zeros(len(ids), dtype=np.uint8))
    with torch.inference_mode():
        try:
            logits = forward_tree(model, cache, tree)  # (11, vocab)
        except Exception as error:  # e.g. Bloom's "too many values to unpack" on a 4-D mask
            return float("inf"), f"{type(error).__name__}: {error}"
    if cache.get_seq_length() != len(ids):  # a model that keeps its own state (the chain probe refuses it)
        return float("inf"), "the pass left the KV cache empty"
    return _relative_error(logits[PROBE_COPIES], logits[PROBE_PATH]), ""


def probe_chain(model: Any, vocab_size: int) -> Tuple[float, str]:
    """Does a chain pass give its nodes the logits of one-token passes? Five passes: a
    4-token prefill, a root and two tokens one a pass, then the same three tokens as one chain
    (:func:`racer_ref.verify.forward_chain`) on the cache cut back to the prefix. Run only
    where trees are not exact. Returns ``(error, raised)`` as :func:`probe_tree`.

    Raises:
        ValueError: naming the model, when a plain pass fails or leaves no KV cache.
    """
    from transformers import DynamicCache

    prefix, tokens = _probe_ids(model, vocab_size)
    cache = DynamicCache(config=model.config)
    path = tokens[:3]  # r, A, B
    with torch.inference_mode():
        plain_pass(model, cache, prefix)
        want = torch.cat([plain_pass(model, cache, torch.as_tensor(path[i:i + 1], device=prefix.device))
                          for i in range(len(path))])  # (3, vocab) one token a pass
        truncate(cache, len(prefix))
        chain = DraftTree(path, np.array([-1, 0, 1]), np.arange(3), tree_attention_mask(np.array([-1, 0, 1])), None,
                          np.zeros(3, dtype=np.uint8))
        try:
            return _relative_error(forward_chain(model, cache, chain), want), ""
        except Exception as error:
            return float("inf"), f"{type(error).__name__}: {error}"


def make_plan(model: Any, vocab_size: int, key: Tuple[Any, ...] = (), run_probe: Optional[bool] = None) -> Plan:
    """The :class:`Plan` of ``model``, kept on it as ``model.racer_plan``: the boundary
    (:func:`racer_ref.options.resolve`) makes one per model object, and again when ``key``
    (what the plan depends on) changes.

    A plan that is not plain trees is announced when made, in one line (a ``racer_ref`` log
    warning naming the model and the cause).

    Args:
        model: a transformers causal LM, its other arguments checked.
        vocab_size: its vocabulary size (the probe's token ids lie below it).
        key: what the plan is valid for (compared by the boundary; kept on the plan).
        run_probe: run the probe's forward passes (``False``: the causes known from the
            config still apply); ``None``: the ``probe`` flag in ``key`` (its 4th item), else True.

    Raises:
        ValueError: the model fails even a plain forward pass (named in the message).
    """
    if run_probe is None:
        run_probe = bool(key[3]) if len(key) > 3 else True
    start = time.perf_counter()
    cause, switch, rebuild = known_cause(model)
    error = float("nan")
    tolerance = TOLERANCE.get(model.dtype, 5e-2)
    if cause is None and run_probe:
        error, raised = probe_tree(model, vocab_size)
        if not error <= tolerance:
            what = f"raises {raised}" if raised else f"gives off-path nodes logits {error:.2g} (relative) away from"
            cause = f"a branching tree pass of {type(model).__name__} {what}" + ("" if raised else " the same path's")
    # (the chain probe's plain passes also refuse, naming it, a model that cannot be decoded at all)
    chain_error = probe_chain(model, vocab_size)[0] if cause is not None and run_probe else 0.0
    if cause is None:
        mode, notice = "tree", None  # (a LongRoPE switch is handled exactly, with trees: nothing to say)
    elif chain_error <= tolerance:
        mode, notice = "chain", f"{cause}: decoding with chain drafts (exact, fewer tokens per step than trees)"
    else:
        mode, notice = "ar", f"{cause}, nor does a chain: decoding one token a step (exact, no speed-up)"
    plan = Plan(mode, cause, switch, rebuild, key, input_device(model), error, time.perf_counter() - start, notice)
    try:
        model.racer_plan = plan
    except (AttributeError, TypeError):  # a model that takes no attributes: probed every call,
        if (type(model), notice) in _ANNOUNCED:  # but its notice said once per process
            notice = None
        _ANNOUNCED.add((type(model), notice))
    if notice is not None:
        logging.getLogger("racer_ref").warning("racer_ref: %s", notice)
    return plan


#: The notices said for models that keep no plan (they take no attributes).
_ANNOUNCED: set = set()
