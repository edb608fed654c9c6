"""The Aho-Corasick n-gram automaton behind RACER's retrieval tree: the pure-Python twin.

This is the teaching version of ``rust/src/automaton.rs``. It has the same API and gives
the same results (the tests compare ``dump()`` and ``retrieve()`` of both after every
operation), but it is written to be read from top to bottom. Sources: docs/explanation/spec.md,
"The automaton", step 2 ("Retrieval tree") and step 9 ("Update the automaton").

API (shared with ``racer_ref.Automaton``):

* ``Automaton(max_nodes=10_000, ngram=10, min_border_depth=2)``
* ``extend(tokens)``: commit tokens (ints in ``[0, 2**32 - 1]``).
* ``retrieve(root, capacity) -> list[list[int]]``: the retrieval tree's root-to-leaf paths.
* ``borders(root) -> list[list[int]]``: the borders' strings, longest first.
* ``reset()``, ``len()`` / ``len(a)``, ``stats() -> dict``, ``dump() -> str``.

Every public operation is all-or-nothing: an exception raised inside it, a ``KeyboardInterrupt``
(Ctrl-C in a notebook) included, leaves the automaton exactly as it was before the call
(Part 7; the undo is a wrapper, ``undo.all_or_nothing``: the code below is the algorithm
alone and records nothing). The recency list is an explicit O(1) doubly linked list,
``lru.RecencyList``.

Run ``python -m racer_ref.reference.automaton`` for a walkthrough that prints each stage.
"""

from __future__ import annotations

import heapq
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from racer_ref.reference.limits import (
    DEFAULT_MAX_NODES,
    DEFAULT_MIN_BORDER_DEPTH,
    DEFAULT_NGRAM,
    MAX_NGRAM,
    MAX_NODES_LIMIT,
    NoCopy,
    check_capacity,
    check_token,
    int_or_default,
    int_value,
)
from racer_ref.reference.lru import RecencyList
from racer_ref.reference.undo import all_or_nothing, check_intact

#: Number of failure-link epochs; token ``t`` uses epoch ``t % EPOCH_SLOTS``.
EPOCH_SLOTS = 1024

# ======================================================================================
# Part 0. Checking arguments.
#
# Bad input must raise a ValueError or TypeError that names the argument, *before* any
# state changes. The checks and the limits live in ``limits`` (one home per rule, as the
# Rust core's lib.rs and error.rs); the public methods call them once, at the boundary.
# ======================================================================================


def _read_tokens(tokens: Iterable[Any]) -> List[int]:
    """All of ``tokens`` as a list of checked ints (nothing is committed here)."""
    if isinstance(tokens, np.ndarray):
        # A numpy array: check its dtype and shape once, then its values.
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"tokens: must be an array of ints, got dtype {tokens.dtype}")
        if tokens.ndim != 1:
            raise ValueError(f"tokens: must be 1-D, got shape {tokens.shape}")
        # np.asarray first: an ndarray subclass (a masked array, say) is read as its
        # plain data, as the Rust core and np.asarray read it.
        values = np.asarray(tokens).tolist()
        return [check_token("tokens", i, v) for i, v in enumerate(values)]
    try:
        items = iter(tokens)
    except TypeError:
        raise TypeError(
            f"tokens: must be an iterable of ints, got {type(tokens).__name__}"
        ) from None
    # Materialise the whole input first: a generator can only be read once, and nothing
    # may be committed before every element has been checked.
    return [check_token("tokens", i, int_value(v, "tokens", i)) for i, v in enumerate(items)]


# ======================================================================================
# Part 1. The trie.
#
# Every node is a *state*; its *string* is the token path from the root. With ngram = 3
# and the committed tokens  a b a c  the trie holds every substring of length <= 3, each
# with its frequency (how many times it occurred):
#
#                 (root)
#              /    |     \
#          a:2     b:1     c:1
#         /   \      \
#      b:1    c:1    a:1
#       |              \
#     a:1              c:1
#
# ("a b a" occurred once, "a" twice, and so on.) A node also remembers its failure link,
# and the automaton keeps all non-root nodes on a recency list for LRU eviction (Part 4):
# each node carries its own two links of that list, `newer` and `older`.
# ======================================================================================


class _Node:
    """One trie state. ``__slots__`` keeps 10,000 of them small."""

    __slots__ = (
        "token", "parent", "depth", "freq", "children", "fail", "fail_stamp", "alive",
        "newer", "older",
    )

    def __init__(self, token: int, parent: Optional["_Node"], depth: int) -> None:
        # The token on the edge from the parent (unused for the root).
        self.token = token
        self.parent = parent
        # Depth = length of the string; the root has depth 0.
        self.depth = depth
        # How many times the string occurred among the committed tokens.
        self.freq = 0
        # token -> child. A dict gives O(1) lookups and lets me list the children.
        self.children: Dict[int, _Node] = {}
        # The cached failure link and the epoch it was computed in (see Part 3).
        self.fail: Optional[_Node] = None
        self.fail_stamp = -1
        # False once the node has been evicted: windows holding it are closed (Part 2).
        self.alive = True
        # Its neighbours on the recency list (Part 4): the next more recent node and the
        # next less recent one; None while it is not on the list (and at either end).
        self.newer: Optional[_Node] = None
        self.older: Optional[_Node] = None

    def path(self) -> List[int]:
        """The node's string: token ids from the root."""
        out = []
        node = self
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


class Automaton(NoCopy):
    """The Aho-Corasick n-gram automaton of RACER's retrieval tree (pure Python).

    Args:
        max_nodes: most trie nodes kept, root excluded; int in ``[ngram, 2**31 - 1]``
            (paper: 10,000). When full, the least recently used leaf is recycled.
        ngram: the window length n, int in ``[2, 256]`` (paper: 10); bounds the depth.
        min_border_depth: least depth of a border, int in ``[1, ngram]`` (spec: 2).
        (``None`` for any of them means its default.)

    Raises:
        TypeError: an argument is not an int (bool and float included).
        ValueError: an argument is out of range; the message names it.
    """

    def __init__(
        self,
        max_nodes: Optional[int] = DEFAULT_MAX_NODES,
        ngram: Optional[int] = DEFAULT_NGRAM,
        min_border_depth: Optional[int] = DEFAULT_MIN_BORDER_DEPTH,
    ) -> None:
        # Kinds first (TypeError), then ranges (ValueError); same order as Rust.
        ngram = int_or_default(ngram, "ngram", DEFAULT_NGRAM)
        max_nodes = int_or_default(max_nodes, "max_nodes", DEFAULT_MAX_NODES)
        min_border_depth = int_or_default(min_border_depth, "min_border_depth", DEFAULT_MIN_BORDER_DEPTH)
        if not 2 <= ngram <= MAX_NGRAM:
            raise ValueError(f"ngram: must be in [2, {MAX_NGRAM}], got {ngram}")
        # One full window is a path of ngram nodes, so the trie must hold at least that.
        if not ngram <= max_nodes <= MAX_NODES_LIMIT:
            raise ValueError(
                f"max_nodes: must be in [ngram, {MAX_NODES_LIMIT}] = [{ngram}, "
                f"{MAX_NODES_LIMIT}] so that one window of ngram tokens fits, got {max_nodes}"
            )
        if not 1 <= min_border_depth <= ngram:
            raise ValueError(
                f"min_border_depth: must be in [1, ngram] = [1, {ngram}], got {min_border_depth}"
            )
        self.max_nodes = max_nodes
        self.ngram = ngram
        self.min_border_depth = min_border_depth
        self.reset()

    def reset(self) -> None:
        """Forget everything: trie, windows, matching state, counters.

        This is also the way out of the one state Part 7 cannot undo (a second interrupt
        during a rollback): ``reset()`` always leaves a fresh, empty automaton.
        """
        # "Torn" until the last line below has run: an interrupted reset() is detected by
        # the next call, which asks for reset() again (Part 7).
        self._torn = True
        self._root = _Node(0, None, 0)
        # Nodes in use, the root excluded.
        self._len = 0
        # The recency list (Part 4): head = most recent, tail = least recent.
        self._lru = RecencyList()
        # windows[i] = the node of the last i committed tokens, or None (Part 2).
        self._windows: List[Optional[_Node]] = [None] * (self.ngram + 1)
        self._windows[0] = self._root
        # The matching state: the longest suffix of the committed tokens in the trie.
        self._matching = self._root
        # Failure-link epochs (Part 3).
        self._epochs = [0] * EPOCH_SLOTS
        self._stats = dict(
            committed_tokens=0, inserts=0, evictions=0, retrieves=0, fail_hits=0, fail_misses=0
        )
        self._torn = False

    def len(self) -> int:
        """Trie nodes in use, the root excluded (always ``<= max_nodes``)."""
        self._check_intact()
        return self._len

    def __len__(self) -> int:
        return self.len()

    def __repr__(self) -> str:
        # repr() must never raise, even on a torn automaton: it says so instead.
        state = " (torn: call reset())" if self._torn else f" with {self._len} nodes"
        return (
            f"Automaton(max_nodes={self.max_nodes}, ngram={self.ngram}, "
            f"min_border_depth={self.min_border_depth}){state}"
        )

    def stats(self) -> Dict[str, int]:
        """Counters and sizes: nodes, max_nodes, ngram, min_border_depth, committed_tokens,
        inserts, evictions, retrieves, fail_hits, fail_misses, matching_depth."""
        self._check_intact()
        return dict(
            nodes=self._len,
            max_nodes=self.max_nodes,
            ngram=self.ngram,
            min_border_depth=self.min_border_depth,
            committed_tokens=self._stats["committed_tokens"],
            inserts=self._stats["inserts"],
            evictions=self._stats["evictions"],
            retrieves=self._stats["retrieves"],
            fail_hits=self._stats["fail_hits"],
            fail_misses=self._stats["fail_misses"],
            matching_depth=self._matching.depth,
        )

    # ==================================================================================
    # Part 2. Committing tokens: the open windows (spec step 9, "ours").
    #
    # The official code inserts, for each committed token, the whole n-gram that ends
    # there. I do the same amount of work differently: I keep the *open windows*, the
    # nodes of the last 1, 2, ..., n committed tokens, and extend each by one node.
    #
    #   committed: ... x  y  z      new token: t          (n = 3)
    #
    #   before:  windows[1] = [z]   windows[2] = [y z]   windows[3] = [x y z]
    #   after:   windows[1] = [t]   windows[2] = [z t]   windows[3] = [y z t]
    #            (child t of root)  (child t of [z])     (child t of [y z])
    #
    # [x y z] is not extended: [x y z t] would be longer than n. Each extension adds 1
    # to the child's frequency (creating it if needed), so freq(node) = the number of
    # occurrences of its string, and a repeat is retrievable as soon as it is committed.
    #
    # Eviction can remove a window's node. Then that window is *closed* and is not
    # extended: its string is no longer in the trie, so neither is any extension of it.
    # I process the windows longest first; then a creation (length i + 1) can never
    # re-create the string of a shorter window still to come, and this invariant holds:
    #
    #     windows[i] is open  <=>  the last i committed tokens are a path of the trie.
    #
    # So the matching state (the longest suffix of the committed tokens in the trie) is
    # simply the longest open window, and nothing ever points at an evicted node.
    # ==================================================================================

    def extend(self, tokens: Iterable[int]) -> None:
        """Commit ``tokens`` (spec step 9) and advance the matching state.

        Args:
            tokens: a list, tuple, 1-D integer numpy array or any iterable of ints in
                ``[0, 2**32 - 1]``, shape ``(k,)``.

        Raises:
            TypeError: ``tokens`` is not iterable, or an element is not an int.
            ValueError: an element is out of range. Nothing is committed in either case.
            RuntimeError: the automaton is torn (see ``reset()``).

        All or nothing: if anything interrupts the call (``KeyboardInterrupt`` included),
        every change it made is undone before the exception propagates (Part 7).
        """
        # Compute first: check every token (this may raise; nothing has changed yet).
        tokens = _read_tokens(tokens)
        self._check_intact()
        # Then apply, watched by the undo module, which takes every change back if the
        # call is interrupted (Part 7).
        all_or_nothing(self, self.extend_trusted, tokens)

    def extend_trusted(self, tokens: List[int]) -> None:
        """``extend()`` for a list of checked ints, without the checks and without the undo
        (the Rust core's ``extend``): the drafter's commit."""
        for token in tokens:
            self._extend_one(token)

    def _extend_one(self, token: int) -> None:
        self._stats["committed_tokens"] += 1
        # The windows of the next step; windows[0] (the empty string) is always the root.
        new_windows: List[Optional[_Node]] = [None] * (self.ngram + 1)
        new_windows[0] = self._root
        # Longest window first (see above). Window ngram cannot grow, so start at ngram - 1.
        for i in range(self.ngram - 1, -1, -1):
            window = self._windows[i]
            # Closed window, or its node was evicted earlier in this very step.
            if window is None or not window.alive:
                continue
            child = window.children.get(token)
            if child is not None:
                # Seen before: one more occurrence.
                child.freq += 1
            else:
                if self._len == self.max_nodes:
                    # Full. I first make the window's own path the most recent, so that the
                    # victim is not on it: that path has at most ngram - 1 nodes and the
                    # trie holds max_nodes >= ngram of them, so the least recent is elsewhere.
                    self._touch_path(window)
                    self._evict_lru_leaf()
                child = self._insert(window, token)
            # Child first, then its ancestors: a parent is never less recent than a child.
            self._touch_path(child)
            new_windows[i + 1] = child
        self._windows = new_windows
        # The matching state is the longest open window (a later eviction in this step
        # may have closed some of the new windows, hence the `alive` test).
        self._matching = self._root
        for i in range(self.ngram, 0, -1):
            window = new_windows[i]
            if window is not None and window.alive:
                self._matching = window
                break

    def _insert(self, parent: _Node, token: int) -> _Node:
        """Create the child ``token`` of ``parent`` with frequency 1."""
        child = _Node(token, parent, parent.depth + 1)
        child.freq = 1
        parent.children[token] = child
        # A new string ending in `token` may be a longer proper suffix of some node's
        # string, so failure links of nodes ending in `token` may change (Part 3).
        self._epochs[token % EPOCH_SLOTS] += 1
        self._len += 1
        self._stats["inserts"] += 1
        return child

    # ==================================================================================
    # Part 3. Lazy failure links.
    #
    # fail(s) = the longest *proper* suffix of s's string that is also a path of the trie.
    # For s = [b a c] in the trie of Part 1, the proper suffixes are [a c] and [c]; [a c]
    # is in the trie, so fail([b a c]) = [a c]. Following fail links from a state visits
    # every suffix that is in the trie, longest first, down to the root:
    #
    #     [y z t]  --fail-->  [z t]  --fail-->  [t]  --fail-->  (root)
    #
    # The classic recurrence: if s = p + [t], walk p's failure chain q = fail(p),
    # fail(fail(p)), ... and stop at the first q that has a child t; that child is
    # fail(s) (the root if none has one). A depth-1 node fails to the root.
    #
    # An eager Aho-Corasick build computes all links at once, breadth-first. Our trie
    # changes every token, so I compute a link only when asked and cache it. When is a
    # cached link stale? fail(s) depends only on which proper suffixes of s are present,
    # and every non-empty suffix of s ends with s's last token. So it can only change when
    # a node *ending with that token* is created or evicted. I keep a counter (an epoch)
    # per token, bumped by every such creation or eviction, and a cached link is valid
    # while its stamp equals the epoch of its token. To keep the table small, tokens share
    # EPOCH_SLOTS counters (t % 1024); sharing only causes extra recomputation, never a
    # wrong link. The tests compare every link with an eager build after every operation.
    # ==================================================================================

    def _fail(self, node: _Node) -> _Node:
        """The failure link of ``node`` (not the root), from the cache if still valid."""
        epoch = self._epochs[node.token % EPOCH_SLOTS]
        if node.fail_stamp == epoch:
            self._stats["fail_hits"] += 1
            return node.fail  # type: ignore[return-value]
        self._stats["fail_misses"] += 1
        if node.depth == 1:
            # The only proper suffix of a one-token string is the empty string.
            link = self._root
        else:
            # depth >= 2, so the parent is not the root. The recursion goes at most
            # ngram levels deep (each call is on a shallower node).
            q = self._fail(node.parent)  # type: ignore[arg-type]
            while True:
                child = q.children.get(node.token)
                if child is not None:
                    link = child
                    break
                if q is self._root:
                    link = self._root
                    break
                q = self._fail(q)
        node.fail = link
        node.fail_stamp = epoch
        return link

    # ==================================================================================
    # Part 4. LRU eviction in O(1).
    #
    # All non-root nodes sit on a recency list (``lru.RecencyList``): a doubly linked
    # list whose links live on the nodes themselves (`newer`, `older`), so "move to the
    # head" and "who is at the tail?" change a few links, whatever the trie's size:
    #
    #   head (most recent)                                    tail (least recent)
    #     [t] <-> [z t] <-> [y z t] <-> ... <-> [b a] <-> [a b a]
    #
    # The invariant: a parent is never less recent than its children. I keep it by
    # touching bottom-up: a node, then its parent, ..., up to depth 1. The parent is
    # touched last, so it lands nearer the head than the child. Extending window [y z]
    # with t, say, touches [y z t], then [y z], then [y]:
    #
    #   after:  [y] <-> [y z] <-> [y z t] <-> ...older nodes...   (parent before child)
    #
    # Why it matters: then the tail has no children (a child would be even less recent
    # than the tail, and nothing is). So the least recent node is always a *leaf*, I can
    # evict it in O(1) without searching, and removing it keeps the trie a trie. (The
    # official code can recycle an internal node when its assertion is compiled out; here
    # the check is an `if`, so it holds under `python -O` too, and the tests check the
    # invariant after every operation.)
    # ==================================================================================

    def _touch_path(self, node: _Node) -> None:
        """Make ``node`` and then each of its ancestors the most recent (root excluded)."""
        touch = self._lru.touch
        while node.parent is not None:
            # To the head (a new node joins the list here).
            touch(node)
            node = node.parent

    def _evict_lru_leaf(self) -> None:
        """Recycle the least recently used node (a leaf, by the touch order)."""
        victim = self._lru.least_recent()
        # Never true if the touches are right; a plain `if`, so `python -O` keeps it.
        if victim is None or victim.children:
            raise RuntimeError("the LRU tail must be a leaf (a bug in the twin: please report it)")
        self._lru.remove(victim)
        del victim.parent.children[victim.token]  # type: ignore[union-attr]
        # A string ending in victim.token vanished: links that pointed at it are stale.
        self._epochs[victim.token % EPOCH_SLOTS] += 1
        # Windows holding the victim see this flag and count as closed.
        victim.alive = False
        self._len -= 1
        self._stats["evictions"] += 1

    # ==================================================================================
    # Part 5. The retrieval tree (spec step 2).
    #
    # Borders. The failure chain of the matching state lists every suffix of the
    # committed tokens that is in the trie. If such a suffix has a child for the root
    # token, that child is a *border*: the context seen so far, followed by the root,
    # occurred before. A border of depth >= min_border_depth (2: at least one context
    # token) counts. Whatever followed a border earlier is a candidate continuation:
    #
    #   committed: 5 1 2 3 7 9 1 2 4 7 5 1 2 3 7 9 1      root = 2, ngram = 4
    #   chain:     [3 7 9 1] -> [7 9 1] -> [9 1] -> [1] -> (root)
    #   borders:   [7 9 1 2] (no children), [9 1 2] -> 4, [1 2] -> 3 (x2), 4 (x1)
    #
    # (Those suffixes are also exactly the open windows of Part 2: the Rust core reads the
    # borders from its windows and follows no failure link. Same states, fewer steps; here
    # I walk the chain, which is what Aho-Corasick matching is about.)
    #
    # Merging. A continuation is identified by the tokens after the root, whatever border
    # it was found under; found under several, it is one node whose frequency is the
    # largest of theirs. Here the candidates below the root are 3 (freq 2) and 4 (freq 1):
    #
    #        2 (root)
    #       / \
    #     3:2  4:1          (and below them 7:2 and 7:1, from [1 2 3 7] and [1 2 4 7])
    #
    # Selection. I keep the capacity - 1 best nodes (the root makes capacity): higher
    # frequency first, then shallower, then the one whose parent was kept earlier, then
    # the smaller token. A child never occurs more often than its parent, and on a tie it
    # is deeper, so a child always ranks below its parent: a best-first search with a
    # heap, which offers a node's children once the node is kept, keeps exactly the best
    # nodes, and the kept set is prefix-closed.
    # ==================================================================================

    def _collect_borders(self, root: int) -> List[_Node]:
        borders = []
        state = self._matching
        while True:
            child = state.children.get(root)
            if child is not None and child.depth >= self.min_border_depth:
                borders.append(child)
            if state is self._root:
                return borders
            state = self._fail(state)

    def borders(self, root: int) -> List[List[int]]:
        """The borders for ``root``, longest first, as token strings (a suffix of the
        committed tokens followed by ``root``).

        Raises:
            TypeError, ValueError: ``root`` is not an int in ``[0, 2**32 - 1]``.
            RuntimeError: the automaton is torn (see ``reset()``).
        """
        root = check_token("root", None, int_value(root, "root"))
        self._check_intact()
        return [b.path() for b in self._collect_borders(root)]

    def retrieve(self, root: int, capacity: int) -> List[List[int]]:
        """The retrieval tree for ``root`` (spec step 2), as root-to-leaf token paths.

        Args:
            root: the root token id, in ``[0, 2**32 - 1]``.
            capacity: most distinct nodes in the tree, **the root included**, in
                ``[1, MAX_CAPACITY]`` = ``[1, 4096]`` (the draft tree's capacity C).

        Returns:
            Paths (lists of token ids), each starting with ``root``, depth-first, children
            in selection order (so the first path follows the best nodes). Without any
            border (or with ``capacity == 1``) the result is ``[[root]]``.

        Raises:
            TypeError, ValueError: bad ``root`` or ``capacity`` (nothing changes).
            RuntimeError: the automaton is torn (see ``reset()``).

        Only the failure-link cache and the counters change. An interrupted call may have
        filled (and counted) part of the cache: every cached link stays correct (Part 3
        writes the link before its stamp), so later results are the same.
        """
        return self.retrieve_counted(root, capacity)[0]

    def retrieve_counted(self, root: int, capacity: int) -> Tuple[List[List[int]], List[List[int]]]:
        """``retrieve()`` plus the frequency of every node of every path.

        Returns:
            ``(paths, freqs)``: ``paths`` as ``retrieve()`` returns them, and ``freqs[i][j]``
            the frequency of node ``j`` of path ``i`` in the retrieval tree: the merged
            frequency it was selected with, and for the root (``j = 0``) the largest
            frequency of the borders (0 without a border). Along a path frequencies never
            grow, so ``freqs[i][j + 1] / freqs[i][j]`` is how often that continuation
            followed that context: the drafter's acceptance estimates read it
            (``racer_ref.reference.expected_tree``).

        Raises: as ``retrieve()``.
        """
        root = check_token("root", None, int_value(root, "root"))
        capacity = check_capacity(capacity)
        self._check_intact()
        return self.retrieve_trusted(root, capacity, counted=True)

    def retrieve_trusted(self, root: int, capacity: int, counted: bool = False) -> Tuple[List[List[int]], Any]:
        """``retrieve_counted()`` without the checks (the Rust core's ``retrieve_trusted``),
        for a caller that checked ``root``, ``capacity`` and ``_check_intact()`` itself:
        the drafter, once per step. The frequencies are for the acceptance estimates
        alone: written when ``counted``, else ``None`` (the paper's step)."""
        self._stats["retrieves"] += 1
        borders = self._collect_borders(root)
        # kept[r] = [token, depth, children ranks, freq]; rank 0 is the root, which stands
        # for all borders at once: its frequency is the largest of theirs.
        kept: List[list] = [[root, 0, [], max((b.freq for b in borders), default=0)]]
        # Heap entries: (-freq, depth, parent rank, token, trie nodes merged into it).
        # (parent rank, token) is unique, so the trie-node list is never compared.
        heap: List[tuple] = []
        if capacity > 1:
            self._offer_children(heap, 0, 0, borders)
        while len(kept) < capacity and heap:
            neg_freq, depth, parent_rank, token, nodes = heapq.heappop(heap)
            rank = len(kept)
            kept.append([token, depth, [], -neg_freq])
            kept[parent_rank][2].append(rank)
            if len(kept) < capacity:
                self._offer_children(heap, rank, depth, nodes)
        # Depth-first walk of the kept tree, children in the order they were kept.
        paths: List[List[int]] = []
        freqs: Optional[List[List[int]]] = [] if counted else None
        self._walk(kept, 0, [], paths, [], freqs)
        return paths, freqs

    @staticmethod
    def _offer_children(heap: List[tuple], rank: int, depth: int, nodes: List[_Node]) -> None:
        """Push the children of kept node ``rank`` (the trie ``nodes`` it merges) as
        candidates, merged by token; a merged candidate has the largest frequency."""
        merged: Dict[int, list] = {}
        for node in nodes:
            for token, child in node.children.items():
                entry = merged.setdefault(token, [0, []])
                entry[0] = max(entry[0], child.freq)
                entry[1].append(child)
        for token, (freq, children) in merged.items():
            heapq.heappush(heap, (-freq, depth + 1, rank, token, children))

    @classmethod
    def _walk(cls, kept: List[list], rank: int, prefix: List[int], out: List[List[int]],
              freq_prefix: List[int], freqs_out: Optional[List[List[int]]]) -> None:
        path = prefix + [kept[rank][0]]
        # The frequencies along the path, only when asked for (freqs_out not None).
        freqs = freq_prefix if freqs_out is None else freq_prefix + [kept[rank][3]]
        if not kept[rank][2]:
            out.append(path)
            if freqs_out is not None:
                freqs_out.append(freqs)
        for child in kept[rank][2]:
            cls._walk(kept, child, path, out, freqs, freqs_out)

    # ==================================================================================
    # Part 6. The canonical dump.
    #
    # To compare this twin with the Rust core structurally (not only by results), both
    # print the whole automaton the same way: parameters, matching state, open windows,
    # then one line per state in depth-first order, children by token id, with its
    # frequency, failure link and LRU rank (0 = most recent). No memory addresses or slot
    # numbers appear, so the text depends only on the automaton's meaning.
    # ==================================================================================

    def dump(self) -> str:
        """Canonical text of the whole automaton (fills the failure-link cache).

        Raises:
            RuntimeError: the automaton is torn (see ``reset()``).
        """
        self._check_intact()
        order: List[_Node] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            order.append(node)
            # Push in reverse token order so that the smallest token is visited first.
            stack.extend(node.children[t] for t in sorted(node.children, reverse=True))
        # LRU rank: 0 for the head (most recent), counting towards the tail.
        rank = {node: r for r, node in enumerate(self._lru.iter())}

        def fmt(path: List[int]) -> str:
            return "[" + " ".join(map(str, path)) + "]"

        open_windows = [
            str(i) for i in range(1, self.ngram + 1)
            if self._windows[i] is not None and self._windows[i].alive  # type: ignore[union-attr]
        ]
        lines = [
            f"Automaton(max_nodes={self.max_nodes}, ngram={self.ngram}, "
            f"min_border_depth={self.min_border_depth})",
            f"nodes={self._len} committed_tokens={self._stats['committed_tokens']} "
            f"matching={fmt(self._matching.path())}",
            f"open_windows=[{' '.join(open_windows)}]",
        ]
        for node in order:
            if node is self._root:
                lines.append("state [] root")
                continue
            link = self._fail(node)
            lines.append(
                f"state {fmt(node.path())} freq={node.freq} fail={fmt(link.path())} "
                f"lru={rank[node]}"
            )
        return "\n".join(lines) + "\n"

    # ==================================================================================
    # Part 7. All or nothing: an interrupted call changes nothing.
    #
    # extend() runs its change through ``undo.all_or_nothing``, a wrapper that logs the undo
    # of every change before it is made (the code above records nothing: the wrapper saves
    # the windows' children before each _extend_one and watches the recency list):
    # interrupted anywhere (a Ctrl-C in a notebook), the log is played backwards and the
    # automaton is exactly as before the call. A second interrupt during that rollback
    # leaves it *torn*: every call then raises a RuntimeError naming reset(). The
    # machinery, and why it works, is in ``undo``.
    #
    # Queries (retrieve, borders, dump) only fill the failure-link cache and count; a
    # cached link is valid or marked stale at every line, so they need no undo log.
    # ==================================================================================

    #: What a torn automaton says (``undo.check_intact``).
    TORN = ("Automaton: an earlier call was interrupted while it was being undone, so "
            "the automaton is in an inconsistent state; call reset() to start afresh")

    def _check_intact(self) -> None:
        """Raise ``RuntimeError`` naming ``reset()`` if a rollback did not finish."""
        check_intact(self)

    # ==================================================================================
    # Part 8. A self-check of the internal structure, for the tests.
    #
    # dump() shows the automaton's meaning; this looks at the machinery behind it: the
    # recency list's links, the parent / children pointers and the node count. O(size),
    # and written with `if` + raise, not `assert`, so that `python -O` checks it too.
    # ==================================================================================

    def _check_invariants(self) -> None:
        """Raise ``RuntimeError`` if a structural invariant is broken.

        Checked: the recency list is consistent (``RecencyList.check``) and holds exactly
        the trie's non-root nodes, ``len() <= max_nodes``; every child points back at its
        parent one level deeper, is alive, and is less recent than its parent (so the tail
        is a leaf); the open windows and the matching state are alive trie nodes.
        """
        self._check_intact()
        # First the list on its own: links that point back, ends, length.
        self._lru.check()
        # Then list and trie together: rank 0 = head. A depth-first walk over the trie
        # visits every node once; each must be on the list, below its parent in recency.
        rank = {node: r for r, node in enumerate(self._lru.iter())}
        count, stack = 0, [self._root]
        while stack:
            node = stack.pop()
            for token, child in node.children.items():
                count += 1
                if child.parent is not node or child.token != token or child.depth != node.depth + 1:
                    raise RuntimeError(f"trie: bad parent/token/depth at {child.path()}")
                if not child.alive or child not in rank:
                    raise RuntimeError(f"trie: node {child.path()} is dead or not on the recency list")
                if node is not self._root and rank[node] >= rank[child]:
                    raise RuntimeError(f"LRU invariant: parent of {child.path()} is less recent")
                if child.depth > self.ngram:
                    raise RuntimeError(f"trie: node {child.path()} deeper than ngram")
                stack.append(child)
        # Every trie node is on the list and nothing else is: the counts agree.
        if not count == self._len == len(rank) <= self.max_nodes:
            raise RuntimeError(
                f"sizes: {count} trie nodes, len() = {self._len}, {len(rank)} on the recency "
                f"list, max_nodes = {self.max_nodes}"
            )
        # Nothing that extend() or retrieve() will start from may point outside the trie.
        for node in [self._matching] + [w for w in self._windows if w is not None and w.alive]:
            if node is not self._root and node.parent.children.get(node.token) is not node:  # type: ignore[union-attr]
                raise RuntimeError(f"windows: {node.path()} is not in the trie")


# ======================================================================================
# Walkthrough: python -m racer_ref.reference.automaton
# ======================================================================================


def _walkthrough() -> None:
    import re

    words = "the cat sat on the mat . the cat sat on the rug . the cat ate the rat . the cat".split()
    vocab: Dict[str, int] = {}
    ids = [vocab.setdefault(w, len(vocab)) for w in words]
    names = {i: w for w, i in vocab.items()}

    def show(path: List[int]) -> str:
        return " ".join(names.get(t, str(t)) for t in path) or "(root)"

    def show_dump_line(line: str) -> str:
        # Replace every "[id id ...]" of a dump line by the words.
        return re.sub(r"\[([0-9 ]*)\]", lambda m: f"[{show([int(t) for t in m.group(1).split()])}]", line)

    print("Stage 1. Commit the tokens (one id per word), ngram = 5:")
    print("   ", " ".join(words))
    automaton = Automaton(max_nodes=DEFAULT_MAX_NODES, ngram=5)
    automaton.extend(ids)
    print(f"    {len(ids)} tokens -> {automaton.len()} trie nodes (every substring of <= 5 words)")
    print("    a few states (frequency = occurrences, failure link, LRU rank):")
    for line in automaton.dump().splitlines():
        if line.startswith(("state [0]", "state [0 1]", "state [0 1 2", "state [0 1 6")):
            print("     ", show_dump_line(line))

    print("\nStage 2. The matching state and its failure chain (every suffix in the trie):")
    state = automaton._matching
    chain = []
    while True:
        chain.append(f"[{show(state.path())}]")
        if state is automaton._root:
            break
        state = automaton._fail(state)
    print("   ", " -> ".join(chain))

    root = vocab["sat"]
    print(f"\nStage 3. Borders for the root '{names[root]}' (a context suffix, then the root):")
    for border in automaton.borders(root):
        print(f"    [{show(border)}]")

    for capacity in (64, 4):
        print(f"\nStage 4. Retrieval tree for the root '{names[root]}', capacity {capacity} "
              "(root included):")
        for path in automaton.retrieve(root, capacity):
            print("   ", show(path))

    print("\nStage 5. The same text with max_nodes = 12: LRU eviction of leaves")
    small = Automaton(max_nodes=12, ngram=5)
    small.extend(ids)
    st = small.stats()
    print(f"    inserts={st['inserts']} evictions={st['evictions']} nodes={st['nodes']}")
    print("    (a node that was evicted and re-created counts from its re-creation)")
    for line in small.dump().splitlines()[1:]:
        print("     ", show_dump_line(line) if line.startswith(("state", "nodes")) else line)

    print("\nStage 6. stats() of the first automaton:", automaton.stats())


if __name__ == "__main__":
    _walkthrough()
