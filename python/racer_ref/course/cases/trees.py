"""Named, hand-checked cases for the LRU list, the copy-logit table, the logits tree, the
merged draft tree, the tree attention mask, greedy acceptance and KV compaction.

The tests run them on the Rust core and the Python twin (tests/test_logits_tree.py,
tests/test_draft_tree.py, tests/test_verify.py, tests/test_check.py); ``racer-ref check``
runs them on a student's code (exercises 04-10). Each case states its hand derivation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

#: Source codes of a draft-tree node (as in ``racer_ref.reference.draft_tree``).
ROOT, R, L, B = 0, 1, 2, 3


# --------------------------------------------------------------------------------------
# The O(1) LRU list (rust/src/lru.rs): slots 0..capacity-1, most recent first.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LruCase:
    name: str
    capacity: int
    #: ("touch", slot) or ("remove", slot); after all of them the list must read `order`.
    ops: Tuple[Tuple[str, int], ...]
    #: Slots from the most recent to the least recent.
    order: Tuple[int, ...]


LRU_CASES = [
    LruCase("lru010_empty", 4, (), ()),
    LruCase("lru020_touch_adds_at_the_head", 4, (("touch", 2), ("touch", 0), ("touch", 3)), (3, 0, 2)),
    # Touching the tail, a middle slot and the head again: each moves to the head.
    LruCase("lru030_touch_moves_to_the_head", 4,
            (("touch", 0), ("touch", 1), ("touch", 2), ("touch", 0), ("touch", 1), ("touch", 1)),
            (1, 0, 2)),
    # Removing the head, the tail and a middle slot; removing an absent slot is a no-op.
    LruCase("lru040_remove_anywhere", 5,
            (("touch", 0), ("touch", 1), ("touch", 2), ("touch", 3), ("touch", 4),
             ("remove", 4), ("remove", 0), ("remove", 2), ("remove", 2)),
            (3, 1)),
    # The list can empty and fill again.
    LruCase("lru050_empty_then_refill", 2,
            (("touch", 0), ("remove", 0), ("touch", 1), ("touch", 0), ("remove", 1)), (0,)),
]


# --------------------------------------------------------------------------------------
# The copy-logit table (RACER step 8).
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableCase:
    name: str
    vocab_size: int
    k: int
    #: observe() calls: (token_ids, topk_ids)
    observes: Tuple[Tuple[List[int], List[List[int]]], ...]
    #: token -> expected row ([] when never seen)
    rows: Dict[int, List[int]]


TABLE_CASES = [
    TableCase("table010_unseen_rows_are_empty", 7, 3, (), {0: [], 3: [], 6: []}),
    # 4 is fed twice: its row is the later one; only the first k = 2 columns are kept.
    TableCase("table020_last_occurrence_wins_first_k_columns", 10, 2,
              (([4, 5, 4], [[1, 2, 3], [6, 7, 8], [9, 0, 1]]),),
              {4: [9, 0], 5: [6, 7], 1: []}),
    # A later observe overwrites its rows and leaves the others alone.
    TableCase("table030_overwrite", 10, 2,
              (([4, 5, 4], [[1, 2, 3], [6, 7, 8], [9, 0, 1]]), ([5], [[3, 3]])),
              {4: [9, 0], 5: [3, 3]}),
    # A row of token 0s is a real row, not "unseen" (the reason for the seen flag).
    TableCase("table040_zeros_are_a_real_row", 3, 2, (([2], [[0, 0]]),), {2: [0, 0], 0: []}),
    TableCase("table050_empty_observe", 5, 2, (([], []),), {0: [], 4: []}),
]


# --------------------------------------------------------------------------------------
# Logits tree (Eq. 3) and merged draft tree (RACER steps 2-4).
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeCase:
    name: str
    root: int
    capacity: int
    vocab_size: int
    k: int
    #: copy-logit table rows written before drafting (token -> row); None: no table
    rows: Optional[Dict[int, List[int]]]
    #: retrieval paths, inserted first and in order
    paths: Tuple[Tuple[int, ...], ...] = ()
    #: last-logit mode: the ids replacing the root's row
    root_topk: Optional[Tuple[int, ...]] = None
    #: expected arrays of the flattened tree (only those given are checked)
    expect: Dict[str, list] = field(default_factory=dict)


def distinct_rows(k: int, depth: int) -> Tuple[int, Dict[int, List[int]]]:
    """(vocab_size, rows) where every token's k children are fresh: all tokens distinct."""
    rows: Dict[int, List[int]] = {}
    frontier, fresh = [0], 1
    for _ in range(depth):
        next_frontier = []
        for v in frontier:
            rows[v] = list(range(fresh, fresh + k))
            fresh += k
            next_frontier += rows[v]
        frontier = next_frontier
    return fresh, rows


def _paper_shape(name: str, k: int, capacity: int, per_depth: List[int]) -> TreeCase:
    vocab_size, rows = distinct_rows(k, depth=len(per_depth))
    return TreeCase(name, 0, capacity, vocab_size, k, rows, expect={"per_depth": per_depth})


#: The logits tree alone (no retrieval paths).
LOGITS_TREE_CASES = [
    # The paper's shapes, all tokens distinct (RACER step 3).
    _paper_shape("logits010_paper_k8_c64", 8, 64, [1, 8, 19, 24, 12]),
    _paper_shape("logits011_paper_k4_c21", 4, 21, [1, 4, 8, 8]),
    _paper_shape("logits012_k2_c7", 2, 7, [1, 2, 3, 1]),
    _paper_shape("logits013_k1_c5", 1, 5, [1, 1, 1, 1, 1]),
    # k = 2: root (b=2) -> 1 (b=2), 2 (b=1); 1 -> 3 (b=1), 4 (b=1); 2 -> 5; 3 -> 7.
    # 4, 5 and 7 were never seen: no children. 7 nodes are reachable, fewer than C = 10.
    TreeCase("logits020_small_by_hand", 0, 10, 10, 2, {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 8]},
             expect={"tokens": [0, 1, 2, 3, 4, 5, 7], "parents": [-1, 0, 0, 1, 1, 2, 3],
                     "depths": [0, 1, 1, 2, 2, 2, 3],
                     "retrieve_indices": [[0, 1, 4, -1], [0, 2, 5, -1], [0, 1, 3, 6]]}),
    # Capacity cuts the breadth-first order: the first 4 nodes.
    TreeCase("logits021_capacity_cuts_bfs", 0, 4, 10, 2, {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 8]},
             expect={"tokens": [0, 1, 2, 3]}),
    TreeCase("logits030_unseen_root", 3, 64, 10, 2, {0: [1, 2]},
             expect={"tokens": [3], "retrieve_indices": [[0]], "attention_mask": [[True]]}),
    # Row 0 = [1, 1]: the second 1 is the same (parent, token): not duplicated, not re-expanded.
    TreeCase("logits040_repeated_id_is_one_node", 0, 10, 10, 2, {0: [1, 1], 1: [2, 3]},
             expect={"tokens": [0, 1, 2, 3], "parents": [-1, 0, 1, 1]}),
    # 0 -> 0 -> 0 ...: infinitely many reachable nodes, so exactly C of them.
    TreeCase("logits050_cycle_fills_capacity", 0, 6, 3, 1, {0: [0]},
             expect={"tokens": [0] * 6, "parents": [-1, 0, 1, 2, 3, 4]}),
    # root_topk has 3 ids; only the first k = 2 (7, 6) are the root's children.
    # 7 (b=2) -> 8, 9; 6 (b=1) -> 2. Deeper nodes still read the table.
    TreeCase("logits060_last_logit_replaces_only_the_root_row", 0, 10, 10, 2,
             {0: [1, 4], 7: [8, 9], 6: [2, 3]}, root_topk=(7, 6, 5),
             expect={"tokens": [0, 7, 6, 8, 9, 2], "parents": [-1, 0, 0, 1, 1, 2]}),
    TreeCase("logits061_without_root_topk_the_root_row", 0, 10, 10, 2,
             {0: [1, 4], 7: [8, 9], 6: [2, 3]}, expect={"tokens": [0, 1, 4]}),
]

#: Retrieval paths, alone or merged with the logits tree.
DRAFT_TREE_CASES = [
    # BFS, children in insertion order: 0 | 1 5 | 2 4 | 3
    TreeCase("draft010_retrieval_paths_share_prefixes", 0, 64, 2**32, 2, None,
             paths=((0, 1, 2, 3), (0, 1, 4), (0, 5)),
             expect={"tokens": [0, 1, 5, 2, 4, 3], "parents": [-1, 0, 0, 1, 1, 3],
                     "depths": [0, 1, 1, 2, 2, 3], "sources": [ROOT, R, R, R, R, R],
                     "retrieve_indices": [[0, 2, -1, -1], [0, 1, 4, -1], [0, 1, 3, 5]],
                     "attention_mask": [[bool(v) for v in row] for row in (
                         [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0],
                         [1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0], [1, 1, 0, 1, 0, 1])]}),
    # Retrieval 0-1-2 and 0-3; table 0 -> [1, 4], 1 -> [2, 5]. 1 and 1-2 were proposed by
    # both trees and are stored once ("both"); 4 and 5 are new.
    TreeCase("draft020_merged_nodes_cost_nothing", 0, 10, 10, 2, {0: [1, 4], 1: [2, 5]},
             paths=((0, 1, 2), (0, 3)),
             expect={"tokens": [0, 1, 3, 4, 2, 5], "parents": [-1, 0, 0, 0, 1, 1],
                     "sources": [ROOT, B, R, L, B, L],
                     "retrieve_indices": [[0, 2, -1], [0, 3, -1], [0, 1, 4], [0, 1, 5]]}),
    # C = 4: retrieval takes all of it; the logits tree adds and marks nothing.
    TreeCase("draft021_retrieval_fills_capacity", 0, 4, 10, 2, {0: [1, 4], 1: [2, 5]},
             paths=((0, 1, 2), (0, 3)),
             expect={"tokens": [0, 1, 3, 2], "sources": [ROOT, R, R, R]}),
    # C = 5: the merged 1 is free, 4 is the 5th node, then the tree is full.
    TreeCase("draft022_free_merge_then_full", 0, 5, 10, 2, {0: [1, 4], 1: [2, 5]},
             paths=((0, 1, 2), (0, 3)),
             expect={"tokens": [0, 1, 3, 4, 2], "sources": [ROOT, B, R, L, R]}),
    # Retrieval only reaches 0-1; the logits tree merges into 1 and expands it (b = 2).
    TreeCase("draft030_logits_grow_below_retrieval_nodes", 0, 10, 10, 2, {0: [1, 2], 1: [3, 4]},
             paths=((0, 1),),
             expect={"tokens": [0, 1, 2, 3, 4], "parents": [-1, 0, 0, 1, 1],
                     "sources": [ROOT, B, L, L, L]}),
    TreeCase("draft040_whole_chain_becomes_both", 0, 10, 10, 1, {0: [5], 5: [6], 6: [9]},
             paths=((0, 5, 6),), expect={"tokens": [0, 5, 6, 9], "sources": [ROOT, B, B, L]}),
    # More retrieval nodes than capacity (the automaton never does this): first come first.
    TreeCase("draft050_retrieval_cut_at_capacity", 7, 3, 2**32, 2, None,
             paths=((7, 1, 2, 3), (7, 4)), expect={"tokens": [7, 1, 2]}),
    TreeCase("draft051_capacity_one", 7, 1, 2**32, 2, None, paths=((7, 1),),
             expect={"tokens": [7], "retrieve_indices": [[0]]}),
    TreeCase("draft060_root_only_path", 3, 8, 2**32, 2, None, paths=((3,), (3, 4)),
             expect={"tokens": [3, 4]}),
]


# --------------------------------------------------------------------------------------
# Greedy acceptance (RACER step 6) on one 10-node tree.
# --------------------------------------------------------------------------------------

#                    0   1   2   3   4   5   6   7   8   9
ACCEPT_TOKENS = [40, 11, 12, 13, 21, 22, 31, 32, 33, 41]
ACCEPT_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 7]
#   0 -+- 1 -+- 4 -+- 7 --- 9
#      |     |     `- 8
#      |     `- 5
#      +- 2 --- 6
#      `- 3


@dataclass(frozen=True)
class AcceptCase:
    name: str
    #: argmax of the target's logits at each node
    predicted: Tuple[int, ...]
    accepted: Tuple[int, ...]
    next_root: int
    tokens: Tuple[int, ...] = tuple(ACCEPT_TOKENS)
    parents: Tuple[int, ...] = tuple(ACCEPT_PARENTS)


ACCEPT_CASES = [
    # root predicts 11 (node 1), node 1 predicts 22 (node 5), node 5 predicts 50 (no child)
    AcceptCase("accept010_follow_the_predicted_child", (11, 22, 0, 0, 0, 50, 0, 0, 0, 0), (0, 1, 5), 50),
    # root predicts 13: the third branch, a leaf
    AcceptCase("accept020_third_branch", (13,) + (9,) * 9, (0, 3), 9),
    # nothing matches: only the root, next root is the root's prediction
    AcceptCase("accept030_nothing_matches", (99,) * 10, (0,), 99),
    # the deepest path 0-1-4-7-9, then the leaf's prediction
    AcceptCase("accept040_deepest_path", (11, 21, 0, 0, 32, 0, 0, 41, 0, 63), (0, 1, 4, 7, 9), 63),
    AcceptCase("accept050_root_only_tree", (7,), (0,), 7, tokens=(5,), parents=(-1,)),
]


# --------------------------------------------------------------------------------------
# KV compaction (RACER step 7): keep the accepted path in consecutive slots.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactCase:
    name: str
    past_length: int
    tree_size: int
    accepted: Tuple[int, ...]
    #: the slots (of the L + n before) that the cache holds afterwards, in order
    slots: Tuple[int, ...]


COMPACT_CASES = [
    # before: [ prefix (L) | 0 1 2 3 4 5 6 ... n-1 ]   accepted = [0, 2, 5]
    # after:  [ prefix (L) | 0 2 5 ]
    CompactCase("kv010_gather_the_path", 3, 8, (0, 2, 5), (0, 1, 2, 3, 5, 8)),
    CompactCase("kv020_root_only", 2, 4, (0,), (0, 1, 2)),
    CompactCase("kv030_chain_already_in_place", 2, 5, (0, 1, 2), (0, 1, 2, 3, 4)),
    CompactCase("kv040_in_place_then_gather", 1, 6, (0, 1, 4, 5), (0, 1, 2, 5, 6)),
    CompactCase("kv050_empty_prefix", 0, 3, (0, 2), (0, 2)),
]
