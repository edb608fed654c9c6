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
CPU fast path change), with a **probe**: a prefill of a few tokens, one branching tree pass,
and one-token passes along two of its paths; the tree pass must give each node the logits of
the one-token passes (to :data:`TOLERANCE`). A model that fails it, or one with a known cause
above, is checked the same way with a chain pass; then it decodes with chain drafts, or with
one token a step when even a chain is not exact, and says so once in one line (a
``racer_ref`` log warning). It costs 5 small forward passes (8 when the tree fails), about
50 ms on a 2-core CPU for SmolLM2-135M (``benchmarks/probe_cost.py``); ``generate(...,
probe=False)`` skips it for a model known to pass (the known causes above are still applied:
they cost nothing). The families and what they run: docs/reference/models.md.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch

from racer_ref.tree import DraftTree
from racer_ref.verify import forward_chain, forward_prompt, forward_tree

#: The largest relative logit error (``max |tree - sequential| / max |sequential|``) of an
#: exact pass, per dtype: float rounding of another summation order stays orders of magnitude
#: below it, a wrong position or bias does not (ALiBi on a random 2-layer MPT: about 1e-2).
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 2e-2}

#: Model types whose attention bias comes from cache slots (ALiBi), not from position ids.
ALIBI_MODEL_TYPES = frozenset({"bloom", "mpt"})

#: The probe's tree: a root with four children, the last of which has a child. The last child
#: and its child sit 3 slots right of their depth, where a slot-based bias goes wrong.
PROBE_PARENTS = np.array([-1, 0, 0, 0, 0, 4], dtype=np.int64)
#: The nodes checked against one-token passes: the root, the last child and its child.
PROBE_PATH = [0, 4, 5]


@dataclass
class Plan:
    """How a model is decoded exactly (the result of :func:`make_plan`).

    Attributes:
        mode: ``"tree"`` (draft trees, the paper's), ``"chain"`` (the first path of each tree)
            or ``"ar"`` (one token a step).
        cause: why not trees (``None`` for ``"tree"``), or what a tree mode works around.
        switch: position ids at which the rotary factors switch or ``generate`` rebuilds the
            cache (LongRoPE); no verify pass reaches one of them from below. Empty otherwise.
        rebuild: the cache length at which ``model.generate`` drops and recomputes the cache
            (Phi-3's LongRoPE switch), or ``None``.
        key: what the plan was made for (the boundary's: dtype, device, attention, the
            ``probe`` option, the CPU fast path, a replaced forward).
        device: where the inputs and the KV cache go (:func:`input_device`).
        wraps: whether the loop's drafting and forward pass need :meth:`apply` (not plain trees).
        error: the probe's largest relative logit error of a tree pass (``nan``: not probed).
        seconds: what the probe cost, in seconds of wall time.
    """

    mode: str
    cause: Optional[str] = None
    switch: Tuple[int, ...] = ()
    rebuild: Optional[int] = None
    key: Tuple[Any, ...] = ()
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
        if self.mode == "tree":
            switch = RopeSwitch(self.switch, self.rebuild)
            return _wrapped(drafting, switch.wrap), switch.forward
        return _wrapped(drafting, lambda step: ChainStep(step, self.mode == "ar")), forward_chain


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

    def __init__(self, switch: Tuple[int, ...], rebuild: Optional[int]) -> None:
        self.switch, self.rebuild = switch, rebuild
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
        from racer_ref.decoding import clip_draft_tree

        length = len(self.cached)  # the root's position
        if length == self.rebuild:
            return DraftTree.root_only(root)
        tree = self.step.draft(root, last_topk)
        ahead = [s for s in self.switch if s > length]  # positions this pass must stay below
        return clip_draft_tree(tree, min(ahead) - 1 - length) if ahead else tree

    def forward(self, model: Any, cache: Any, tree: DraftTree) -> torch.Tensor:
        if cache.get_seq_length() != self.rebuild:
            return forward_tree(model, cache, tree)
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


def _rope_parameters(config: Any) -> dict:
    """The rotary settings of ``config`` (transformers 5's ``rope_parameters``, or the older
    ``rope_scaling``), one dict; ``{}`` without any."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if params and all(isinstance(v, dict) for v in params.values()):  # one per layer type
        merged: dict = {}
        for value in params.values():
            merged.update(value)
        return merged
    return dict(params)


def known_cause(model: Any) -> Tuple[Optional[str], Tuple[int, ...], Optional[int]]:
    """What the config says against plain trees: ``(chain cause or None, switch positions,
    rebuild length or None)``."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    name = type(model).__name__
    alibi = config.model_type in ALIBI_MODEL_TYPES or getattr(config, "alibi", False) is True
    if config.model_type == "mpt":
        alibi = bool(getattr(getattr(config, "attn_config", None), "alibi", True))
    if alibi:
        return (f"{name} takes attention positions from cache slots (ALiBi), which a branching tree "
                "pass cannot honour"), (), None
    rope = _rope_parameters(config)
    if rope.get("rope_type") != "longrope":
        return None, (), None
    switch = {int(rope.get("original_max_position_embeddings") or config.max_position_embeddings)}
    rebuild = None
    # Phi-3's (and PhiMoE's) prepare_inputs_for_generation recomputes the cache at this length.
    prepare = getattr(type(model), "prepare_inputs_for_generation", None)
    if getattr(prepare, "__module__", "").startswith("transformers.models.") and \
            getattr(config, "original_max_position_embeddings", None) is not None:
        rebuild = int(config.original_max_position_embeddings)
        switch.add(rebuild)
    return None, tuple(sorted(switch)), rebuild


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    if not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        same = torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
        return 0.0 if same else float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))


def probe(model: Any, vocab_size: int, chain_only: bool = False) -> Tuple[float, float, str]:
    """Compare a tree pass (and a chain pass) with one-token passes along a path.

    The prefix is 4 token ids, the tree :data:`PROBE_PARENTS` (6 nodes); the root, the last
    child and its child (:data:`PROBE_PATH`) are also run one token a pass, and so is a chain
    of the same three nodes. 5 forward passes in all (4 with ``chain_only``).

    Returns:
        ``(tree_error, chain_error, raised)``: the largest relative logit error
        (``max |got - want| / max |want|``) of the tree and the chain pass against the
        one-token passes, ``inf`` for a pass that raised (``raised``: its error, else ``""``);
        ``tree_error`` is ``nan`` with ``chain_only``. The model's own state is not touched
        (a cache of its own).

    Raises:
        ValueError: naming the model, when even a prefill or a one-token pass fails.
    """
    from transformers import DynamicCache

    device = input_device(model)
    ids = (np.arange(12, dtype=np.int64) * 7919 + 11) % vocab_size  # spread-out token ids
    prefix, tokens = torch.as_tensor(ids[:4], device=device), ids[4:4 + len(PROBE_PARENTS)]
    cache = DynamicCache(config=model.config)
    name = type(model).__name__
    with torch.inference_mode():
        try:
            forward_prompt(model, cache, prefix)
        except Exception as error:  # (any failure of the model's own passes: refuse it, naming it)
            raise ValueError(f"model: {name} failed a plain forward pass in racer-ref's exactness probe "
                             f"({type(error).__name__}: {error})") from error
        if not cache.layers or cache.get_seq_length() != len(prefix):
            raise ValueError(f"model: {name} keeps no transformers KV cache (a DynamicCache stays empty after "
                             "a forward pass: the model keeps its own state); racer-ref verifies draft trees "
                             "against a KV cache")
        try:
            path = [forward_chain(model, cache, DraftTree.root_only(int(tokens[u])))[0] for u in PROBE_PATH]
        except Exception as error:  # (any failure of the model's own passes: refuse it, naming it)
            raise ValueError(f"model: {name} failed a plain forward pass in racer-ref's exactness probe "
                             f"({type(error).__name__}: {error})") from error
        want = torch.stack(path)  # (3, vocab) the one-token rows of the root, the last child, its child
        errors, raised = [], ""
        for kind in (["chain"] if chain_only else ["tree", "chain"]):
            truncate(cache, len(prefix))
            if kind == "tree":
                tree = _probe_tree(tokens)
                rows = PROBE_PATH
                forward = forward_tree
            else:
                tree = _probe_tree(tokens).subtree_trusted(np.asarray(PROBE_PATH))
                rows = [0, 1, 2]
                forward = forward_chain
            try:
                errors.append(_relative_error(forward(model, cache, tree)[rows], want))
            except Exception as error:  # e.g. Bloom's "too many values to unpack" on a 4-D mask
                errors.append(float("inf"))
                raised = raised or f"{type(error).__name__}: {error}"
    return (float("nan"), errors[0], raised) if chain_only else (errors[0], errors[1], raised)


def _probe_tree(tokens: np.ndarray) -> DraftTree:
    from racer_ref.tree import SOURCE_RETRIEVAL, tree_attention_mask

    depths = np.array([0, 1, 1, 1, 1, 2], dtype=np.int64)
    sources = np.full(len(PROBE_PARENTS), SOURCE_RETRIEVAL, dtype=np.uint8)
    return DraftTree(np.asarray(tokens, dtype=np.int64), PROBE_PARENTS, depths,
                     tree_attention_mask(PROBE_PARENTS), None, sources)


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
    if cause is None and run_probe:
        error, chain_error, raised = probe(model, vocab_size)
        if not error <= TOLERANCE.get(model.dtype, 5e-2):
            what = f"raises {raised}" if raised else f"gives logits {error:.2g} (relative) away from one-token passes"
            cause = f"a branching tree pass of {type(model).__name__} {what}"
    elif cause is not None:
        chain_error = probe(model, vocab_size, chain_only=True)[1] if run_probe else 0.0
    if cause is None:
        mode, notice = "tree", None  # (a LongRoPE switch is handled exactly, with trees: nothing to say)
    elif chain_error <= TOLERANCE.get(model.dtype, 5e-2):
        mode, notice = "chain", f"{cause}: decoding with chain drafts (exact, fewer tokens per step than trees)"
    else:
        mode, notice = "ar", f"{cause}, nor does a chain: decoding one token a step (exact, no speed-up)"
    plan = Plan(mode, cause, switch, rebuild, key, input_device(model), error, time.perf_counter() - start, notice)
    if notice is not None:
        logging.getLogger("racer_ref").warning("racer_ref: %s", notice)
    try:
        model.racer_plan = plan
    except (AttributeError, TypeError):  # a model that takes no attributes: probed every call
        pass
    return plan
