"""Drafters, written to be read (twin of ``rust/src/drafter.rs``).

Where it comes from: docs/explanation/spec.md steps 2-4 (drafting), 8 (copy-logit update) and 9
(automaton update), plus the peers in "Methods we compare against".

A drafter turns "committed tokens + root" into a draft tree. Every method here returns the
same ``DraftTree``, so the verification loop and the benchmarks can swap them freely:

    method        retrieval part                    logits part
    -----------   -------------------------------   ------------------------------------
    racer         Aho-Corasick automaton            copy-logit table fills the rest
    retrieval     Aho-Corasick automaton            -
    logits        -                                 copy-logit table (Token Recycling style)
    logits-last   -                                 root from last_topk, then the table
    pld           prompt lookup: a single chain     -
    ar            -  (root only: plain decoding)    -

One decoding step, seen from the drafter::

         verification loop                              drafter
    ---------------------------------------      -------------------------------------
    tree = drafter.draft(root, last_topk)   -->  build the draft tree for `root`
    (target verifies the tree in one pass)
    drafter.observe(fed tokens, their top-k) -->  copy-logit rows   (step 8)
    drafter.commit(root + accepted drafts)   -->  automaton, history (step 9)

Which tokens go to ``observe`` is the loop's choice: every prompt position after prefill,
and after a verify pass every tree node (rejected ones included, as in the paper) or only
the accepted ones.

Checks: ``observe``, ``commit`` and ``draft`` check their arguments, then call
``observe_trusted``, ``commit_trusted`` and ``draft_trusted``, which check nothing (as the
Rust core's ``drafter.rs``). ``trusted_step()`` hands the decoding loop those
directly: the loop's ids are the model's own, checked at ``generate()``'s boundary.

Interrupts: ``observe``, ``commit`` and ``reset`` are all-or-nothing, like the automaton's
``extend`` (its Part 7): a ``KeyboardInterrupt`` inside them leaves the drafter as it was.
The undo is a wrapper (``undo.all_or_nothing`` around ``_commit``): the step itself records
nothing, and the decoding loop's own drafter commits without the wrapper.
This class is not thread-safe; ``racer_ref.Drafter`` refuses a second thread (in use).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional, Sequence

import numpy as np

from racer_ref.reference.automaton import Automaton
from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.draft_tree import build_trusted
from racer_ref.reference.limits import (
    DEFAULT_BREADTH,
    DEFAULT_CAPACITY,
    DEFAULT_MAX_NODES,
    DEFAULT_MIN_BORDER_DEPTH,
    DEFAULT_NGRAM,
    NoCopy,
    as_int_array,
    check_capacity,
    check_observe,
    check_table_size,
    check_token_id,
    check_token_ids,
    choice_value,
    int_or_default,
    int_value,
)
from racer_ref.reference.undo import all_or_nothing, check_intact
from racer_ref.tree import METHODS, DraftTree

#: How a drafter fills its capacity: ``"paper"`` (the default: the paper's merge, retrieval
#: first, then the logits tree by Eq. 3; it measured as good or better) or ``"expected"``
#: (beyond the paper: the nodes with the most expected accepted tokens, see
#: ``racer_ref.reference.expected_tree``).
TREES = ("expected", "paper")
#: Prompt lookup: the longest n-gram tried first (then n - 1, ..., 1).
PLD_MAX_NGRAM = 3
#: Prompt lookup: at most this many tokens are copied after the match.
PLD_NUM_TOKENS = 10


def prompt_lookup(
    context: Sequence[int], max_ngram: int = PLD_MAX_NGRAM, num_tokens: int = PLD_NUM_TOKENS
) -> list[int]:
    """The prompt-lookup (PLD) chain for ``context`` = committed tokens + root.

    For n = ``max_ngram`` down to 1 we take the last n tokens of the context, look for
    their most recent *earlier* occurrence, and copy up to ``num_tokens`` tokens that
    follow it. Example with n = 2::

        context:  a b c d e f a b          last 2-gram: "a b"
                  ^^^                      most recent earlier "a b": position 0
                      c d e f a b          copied (up to 10 tokens; here 6)

    Returns the copied tokens (never empty when a match exists: an earlier occurrence
    ends before the last token), or ``[]`` when no n-gram matches.
    """
    context = list(context)
    length = len(context)
    for n in range(max_ngram, 0, -1):
        # The context must be longer than the n-gram, or there is no "earlier".
        if length <= n:
            continue
        suffix = context[length - n:]
        # Most recent first: start at the latest possible earlier position.
        for start in range(length - n - 1, -1, -1):
            if context[start:start + n] == suffix:
                return context[start + n:min(start + n + num_tokens, length)]
    return []


class Drafter(NoCopy):
    """One drafter per method, all returning a ``DraftTree`` (pure-Python twin).

    Args:
        method: one of ``METHODS``.
        vocab_size: the target model's vocabulary size; token ids are in
            ``[0, vocab_size)``. Required.
        capacity: maximum draft-tree nodes, root included (paper 64), in ``[1, 4096]``.
        breadth: ``k``, copy-logit ids per row and the root's breadth (paper 8), in
            ``[1, vocab_size]``.
        ngram, max_nodes, min_border_depth: the automaton's parameters (paper 10, 10,000,
            2); validated for every method, used by ``racer`` and ``retrieval``.
        tree: ``"paper"`` (default) or ``"expected"`` (one of ``TREES``): how ``racer``,
            ``retrieval``, ``logits`` and ``logits-last`` fill the capacity; validated for
            every method (``pld`` and ``ar`` draft the same either way). ``"expected"``
            attaches the acceptance estimates (``attach_estimator()``); the paper's tree
            neither runs nor imports them unless they are attached.

    ``None`` for a parameter means its default (as in ``Automaton``); ``vocab_size`` has
    no default.

    Raises:
        ValueError: an unknown method or a parameter out of range.
        TypeError: ``vocab_size`` missing, ``method`` not a string, or a parameter that is
            not an int (bool and float included).
    """

    def __init__(
        self,
        method: str = "racer",
        vocab_size: Optional[int] = None,
        capacity: int = DEFAULT_CAPACITY,
        breadth: int = DEFAULT_BREADTH,
        ngram: int = DEFAULT_NGRAM,
        max_nodes: int = DEFAULT_MAX_NODES,
        min_border_depth: int = DEFAULT_MIN_BORDER_DEPTH,
        tree: str = "paper",
    ) -> None:
        # Validate in the Rust core's order. Kinds first (TypeError): the method and the
        # tree must be strings, every size an int (bool and float refused); None means the
        # default, as in Automaton, except for vocab_size, which has no default.
        method = choice_value(method, "method", METHODS, "racer")
        if vocab_size is None:
            raise TypeError("vocab_size: required (the target model's vocabulary size)")
        vocab_size = int_value(vocab_size, "vocab_size")
        capacity = int_or_default(capacity, "capacity", DEFAULT_CAPACITY)
        breadth = int_or_default(breadth, "breadth", DEFAULT_BREADTH)
        ngram = int_or_default(ngram, "ngram", DEFAULT_NGRAM)
        max_nodes = int_or_default(max_nodes, "max_nodes", DEFAULT_MAX_NODES)
        min_border_depth = int_or_default(min_border_depth, "min_border_depth", DEFAULT_MIN_BORDER_DEPTH)
        tree = choice_value(tree, "tree", TREES, "paper")
        # Then ranges (ValueError): the table first, naming breadth as our caller wrote it
        # (the table calls it k), the capacity, the automaton (its own, as it is built).
        check_table_size(vocab_size, breadth, "breadth")
        self.method, self.tree, self.capacity = method, tree, check_capacity(capacity)
        # The table's numpy array is allocated lazily: a method without a table pays nothing.
        table = CopyLogitTable(vocab_size, breadth)
        automaton = Automaton(max_nodes=max_nodes, ngram=ngram, min_border_depth=min_border_depth)
        self.vocab_size, self.breadth, self.ngram, self.max_nodes = vocab_size, breadth, ngram, max_nodes
        # Keep only what the method drafts from.
        self.table = table if method in ("racer", "logits", "logits-last") else None
        self.automaton = automaton if method in ("racer", "retrieval") else None
        # PLD searches the committed tokens; the other methods only count them.
        self.history: list[int] = []
        self.num_committed = 0
        # Beyond the paper: the acceptance estimates, attached by tree="expected" and
        # capacity="auto" only (attach_estimator); None on the paper's path.
        self.estimator: Any = None
        if tree == "expected":
            self.attach_estimator()
        # True while changes are in flight; left True only if an interrupted commit()
        # could not be fully undone, or reset() itself was interrupted (see commit).
        self._torn = False

    def attach_estimator(self) -> None:
        """Attach the acceptance estimates (beyond the paper; docs/explanation/expected-tree.md):
        from now on every draft is annotated with path probabilities (``path_probs``,
        ``expected_tokens``) and every ``observe()`` about the last draft is learned from
        (``acceptance_stats()``). ``tree="expected"`` attaches them at construction;
        ``capacity="auto"`` calls this. Attaching twice keeps what was learned. ``pld`` and
        ``ar`` draft without estimates either way."""
        if self.estimator is None:
            # Imported here: the paper's step never loads the estimates.
            from racer_ref.reference.expected_tree import Estimator

            self.estimator = Estimator()

    #: What a torn drafter says (``undo.check_intact``).
    TORN = ("Drafter: an earlier commit() or reset() was interrupted and could not be "
            "undone, so the drafter is inconsistent; call reset() to start afresh")

    def _check_intact(self) -> None:
        """Raise ``RuntimeError`` naming ``reset()`` if the drafter or its parts are torn."""
        # Every public method starts here, after checking its arguments: a torn drafter
        # refuses to work rather than draft from a half-updated automaton or history. Its
        # parts keep their own flags (someone may have used them directly).
        check_intact(self, self.automaton, self.table)

    # ----------------------------------------------------------------------------------
    # The public methods: check the arguments, refuse a torn drafter, then do the step.
    # ----------------------------------------------------------------------------------

    def observe(self, token_ids: Any, topk_ids: Any) -> None:
        """Copy-logit update (spec step 8): ``table[token_ids[i]] = topk_ids[i, :k]``.

        Args:
            token_ids: ``(n,)`` integer ids the target model was fed.
            topk_ids: ``(n, k')`` integer top-k' ids (``k' >= breadth``) of the target's
                logits at each of those positions, best first.

        Validated for every method; stored by the methods with a table. Beyond the paper,
        with the estimates attached: when the rows are the last draft's nodes (all of them
        in order, or the accepted path), the estimates learn from them first
        (``expected_tree.learn``).

        Raises:
            ValueError: bad shapes or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. Nothing changes on error.
            RuntimeError: the drafter is torn (see ``reset()``).
        """
        tokens, kept = check_observe(token_ids, topk_ids, self.vocab_size, self.breadth)
        self._check_intact()
        self.observe_trusted(tokens, kept)

    def commit(self, token_ids: Any) -> None:
        """Commit tokens that became output (spec step 9): automaton and PLD history.

        Args:
            token_ids: ``(n,)`` integer ids, in output order.

        Raises:
            ValueError: not 1-D, or an id outside ``[0, vocab_size)``.
            TypeError: a non-integer dtype. Nothing changes on error.
            RuntimeError: the drafter is torn (see ``reset()``).
        """
        tokens = as_int_array(token_ids, "token_ids", 1)
        check_token_ids("token_ids", tokens, self.vocab_size)
        self._check_intact()
        self.commit_trusted(tokens)

    def draft(self, root: int, last_topk: Optional[Any] = None, capacity: Optional[int] = None) -> DraftTree:
        """Build this step's draft tree for ``root`` (spec steps 2-4).

        Args:
            root: the token the target just predicted (node 0).
            last_topk: ``(k',)`` integer top-k' ids (``k' >= breadth``) of the logits that
                produced the root. Required by ``logits-last``; validated but unused by the
                other methods.
            capacity: this step's capacity, in ``[1, 4096]``; ``None``: the drafter's. With
                ``tree="expected"`` the retrieval candidates still come from a retrieval at
                the drafter's capacity, so the tree at ``capacity`` is exactly the first
                ``capacity`` nodes of the tree at the drafter's capacity (what
                ``--capacity auto`` relies on).

        Raises:
            ValueError: root or an id outside ``[0, vocab_size)``; ``last_topk`` too short,
                or missing for ``logits-last``.
            TypeError: a non-integer root or dtype.
            RuntimeError: the drafter is torn (see ``reset()``).
        """
        root = check_token_id("root", root, self.vocab_size)
        capacity = None if capacity is None else check_capacity(capacity)
        self._check_intact()
        if last_topk is not None:
            array = as_int_array(last_topk, "last_topk", 1)
            if array.shape[0] < self.breadth:
                raise ValueError(
                    f"last_topk: expected at least breadth = {self.breadth} ids, got {array.shape[0]}"
                )
            check_token_ids("last_topk", array, self.vocab_size)
            last_topk = array
        elif self.method == "logits-last":
            raise ValueError('last_topk: required by method "logits-last" (got None)')
        return self.draft_trusted(root, last_topk, capacity)

    # ----------------------------------------------------------------------------------
    # The step itself, for arguments already checked: the public methods above after
    # their checks, and the decoding loop (through ``trusted_step()``), whose ids are the
    # model's own. Like the Rust core's ``*_trusted``, nothing is checked here.
    # ----------------------------------------------------------------------------------

    def trusted_step(self, owned: bool = False) -> SimpleNamespace:
        """What the decoding loop calls each step, for its own ids (checked at ``generate()``'s
        boundary): ``draft``, ``observe`` and ``commit`` without the checks, the ``*_trusted``
        methods. ``owned``: the drafter is one request's alone (``generate()`` without
        ``drafter=``) and an interrupt ends both, so its commits are the plain step, with no
        undo to keep."""
        commit = self._commit if owned else self.commit_trusted
        return SimpleNamespace(draft=self.draft_trusted, observe=self.observe_trusted, commit=commit)

    def observe_trusted(self, tokens: np.ndarray, topk: np.ndarray) -> None:
        """``observe`` for checked ``(n,)`` ids and their ``(n, k' >= breadth)`` top-k rows."""
        kept = topk[:, : self.breadth]
        if self.estimator is not None:
            # Beyond the paper: rows about the last draft are labelled samples, learned
            # before the table takes them (the candidates are those the draft saw).
            self.estimator.learn(tokens.tolist(), kept, self.table)
        if self.table is not None:
            # One call, all-or-nothing on its own.
            self.table.observe_trusted(tokens, kept)

    def commit_trusted(self, tokens: np.ndarray) -> None:
        """``commit`` for checked ``(n,)`` ids.

        All or nothing: three things change (automaton, history, count), and the undo
        module's wrapper watches all three, so an interrupt anywhere undoes all three, even
        one that lands after the automaton is done and before the count is.
        """
        all_or_nothing(self, self._commit, tokens)

    def _commit(self, tokens: np.ndarray) -> None:
        """The commit itself (spec step 9), for checked ``(n,)`` ids: nothing recorded."""
        tokens = tokens.tolist()
        # The automaton learns every n-gram that ends in a new token.
        if self.automaton is not None:
            self.automaton.extend_trusted(tokens)
        # PLD searches the committed tokens; the other methods only count them.
        if self.method == "pld":
            self.history.extend(tokens)
        self.num_committed += len(tokens)

    def draft_trusted(self, root: int, last_topk: Optional[Any] = None, capacity: Optional[int] = None) -> DraftTree:
        """``draft`` for a checked ``root`` (an int), ``last_topk`` (``(k' >= breadth,)``
        ids, or ``None`` unless ``logits-last``) and ``capacity`` (``None``: the drafter's)."""
        capacity = self.capacity if capacity is None else capacity
        if self.method in ("pld", "ar"):  # the peers without a table or an automaton
            return self._draft_peer(root, capacity)
        # Last-logit mode: the root's children come from the logits that produced it.
        root_row = last_topk[: self.breadth].tolist() if self.method == "logits-last" else None
        if self.estimator is not None:
            return self._draft_estimated(root, root_row, capacity)
        # Step 2: the retrieval tree, as root-to-leaf paths (racer and retrieval).
        paths = [] if self.automaton is None else self.automaton.retrieve_trusted(root, capacity)[0]
        # Steps 3-4, the paper's merge: retrieval first, then the logits tree fills the
        # rest; flattened breadth-first.
        return build_trusted(root, capacity, paths, self.table, root_row)

    def _draft_peer(self, root: int, capacity: int) -> DraftTree:
        """``pld``: one chain, copied by prompt lookup; ``ar``: the root alone."""
        if self.method == "pld":
            # The context is the committed tokens followed by the root.
            chain = prompt_lookup(self.history + [root])
            return build_trusted(root, capacity, [[root] + chain])
        # "ar": the root alone, i.e. plain autoregressive decoding.
        return build_trusted(root, capacity)

    def _draft_estimated(self, root: int, root_row: Optional[list], capacity: int) -> DraftTree:
        """Beyond the paper, with the estimates attached (racer, retrieval, logits,
        logits-last): the estimated tree (``tree="expected"``), or the paper's tree
        annotated with path probabilities."""
        self.estimator.last = None
        expected = self.tree == "expected"
        paths: list = []
        freqs: list = []
        if self.automaton is not None:
            # "expected" retrieves at the drafter's capacity (see draft).
            paths, freqs = self.automaton.retrieve_trusted(root, self.capacity if expected else capacity,
                                                           counted=True)
        return self.estimator.draft(root, capacity, paths, freqs, self.table, root_row, expected=expected)

    @property
    def path_probs(self) -> Optional[np.ndarray]:
        """``(n,)`` float64: the estimated path probability of each node of the last draft
        (node order; the root 1.0), or ``None`` (no estimates attached, no draft since the
        last observe/reset, or a method without estimates: pld, ar).
        ``E[a + 1] = path_probs.sum()``."""
        self._check_intact()
        return None if self.estimator is None else self.estimator.path_probs()

    @property
    def expected_tokens(self) -> Optional[float]:
        """``E[a + 1] = 1 + sum of the last draft's path probabilities`` (root excluded),
        or ``None`` as for ``path_probs``."""
        self._check_intact()
        return None if self.estimator is None else self.estimator.expected_tokens()

    def acceptance_stats(self) -> Optional[dict]:
        """The estimates' integer counts and the calibration record: ``seen`` and
        ``accepted`` per bucket (``NUM_BUCKETS``), ``calibration_seen``,
        ``calibration_accepted`` and ``calibration_predicted`` (sum of the predictions)
        per bin of predicted probability (10 bins of 0.1), and ``num_labels``; ``None``
        when no estimates are attached."""
        self._check_intact()
        return None if self.estimator is None else self.estimator.stats()

    @property
    def automaton_nodes(self) -> int:
        """Trie nodes in the automaton (root excluded); 0 for methods without one."""
        self._check_intact()
        return 0 if self.automaton is None else len(self.automaton)

    def table_row(self, token: int) -> list[int]:
        """Copy-logit row of ``token`` (``[]`` when unseen or when the method has no table).

        Raises:
            TypeError: ``token`` is not an int.
        """
        token = int_value(token, "token")
        self._check_intact()
        return [] if self.table is None else self.table.row(token)

    def reset(self) -> None:
        """Forget the automaton, the copy-logit table and the history.

        Always succeeds, whatever state an interrupted call left (it rebuilds every part);
        interrupted itself, it leaves the drafter torn until the next ``reset()``.
        """
        # No undo log here: a reset that stops half-way is finished by the next reset(),
        # which the flag asks for. Each part's own reset() rebuilds it from scratch.
        self._torn = True
        if self.automaton is not None:
            self.automaton.reset()
        if self.table is not None:
            self.table.reset()
        self.history = []
        self.num_committed = 0
        if self.estimator is not None:
            self.estimator.reset()
        self._torn = False

    def __repr__(self) -> str:
        return (
            f"Drafter(method={self.method!r}, vocab_size={self.vocab_size}, "
            f"capacity={self.capacity}, breadth={self.breadth}, ngram={self.ngram}, "
            f"max_nodes={self.max_nodes}, tree={self.tree!r})"
        )


if __name__ == "__main__":
    # A walkthrough: the same token stream through every method.
    import numpy as np

    vocab_size = 20
    # "the cat sat on the mat . the cat sat on" as ids 1..7
    committed = [1, 2, 3, 4, 1, 5, 6, 1, 2, 3, 4]
    root = 1  # the target predicted "the" again
    print("committed tokens:", committed, " root:", root)
    # Pretend the target's top-2 after each committed token was (next token, 9).
    nxt = committed[1:] + [root]
    topk = np.array([[t, 9] for t in nxt])
    for method in METHODS:
        drafter = Drafter(method, vocab_size=vocab_size, capacity=8, breadth=2, ngram=4)
        drafter.observe(committed, topk)
        drafter.commit(committed)
        tree = drafter.draft(root, last_topk=[5, 2])
        print(f"\n--- {method}: {len(tree)} nodes")
        print(tree.pretty())
