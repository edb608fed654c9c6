"""The draft tree with the most expected accepted tokens, written to be read
(twin of ``rust/src/expected_tree.rs``; beyond the paper).

Why. The paper fills its capacity ``C`` in a fixed order: every retrieval node first, then
the logits tree by Eq. 3's breadth rule. At ``C = 64`` on a GPU the order hardly matters.
On a CPU, where a verify pass over 64 nodes costs several times a pass over 8, the best
capacity is small and the order decides what the few nodes are worth.

The idea in three moves::

    1. estimate   every candidate child gets p = P(target picks it | its parent was accepted),
                  learned online from the verify passes (AcceptanceEstimates below)
    2. choose     keep the C nodes with the highest path probability
                  P(node) = product of p along the path from the root (best-first search)
    3. predict    E[a + 1] = 1 + sum of the kept nodes' path probabilities

Move 2 gives a tree: a child's path probability is its parent's times p <= 1, so a child
never beats its parent, and a best-first search that starts at the root only ever adds
nodes whose parent is already in (the kept set is prefix-closed by construction).

Move 3 is exact arithmetic on expectations: the accepted length ``a`` counts the accepted
nodes below the root, and node ``v`` is accepted exactly when its whole path is, with
probability ``P(v)``; so ``E[a] = sum over nodes of P(v)`` and the root (the bonus token)
adds 1. Keeping the nodes with the largest ``P(v)`` therefore maximises ``E[a + 1]`` for
the given ``C`` (under the estimates).

Where the labels come from. Every node of the tree is verified in the same forward pass,
so for every verified node ``u`` we know the target's choice after it (greedy: the top-1
of ``u``'s row). Each *candidate* child ``c`` of ``u`` (kept in the tree or not) is then a
labelled sample: ``label = (token(c) == target's choice at u)``. Dozens per step, for free.
The drafter remembers the tree it drafted; the ``observe()`` call that follows (the loop
feeds it the tree's tokens and their top-k rows) is matched to that tree and turned into
labels (``learn``). The loop itself knows nothing of this.

The candidates of a node ``u`` (``candidate_children``), in a fixed order:

    retrieval children   the children of u's node in the retrieval tree (if u is in it),
                         with their frequencies: freq(child) / freq(u) is how often that
                         continuation followed that context
    logits children      the copy-logit row of u's token, rank 0..k-1 (for the root in
                         last-logit mode: last_topk)
    both                 a token in both lists is one candidate, with both features

Features become one of ``NUM_BUCKETS`` integer buckets; each bucket keeps two integer
counts (samples seen, samples accepted), and its estimate is

    p = (accepted + prior_accepted) / (seen + prior_seen)

a smoothed frequency that starts at a prior guess and follows the data. Counts are
integers and the formula is one float division, so the Rust core computes bit-identical
estimates, path probabilities and trees (the differential tests require identical trees).
"""

from __future__ import annotations

import heapq
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from racer_ref.reference.draft_tree import TreeBuilder, build_trusted
from racer_ref.tree import SOURCE_LOGITS, SOURCE_RETRIEVAL, DraftTree

# ------------------------------------------------------------------------------ buckets
#
# A candidate's features, and the bucket they fall into:
#
#   logits only      rank r in the row (0 = the target's top-1 last time) and the child's
#                    depth d:   bucket = min(r, 7) * 4 + min(d, 4) - 1          (32 buckets)
#   retrieval only   ratio level q = min(3, 4 * freq(child) // freq(parent)) (q = 3: the
#                    continuation followed at least 3 times in 4) and support s = 0, 1, 2
#                    for freq(parent) = 1, 2-3, >= 4 (a ratio of 1/1 is weak evidence):
#                               bucket = 32 + q * 3 + s                         (12 buckets)
#   both             bucket = 44 + min(r, 3) * 4 + q                            (16 buckets)

#: Logits ranks with a bucket of their own (rank 7 and beyond share the last one).
MAX_RANK = 8
#: Logits depths with a bucket of their own (depth 4 and deeper share the last one).
MAX_DEPTH = 4
#: Levels of the retrieval ratio freq(child) / freq(parent): [0, 1/4), ..., [3/4, 1].
RATIO_LEVELS = 4
#: Levels of a retrieval parent's frequency: 1, 2-3, 4 or more.
SUPPORT_LEVELS = 3
#: Logits ranks with a bucket of their own among nodes proposed by both trees.
BOTH_RANKS = 4
RETRIEVAL_OFFSET = MAX_RANK * MAX_DEPTH  # 32
BOTH_OFFSET = RETRIEVAL_OFFSET + RATIO_LEVELS * SUPPORT_LEVELS  # 44
#: Number of buckets (60).
NUM_BUCKETS = BOTH_OFFSET + BOTH_RANKS * RATIO_LEVELS
#: When a bucket has seen this many samples, both its counts are halved (integer
#: division): old samples fade and the estimate keeps following the text.
HALVE_AT = 4096
#: Calibration bins over the predicted probability: [0, 0.1), [0.1, 0.2), ..., [0.9, 1].
CALIBRATION_BINS = 10


def ratio_level(freq: int, parent_freq: int) -> int:
    """``min(3, 4 * freq // parent_freq)``: the retrieval ratio in quarters."""
    return min(RATIO_LEVELS - 1, RATIO_LEVELS * freq // parent_freq)


def support_level(parent_freq: int) -> int:
    """0, 1, 2 for a retrieval parent seen 1, 2-3, 4+ times."""
    return 0 if parent_freq <= 1 else (1 if parent_freq <= 3 else 2)


def candidate_bucket(rank: int, freq: int, parent_freq: int, depth: int) -> int:
    """The bucket of a candidate child at ``depth`` (>= 1).

    Args:
        rank: its rank in the parent's copy-logit row, or -1 if it is not in the row.
        freq, parent_freq: its and its parent's frequency in the retrieval tree, or
            ``freq = 0`` if it is not a retrieval child (then ``parent_freq`` is unused).
    """
    if freq > 0 and rank >= 0:
        return BOTH_OFFSET + min(rank, BOTH_RANKS - 1) * RATIO_LEVELS + ratio_level(freq, parent_freq)
    if freq > 0:
        return RETRIEVAL_OFFSET + ratio_level(freq, parent_freq) * SUPPORT_LEVELS + support_level(parent_freq)
    return min(rank, MAX_RANK - 1) * MAX_DEPTH + min(depth, MAX_DEPTH) - 1


def bucket_prior(bucket: int) -> Tuple[int, int]:
    """``(prior_accepted, prior_seen)`` of a bucket: our guess before any sample, worth a
    few samples. Logits rank r: 1 / (r + 2); retrieval level q: (q + 1) / 5; both:
    (q + 2) / (r + 6). Always ``0 < prior_accepted < prior_seen``, so every estimate stays
    strictly between 0 and 1."""
    if bucket >= BOTH_OFFSET:
        rank, level = divmod(bucket - BOTH_OFFSET, RATIO_LEVELS)
        return level + 2, rank + 6
    if bucket >= RETRIEVAL_OFFSET:
        level = (bucket - RETRIEVAL_OFFSET) // SUPPORT_LEVELS
        return level + 1, 5
    rank = bucket // MAX_DEPTH
    return 1, rank + 2


class AcceptanceEstimates:
    """Per-bucket acceptance counts and the calibration record (integers, plus one float
    sum per calibration bin).

    ``estimate(b)`` is ``(accepted[b] + a0) / (seen[b] + n0)`` with the bucket's prior
    ``(a0, n0)``; ``record(b, label)`` adds one sample, after noting the estimate it had
    in the calibration bins (so the calibration is "predicted before seeing the label").
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self.seen = [0] * NUM_BUCKETS
        self.accepted = [0] * NUM_BUCKETS
        self.calibration_seen = [0] * CALIBRATION_BINS
        self.calibration_accepted = [0] * CALIBRATION_BINS
        self.calibration_predicted = [0.0] * CALIBRATION_BINS  # sum of the predictions
        self.num_labels = 0

    def estimate(self, bucket: int) -> float:
        """P(accepted | parent accepted) for a candidate in ``bucket``."""
        a0, n0 = bucket_prior(bucket)
        return (self.accepted[bucket] + a0) / (self.seen[bucket] + n0)

    def record(self, bucket: int, label: bool) -> None:
        """One labelled sample: was a candidate of ``bucket`` the target's choice?"""
        p = self.estimate(bucket)
        b = min(CALIBRATION_BINS - 1, int(p * CALIBRATION_BINS))
        self.calibration_seen[b] += 1
        self.calibration_accepted[b] += int(label)
        self.calibration_predicted[b] += p
        self.seen[bucket] += 1
        self.accepted[bucket] += int(label)
        self.num_labels += 1
        if self.seen[bucket] >= HALVE_AT:
            self.seen[bucket] //= 2
            self.accepted[bucket] //= 2


# ------------------------------------------------------------------------ retrieval trie


class RetrievalTrie:
    """The retrieval tree as a trie with frequencies (node 0 is the root).

    Built from ``Automaton.retrieve_counted``'s paths: inserting them one after the other
    rebuilds the automaton's kept tree, children in selection order.
    """

    def __init__(self, root: int, paths: Sequence[Sequence[int]] = (), freqs: Sequence[Sequence[int]] = ()) -> None:
        self.tokens = [int(root)]
        self.freqs = [int(freqs[0][0]) if len(freqs) else 0]
        self.children: List[List[int]] = [[]]
        for path, fr in zip(paths, freqs):
            node = 0
            for token, freq in zip(path[1:], fr[1:]):
                node = self._child_or_new(node, int(token), int(freq))

    def _child_or_new(self, node: int, token: int, freq: int) -> int:
        for c in self.children[node]:
            if self.tokens[c] == token:
                return c
        self.tokens.append(token)
        self.freqs.append(freq)
        self.children.append([])
        self.children[node].append(len(self.tokens) - 1)
        return len(self.tokens) - 1


def candidate_children(token: int, link: int, trie: RetrievalTrie, table: Any,
                       root_row: Optional[Sequence[int]]) -> List[List[int]]:
    """The candidate children of a tree node, in the fixed order both twins use.

    Args:
        token: the node's token.
        link: the node's node in ``trie`` (-1 if it is not a retrieval node); the root is 0.
        trie: this step's ``RetrievalTrie``.
        table: the copy-logit table, or ``None`` (retrieval only).
        root_row: last-logit mode: the row that replaces the root's (``link == 0`` and the
            node is the root); ``None`` otherwise.

    Returns:
        ``[token, rank, retrieval child]`` per candidate: first the retrieval children (rank
        -1 until the row names them too), then the row's other ids in rank order (retrieval
        child -1). An id repeated in the row counts at its first rank only.
    """
    out: List[List[int]] = []
    if link >= 0:
        out = [[trie.tokens[c], -1, c] for c in trie.children[link]]
    if root_row is not None and link == 0:
        row: Sequence[int] = root_row
    else:
        row = [] if table is None else table.row_trusted(token)
    for rank, t in enumerate(row):
        for cand in out:
            if cand[0] == t:
                if cand[1] < 0:  # a retrieval child the row names too: "both"
                    cand[1] = rank
                break  # (else: a repeated id in the row, already ranked)
        else:
            out.append([int(t), rank, -1])
    return out


def _bucket(cand: List[int], link: int, trie: RetrievalTrie, depth: int) -> int:
    """The bucket of candidate ``[token, rank, retrieval child]`` of a node at ``depth - 1``
    whose trie node is ``link``."""
    rc = cand[2]
    freq = trie.freqs[rc] if rc >= 0 else 0
    parent_freq = trie.freqs[link] if rc >= 0 else 0
    return candidate_bucket(cand[1], freq, parent_freq, depth)


# ------------------------------------------------------------------------- annotations


class Annotation:
    """What a drafter remembers about the tree it drafted, node by node in the tree's
    (breadth-first) order: token, parent, depth, trie node (-1: none), conditional
    estimate ``p`` and path probability ``P``; plus the trie and the root's row used."""

    def __init__(self, trie: RetrievalTrie, root_row: Optional[Sequence[int]]) -> None:
        self.trie = trie
        self.root_row = None if root_row is None else list(root_row)
        self.tokens: List[int] = []
        self.parents: List[int] = []
        self.depths: List[int] = []
        self.links: List[int] = []
        self.cond: List[float] = []
        self.path: List[float] = []

    def expected_tokens(self) -> float:
        """``E[a + 1] = 1 + sum of the kept nodes' path probabilities`` (root excluded)."""
        total = 1.0
        for q in self.path[1:]:  # summed in node order, as in the Rust core
            total += q
        return total


def build_expected_tree(root: int, capacity: int, trie: RetrievalTrie, table: Any,
                        root_row: Optional[Sequence[int]],
                        estimates: AcceptanceEstimates) -> Tuple[DraftTree, Annotation]:
    """The ``capacity`` nodes with the highest path probability, as a ``DraftTree``.

    Best-first search: a heap of candidates keyed by path probability (ties: the candidate
    offered first wins; offers are numbered in order). Pop the best, make it a node, offer
    its candidate children. Nodes are created in pop order, so each node's children are in
    decreasing path probability in the flattened (breadth-first) tree.

    Args:
        root: the root token; capacity: at most this many nodes, root included (checked by
            the caller); trie, table, root_row: see ``candidate_children``; estimates: the
            drafter's ``AcceptanceEstimates`` (read only).

    Returns:
        ``(tree, annotation)``; ``annotation.path[i]`` is node i's path probability.
    """
    builder = TreeBuilder.trusted(root, capacity)
    # Per created node (creation order): trie node, conditional estimate, path probability.
    links, cond, path = [0], [1.0], [1.0]
    heap: List[tuple] = []
    seq = 0

    def offer_children(node: int) -> None:
        nonlocal seq
        depth = builder.depths[node] + 1
        for cand in candidate_children(builder.tokens[node], links[node], trie, table, root_row):
            p = estimates.estimate(_bucket(cand, links[node], trie, depth))
            q = path[node] * p
            # heapq is a min-heap: -q pops the highest path probability, seq breaks ties.
            heapq.heappush(heap, (-q, seq, node, cand[0], cand[1], cand[2], p))
            seq += 1

    offer_children(0)
    while heap and not builder.is_full():
        neg_q, _, parent, token, rank, rc, p = heapq.heappop(heap)
        source = (SOURCE_RETRIEVAL if rc >= 0 else 0) | (SOURCE_LOGITS if rank >= 0 else 0)
        node, _ = builder.insert_child(parent, token, source)  # always new: see above
        links.append(rc)
        cond.append(p)
        path.append(-neg_q)
        if not builder.is_full():
            offer_children(node)
    tree = builder.flatten()
    # The flattened order (the same breadth-first walk as TreeBuilder.flatten).
    order = [0]
    for node in order:
        order.extend(builder.children[node].values())
    ann = Annotation(trie, root_row)
    ann.tokens = tree.tokens.tolist()
    ann.parents = tree.parents.tolist()
    ann.depths = tree.depths.tolist()
    ann.links = [links[u] for u in order]
    ann.cond = [cond[u] for u in order]
    ann.path = [path[u] for u in order]
    return tree, ann


def annotate(tree: DraftTree, trie: RetrievalTrie, table: Any, root_row: Optional[Sequence[int]],
             estimates: AcceptanceEstimates) -> Annotation:
    """The same annotation for a tree built another way (the paper's merge), so that its
    nodes get path probabilities and its verify pass gives labels too.

    A node that is not among its parent's candidates (cannot happen for the trees our
    drafters build) gets the estimate of the last logits rank bucket.
    """
    ann = Annotation(trie, root_row)
    ann.tokens = tree.tokens.tolist()
    ann.parents = tree.parents.tolist()
    ann.depths = tree.depths.tolist()
    ann.links, ann.cond, ann.path = [0], [1.0], [1.0]
    cands: List[List[int]] = []
    last_parent = -1
    for i in range(1, len(ann.tokens)):
        u = ann.parents[i]
        if u != last_parent:  # breadth-first: the children of u are consecutive
            cands = candidate_children(ann.tokens[u], ann.links[u], trie, table, root_row)
            last_parent = u
        depth = ann.depths[i]
        bucket, link = (MAX_RANK - 1) * MAX_DEPTH + min(depth, MAX_DEPTH) - 1, -1
        for cand in cands:
            if cand[0] == ann.tokens[i]:
                bucket, link = _bucket(cand, ann.links[u], trie, depth), cand[2]
                break
        p = estimates.estimate(bucket)
        ann.links.append(link)
        ann.cond.append(p)
        ann.path.append(ann.path[u] * p)
    return ann


# ------------------------------------------------------------------------------- learning


def match_rows(ann: Annotation, tokens: Sequence[int]) -> Optional[List[int]]:
    """Which tree node each row of an ``observe()`` call is, or ``None`` if the call is not
    about this tree.

    Two shapes are recognised: every node of the tree in its order (the loop's default,
    ``observe_rejected=True``), or the accepted path, root first (``observe_rejected=False``).
    """
    n = len(ann.tokens)
    if len(tokens) == n and list(tokens) == ann.tokens:
        return list(range(n))
    if not len(tokens) or tokens[0] != ann.tokens[0]:
        return None
    rows = [0]
    for t in tokens[1:]:
        # The child of the previous row's node carrying t (breadth-first: parents first).
        nxt = next((i for i in range(rows[-1] + 1, n) if ann.parents[i] == rows[-1] and ann.tokens[i] == t), None)
        if nxt is None:
            return None
        rows.append(nxt)
    return rows


def learn(ann: Annotation, tokens: Sequence[int], topk: np.ndarray, table: Any,
          estimates: AcceptanceEstimates) -> int:
    """Turn one verify pass into labelled samples; returns how many.

    For each observed node u on the accepted path (rows matched by ``match_rows``), the
    target's choice is ``topk[row, 0]``, and every candidate child of u is one sample.
    Called before the copy-logit table takes the new rows: the candidates are the ones the
    draft saw.

    Why only the accepted path: the estimate we need is P(child is the target's choice |
    its parent was accepted). After a rejected node the target continues a text that will
    never exist, and a retrieval continuation of a wrong token is almost never what it
    predicts there; those labels would make long retrieval chains look worse than they are.
    The accepted path is found from the rows themselves: the root, then the child carrying
    the root's top-1, and so on (greedy verification accepts exactly that path).
    """
    rows = match_rows(ann, tokens)
    if rows is None:
        return 0
    count = 0
    # choice_at[u]: the target's top-1 at node u, for the nodes on the accepted path.
    choice_at = [-1] * len(ann.tokens)
    for row, u in enumerate(rows):
        parent = ann.parents[u]
        if u != 0 and (choice_at[parent] < 0 or ann.tokens[u] != choice_at[parent]):
            continue  # not on the accepted path
        choice = int(topk[row, 0])
        choice_at[u] = choice
        depth = ann.depths[u] + 1
        for cand in candidate_children(ann.tokens[u], ann.links[u], ann.trie, table, ann.root_row):
            estimates.record(_bucket(cand, ann.links[u], ann.trie, depth), cand[0] == choice)
            count += 1
    return count



class Estimator:
    """A drafter's acceptance estimates and its last draft's annotation (the Rust core's
    ``expected_tree::Estimator``): what ``tree="expected"`` and ``capacity="auto"``
    attach to a drafter (``Drafter.attach_estimator()``). The paper's step never runs it.

    A drafter with an estimator drafts through ``draft`` (this step's tree, annotated or
    chosen by path probability) and hands every ``observe()`` to ``learn`` first.
    """

    def __init__(self) -> None:
        self.estimates = AcceptanceEstimates()
        # The last draft's annotation, until the observe() call about it.
        self.last: Optional[Annotation] = None

    def draft(self, root: int, capacity: int, paths: List[List[int]], freqs: List[List[int]],
              table: Any, root_row: Optional[Sequence[int]], expected: bool) -> DraftTree:
        """This step's tree (arguments checked by the drafter): with ``expected`` the
        ``capacity`` nodes of highest path probability, else the paper's merge of
        ``paths`` and the logits tree; either way annotated for ``learn``."""
        trie = RetrievalTrie(root, paths, freqs)
        if expected:
            tree, self.last = build_expected_tree(root, capacity, trie, table, root_row, self.estimates)
            return tree
        tree = build_trusted(root, capacity, paths, table, root_row)
        self.last = annotate(tree, trie, table, root_row, self.estimates)
        return tree

    def learn(self, tokens: Sequence[int], topk: np.ndarray, table: Any) -> None:
        """Learn from the rows of one ``observe()`` call if they are about the last draft
        (before the table takes them); the last draft is learned from once."""
        last, self.last = self.last, None
        if last is not None:
            learn(last, tokens, topk, table, self.estimates)

    def path_probs(self) -> Optional[np.ndarray]:
        """``(n,)`` float64 path probabilities of the last draft's nodes, or ``None``."""
        return None if self.last is None else np.array(self.last.path, dtype=np.float64)

    def expected_tokens(self) -> Optional[float]:
        """``E[a + 1]`` of the last draft, or ``None``."""
        return None if self.last is None else self.last.expected_tokens()

    def stats(self) -> dict:
        """The integer counts and the calibration record (``Drafter.acceptance_stats``)."""
        e = self.estimates
        return dict(seen=list(e.seen), accepted=list(e.accepted),
                    calibration_seen=list(e.calibration_seen),
                    calibration_accepted=list(e.calibration_accepted),
                    calibration_predicted=list(e.calibration_predicted),
                    num_labels=e.num_labels)

    def reset(self) -> None:
        """Forget what was learned and the last draft."""
        self.estimates.reset()
        self.last = None


if __name__ == "__main__":
    # A walkthrough: two candidate sources, the estimates, the tree, E[a + 1].
    from racer_ref.reference.copy_logit import CopyLogitTable

    table = CopyLogitTable(vocab_size=10, k=2)
    table.observe([0, 1, 2], [[1, 2], [3, 4], [5, 6]])
    # The automaton saw "0 1 3" three times and "0 2" once after this context.
    trie = RetrievalTrie(0, [[0, 1, 3], [0, 2]], [[4, 3, 3], [4, 1]])
    est = AcceptanceEstimates()
    tree, ann = build_expected_tree(0, 5, trie, table, None, est)
    print(tree.pretty())
    print("path probabilities:", [round(q, 3) for q in ann.path])
    print("E[a + 1] =", round(ann.expected_tokens(), 3))
