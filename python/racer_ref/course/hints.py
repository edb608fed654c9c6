"""The hints of ``racer-ref check``, by kind of mistake (``racer_ref.course.check``).

Stage 1 (a :class:`Hint`'s ``diagnosis``) is always shown, stage 2 (its ``nudge``) with
``--hint 2``, stage 3 (:data:`READ`, per exercise: where to read, with a small worked
example) with ``--hint 3``. None of them is the code: they name the concept that was missed.
A key of :data:`HINTS` is ``"NN.kind"`` (exercise NN), or ``"raised"`` for any exercise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class Hint:
    """The hints for one kind of mistake: stage 1 names it, stage 2 nudges toward the concept."""

    diagnosis: str
    nudge: str


HINTS: Dict[str, Hint] = {
    # 01. The trie with frequencies.
    "01.freq_once": Hint(
        "frequencies stay at 1: a node is counted when it is created, not at every occurrence.",
        "Commit 'a b a': how many times does the string 'a' occur? Which line of your loop runs "
        "the second time 'a' arrives, when its node already exists?"),
    "01.freq_too_high": Hint(
        "a frequency is higher than the number of occurrences: one token counts a node twice.",
        "One committed token adds exactly one occurrence to each of the strings that end with it "
        "(one per length 1..ngram). Is any node reached twice while you handle a single token?"),
    "01.freq": Hint(
        "a frequency differs from the number of occurrences of its string.",
        "freq(s) must equal how often s occurs as a substring of everything committed so far. "
        "Count one example by hand and print your trie after each token."),
    "01.longest_window": Hint(
        "no string of length ngram is in your trie: the longest open window is never extended.",
        "With ngram = 3, after 'a b c' the trie must hold 'a b c'. It grows from the window of the "
        "last 2 tokens. Which window indices does your loop visit: is the top one included?"),
    "01.root_window": Hint(
        "strings of length 1 are missing: the root (window 0) is never extended.",
        "Every committed token t starts a new string of length 1, (t,): which window is it the "
        "child of? Does your loop reach that window, or does it stop one short?"),
    "01.missing": Hint(
        "a string that occurs in the committed tokens is missing from your trie.",
        "After each token, the node of the last i tokens must exist for every i = 1..ngram, even "
        "across calls to extend. Are the windows carried over from one token (and call) to the next?"),
    "01.never_committed": Hint(
        "your trie holds a string that never occurs in the committed tokens: a window is extended "
        "twice by the same token.",
        "Each window may be extended once per token, from its state *before* this token. If you "
        "overwrite windows[i + 1] and later extend windows[i + 1] again in the same pass, you chain "
        "the token onto itself. In which order, or into which list, should the new windows go?"),
    "01.too_deep": Hint(
        "your trie holds a string longer than ngram: the trie keeps substrings up to ngram tokens.",
        "The trie stores substrings of length <= ngram only; the window of the last ngram tokens "
        "is a leaf that is never extended. Which window does your loop extend last?"),
    "01.depth": Hint(
        "Node.depth is off: a node's depth must be the length of its string (the root is 0).",
        "The child of the window of the last i tokens holds i + 1 tokens. What depth does your "
        "code pass to Node(...) for it?"),
    "01.parent": Hint(
        "Node.parent does not point to the node of the string without its last token.",
        "The node of 'a b' hangs under the node of 'a': which node did you walk from when you "
        "created it, and is that what you passed as parent?"),
    "01.token": Hint(
        "Node.token is not the last token of the node's string (the token on its edge).",
        "The token on the edge from parent to child is the token just committed."),
    "01.count": Hint(
        "len(trie) is not the number of nodes (the root excluded).",
        "Count a node once, at the moment you create it, and never when you only visit it."),
    "01.structure": Hint(
        "the trie does not have the shape the exercise gives (self.root, node.children).",
        "Keep the given Node and Trie attributes: the checker walks self.root.children."),
    # 02. Failure links (eager).
    "02.not_a_state": Hint(
        "a failure link points to a string that is not a state of the trie.",
        "fail(s) must be a node you can stand on: check that a candidate suffix is in the trie "
        "before you return it."),
    "02.self_link": Hint(
        "a state links to itself: a failure link is a *proper* suffix (shorter than s).",
        "Start the search from the suffixes of s without its first token, never s itself."),
    "02.not_a_suffix": Hint(
        "a failure link is not a suffix of its state (it must end where the state ends).",
        "The suffixes of s = (a, b, c) are (b, c), (c) and (). Which of them did you produce?"),
    "02.gave_up": Hint(
        "you link to the root when the longest proper suffix is absent, but a shorter suffix is in "
        "the trie: after one miss you have to keep looking.",
        "If s[1:] is not in the trie, the next candidate is the next shorter suffix. The links you "
        "already built (shallower states first) let you jump there: follow the parent's link, "
        "then its link, ... and try to step with s's last token each time."),
    "02.too_short": Hint(
        "a failure link is a suffix of its state, but not the longest one in the trie.",
        "The link is the *longest* proper suffix present. Do you try the candidates from the "
        "longest down, and stop at the first one present?"),
    "02.keys": Hint(
        "the result does not have exactly one entry per state of the trie (the root excluded).",
        "Return a dict with a key for every non-empty path you were given, and nothing else."),
    "02.link": Hint(
        "a failure link differs from the longest proper suffix of its state in the trie.",
        "Work the failing trie by hand: list the suffixes of the state and mark the ones present."),
    # 03. Lazy failure links.
    "03.stale": Hint(
        "a cached link was returned after a change had made it stale: the epoch of the token was "
        "not bumped (or not compared).",
        "Which changes can make fail(s) wrong? Only a node ending with s's last token appearing or "
        "disappearing. When that happens, what tells the cached links of that token that they are "
        "out of date?"),
    "03.cache": Hint(
        "links are recomputed although nothing changed: the cache is never trusted.",
        "A link stamped with the current epoch of its token is still right. Is the stamp stored "
        "when you compute a link, and compared before you recompute?"),
    "03.not_in_trie": Hint(
        "a link points to a node that is no longer in the trie (evicted).",
        "An eviction of a node ending with token t must invalidate the cached links of token t; "
        "and a recomputation must only step into nodes that are present."),
    "03.recompute": Hint(
        "a freshly computed link is wrong (the cache is not the problem).",
        "A recomputed link walks fail(parent), fail(fail(parent)), ... (lazily too) and tries a "
        "child with the node's token at each; depth-1 nodes link to the root. Compare with "
        "exercise 02."),
    # 04. The LRU list.
    "04.touch_new": Hint(
        "touching a slot that is not on the list does not put it at the head correctly.",
        "A new slot becomes the most recent: which links change (its own, the old head's, head) "
        "and what if the list was empty (tail too)?"),
    "04.touch_present": Hint(
        "touching a slot that is already on the list does not move it to the head correctly.",
        "Moving = unlink, then insert at the head. After unlinking, the neighbours on both sides "
        "point at each other; what if the slot was the tail, or already the head?"),
    "04.remove": Hint(
        "removing a slot that is on the list leaves the list broken (its neighbours are not patched).",
        "Unlinking a slot patches its newer and older neighbours to point at each other; at an "
        "end of the list it is head or tail that moves instead."),
    "04.not_removed": Hint(
        "remove(slot) left the slot on the list: a removed (evicted) slot must leave it.",
        "After remove(slot), order() no longer lists the slot and `slot in lru` is False. Does "
        "your remove unlink it, and does it also run when the slot is the head or the tail?"),
    "04.cycle": Hint(
        "the links of your list go round in a circle: walking from the head never reaches the "
        "end, so order() never stops.",
        "A slot that moves to the head must first be unlinked: its old neighbours point at each "
        "other, and nothing points at it any more. Draw the newer/older arrows of the failing "
        "operations: which slot is still linked from its old place?"),
    "04.empty": Hint(
        "a new list is not empty: before any touch, order() is [], len() 0 and both ends None.",
        "What do head, tail and the size hold in __init__? Is every slot marked as off the list?"),
    "04.remove_absent": Hint(
        "removing a slot that is not on the list changed the list.",
        "remove of an absent slot must do nothing: how do you know a slot is on the list?"),
    "04.ends": Hint(
        "the order is right but most_recent()/least_recent() is not: head or tail is not kept up "
        "to date.",
        "Which operations can change the head? The tail? Walk each of touch and remove on a list "
        "of one slot."),
    "04.len": Hint(
        "len() does not count the slots on the list: it drifts after some touch or remove.",
        "Count up only when a slot joins the list and down only when one leaves it."),
    "04.membership": Hint(
        "`slot in lru` is wrong: the list does not know which slots are on it.",
        "A slot is on the list after a touch and until it is removed; keep that fact in O(1)."),
    # 05. The copy-logit table.
    "05.unseen": Hint(
        "a token never observed has a non-empty row: unseen tokens must give [].",
        "row(v) is empty until v has been observed: how does your table know it has not?"),
    "05.lost": Hint(
        "an observed token's row is empty: observe did not keep the row at that token.",
        "Every observed token id keeps a row: check that observe writes at the token's index."),
    "05.width": Hint(
        "a row has more than k ids: the table keeps only the first k columns of the target's top-k.",
        "observe may be given more than k columns (k' >= k); only the first k of each row are "
        "written. How many does your observe keep?"),
    "05.row_short": Hint(
        "row() returns fewer than k ids: the row is cut one short when it is read (its first ids "
        "are right).",
        "row(v) gives all k columns of v's row, best first. Where does your slice or loop in row "
        "stop: at k, or at k - 1? (If row is right, print the table: did observe write k columns?)"),
    "05.row_index": Hint(
        "row(v) gives the row observed for a neighbouring token (v - 1 or v + 1): a token's index "
        "is off by one between where observe writes and where row reads.",
        "Token v's row lives at index v, from observe's write to row's read, with no + 1 or - 1 "
        "(token 0 is a real token with row 0). Which of the two shifts it?"),
    "05.not_last": Hint(
        "a token observed twice keeps an older row: the last occurrence must win.",
        "observe walks the positions in order; the row of a token is the one from its latest "
        "position. Does a later write overwrite, or is it skipped?"),
    "05.row": Hint(
        "a row differs from the target's top-k ids at the token's last occurrence.",
        "Write down, for the failing token, every position where it occurs and the row there."),
    # 06. The logits tree.
    "06.floor": Hint(
        "a breadth came out as 0: every child gets at least breadth 1.",
        "Eq. 3 halves the breadth per rank, but never below one."),
    "06.root_halved": Hint(
        "the root's children are halved once too often: the root's first child keeps breadth b.",
        "Eq. 3 has an extra halving for children of a non-root node only: the root's first "
        "child keeps the full breadth."),
    "06.not_halved": Hint(
        "the children of a non-root node are not halved the extra time.",
        "Below the root, the first child already gets half its parent's breadth."),
    "06.breadth": Hint(
        "child_breadth does not follow Eq. 3 (the breadth of the j-th child of a node of breadth b).",
        "Tabulate Eq. 3 for b = 8 and ranks j = 0..3, for a root parent and another parent."),
    "06.parents_order": Hint(
        "the tree is not flattened breadth-first: a parent comes after its child (or parents[0] "
        "is not -1).",
        "Number nodes in the order you create them from a FIFO queue: the root is 0 and a "
        "parent always has a smaller index than its children."),
    "06.capacity": Hint(
        "the tree has more nodes than capacity (the root counts as one node).",
        "Stop adding as soon as the tree holds capacity nodes, the root included, even in the "
        "middle of a node's children."),
    "06.duplicate": Hint(
        "a node has two children with the same token: a (parent, token) pair was added twice.",
        "A (parent, token) pair already present is neither added again nor expanded again."),
    "06.order": Hint(
        "the tree has the right nodes in the wrong order: the flattening is not breadth-first.",
        "Expand breadth-first (a FIFO queue); a node's children are added in rank order of its "
        "row."),
    "06.too_few": Hint(
        "nodes are missing: the tree stops growing before it reaches its capacity.",
        "Which nodes may still be expanded? Every node added, with its own breadth from Eq. 3, "
        "until the capacity is reached."),
    "06.children": Hint(
        "a node has different children than Eq. 3 gives (tokens or how many of them).",
        "Node v's children are the first b entries of v's own row (b = v's breadth), in rank "
        "order; a token with no row has no children."),
    # 07. The merged draft tree.
    "07.sources": Hint(
        "the tree is right but a source is wrong: 1 = from retrieval, 2 = from the logits tree, "
        "3 = both.",
        "A node that the logits tree reaches but retrieval already created is not new: it keeps "
        "its node and gains the logits bit."),
    "07.retrieval": Hint(
        "a retrieval path is not in the tree: retrieval goes first.",
        "Insert every retrieval path before the logits tree spends any capacity."),
    "07.parents_order": Hint(
        "the merged tree is not flattened breadth-first: a parent comes after its child (or "
        "parents[0] is not -1).",
        "Build the tree as nodes with children, then number it breadth-first at the end."),
    "07.capacity": Hint(
        "the merged tree has more nodes than capacity (the root counts as one node).",
        "Merged nodes cost nothing; every new node counts, the root included."),
    "07.duplicate": Hint(
        "a node has two children with the same token: the merge created a duplicate.",
        "When the logits tree offers (parent, token) that is already a child, reuse that child."),
    "07.order": Hint(
        "the merged tree has the right nodes in the wrong order: the flattening is not breadth-first.",
        "Flatten breadth-first at the end, each node's children in insertion order."),
    "07.too_few": Hint(
        "nodes are missing: the logits tree stops too early over the retrieval tree.",
        "An existing child merged by the logits tree is expanded only if it did not have the "
        "logits bit yet; new nodes spend capacity, merged ones do not."),
    "07.children": Hint(
        "a node has different children than the merged draft tree (retrieval, then logits).",
        "Run the logits tree of exercise 06 over the tree that retrieval built."),
    # 08. Tree attention mask, position ids, retrieve_indices.
    "08.shape": Hint(
        "an array has the wrong shape (the tree has n = len(parents) nodes).",
        "The mask is n x n; position ids have n entries; retrieve_indices has one row per leaf "
        "and max depth + 1 columns."),
    "08.transposed": Hint(
        "the mask is transposed: row i must say what node i may see (its ancestors), not who "
        "sees i.",
        "Read mask[i][j] as 'node i attends to node j'. Is node 0 (the root) visible to every "
        "node, or does every node see node 0?"),
    "08.self": Hint(
        "a node does not attend to itself: the diagonal of the mask must be True.",
        "Each node's query must see its own key, like the last token of a causal mask."),
    "08.ancestors": Hint(
        "a cell of the mask is wrong: node i must see exactly its ancestors and itself.",
        "Follow parents[] from node i up to the root: those are the True cells of row i. Which "
        "node did you add, or miss, in the row named above?"),
    "08.past_length": Hint(
        "position ids do not add past_length: the tree sits after the L cached tokens.",
        "The root is the token right after the cache: at which position does it go?"),
    "08.depth": Hint(
        "position ids are off by a constant: a node's position is L + its depth (root depth 0).",
        "What is the root's depth? Its children's?"),
    "08.positions": Hint(
        "a position id is not L + depth(node) (L = past_length, the root at depth 0).",
        "Siblings share a position: the position counts the tokens on the node's own path."),
    "08.leaves": Hint(
        "retrieve_indices does not have one row per leaf (a node that is nobody's parent).",
        "A leaf is a node that is nobody's parent; list them in node order."),
    "08.retrieve": Hint(
        "a row of retrieve_indices is not the root-to-leaf path of its leaf.",
        "Each row starts at the root (0), goes down to the leaf, and is padded with -1."),
    # 09. Greedy acceptance.
    "09.root": Hint(
        "accepted does not start with the root (node 0), or the result is not (accepted, next_root).",
        "The root is the last committed token's successor and is always accepted."),
    "09.not_a_path": Hint(
        "the accepted nodes do not form a path: a node is accepted that is not a child of the "
        "previous one.",
        "A match only counts among the *children* of the current node (parents[c] == u)."),
    "09.next_root": Hint(
        "the accepted path is right but the next root (the bonus token) is not.",
        "The bonus token is the target's prediction at the last accepted node."),
    "09.stops_early": Hint(
        "the walk stops while a child still matches the prediction.",
        "After accepting a child, continue from it: its own prediction picks its child."),
    "09.too_far": Hint(
        "a node is accepted whose token is not the target's prediction.",
        "At node u compare children's tokens with predicted[u] (u's prediction), not with "
        "their own predicted[c]."),
    "09.wrong_child": Hint(
        "the walk takes a different child than the target predicts.",
        "The target's choice at u is predicted[u]; the child whose token equals it is accepted."),
    "09.endless": Hint(
        "your walk never ends: it keeps going without moving down the tree.",
        "Each round of the walk either accepts a child and continues *from that child*, or "
        "stops. After you accept a child, which node does the next round look at?"),
    # 10. KV compaction.
    "10.shape": Hint(
        "the result does not have L + len(accepted) slots along the sequence dimension.",
        "Keep the prefix and the accepted nodes' slots, nothing else; the sequence dimension is "
        "dim 2 of (batch, heads, seq, head_dim)."),
    "10.contiguous": Hint(
        "the first len(accepted) tree slots are kept, not the accepted nodes' slots.",
        "The accepted nodes are generally not contiguous: node u's entry lies at slot L + u."),
    "10.offset": Hint(
        "the accepted nodes' slots are taken without the prefix offset L.",
        "Tree node u was written after the L cached tokens: at which slot is it?"),
    "10.prefix": Hint(
        "the prefix (the first L slots, the tokens cached before the tree) is not kept unchanged.",
        "The cached prefix stays as it is; only the tree part is gathered."),
    "10.heads": Hint(
        "head 0 is right but another head (or batch) differs: every head must be gathered alike.",
        "Gather along the sequence dimension only, for every batch and head alike."),
    "10.slots": Hint(
        "the slots kept are not the prefix followed by the accepted nodes' slots in path order.",
        "Write the slot list by hand for L = 2 and accepted = [0, 2]."),
    # Any exercise.
    "raised": Hint(
        "your code raised an exception on this case (its last lines are above, in your file).",
        "Call the function by hand in a Python shell with the inputs of the failing case and "
        "print the values just before the line that raised."),
    "returned": Hint(
        "your code returned something the checker cannot read as the answer (None: a missing "
        "return? a number where a list is expected?).",
        "Call the function by hand with the failing case's inputs and print what it returns; "
        "compare its type and shape with the docstring's Returns."),
    "slow": Hint(
        "your code did not finish this case in time: a loop that never ends, or far more work "
        "than the exercise needs (the other cases of this function are not run).",
        "Call the function by hand on the failing case with a print in each loop: does every "
        "loop move toward its end? Does one operation walk a whole list where the tutorial's "
        "structure reaches the element directly?"),
}

READ: Dict[str, str] = {
    "01": "tutorial 1 (docs/tutorials/01-ngrams-and-the-trie.md, tutorials/01_ngrams_and_the_trie.py), "
          "'open windows'. Worked example, ngram 2, committing 'a a': after the first 'a' the "
          "windows are [root, a]; the second 'a' extends root -> a (freq 2) and a -> a a (freq 1).",
    "02": "tutorial 2 (docs/tutorials/02-failure-links.md). Worked example: in the trie {a, b, a b, "
          "b a, a b a}, fail(a b a) = b a (the longest proper suffix present), fail(a b) = b, "
          "fail(b a) = a.",
    "03": "tutorial 3 (docs/tutorials/03-lazy-failure-links.md), the epoch cache. Worked example: "
          "fail(a b) is cached with stamp = epoch[b]; adding the node 'c b' bumps epoch[b], so the "
          "next fail(a b) recomputes; adding 'c a' does not touch it.",
    "04": "tutorial 4 (docs/tutorials/04-lru-eviction.md). Worked example: touch 0, touch 1, touch 0 "
          "gives order [0, 1] (head 0, tail 1); remove 0 then gives [1] with head = tail = 1.",
    "05": "tutorial 5 (docs/tutorials/05-copy-logit-and-logits-tree.md), the copy-logit table. "
          "Worked example, k = 2: observe([4, 4], [[1, 2, 3], [9, 0, 5]]) leaves row(4) = [9, 0].",
    "06": "tutorial 5 (docs/tutorials/05-copy-logit-and-logits-tree.md), Eq. 3. Worked example, k = "
          "4: the root's children get breadths 4, 2, 1, 1; a non-root node of breadth 4 gives its "
          "children 2, 1, 1, 1.",
    "07": "tutorial 6 (docs/tutorials/06-draft-tree.md), merging. Worked example: retrieval path "
          "[r, a] and a root row [a, b]: node a comes from both (source 3), b from the logits "
          "tree only (source 2).",
    "08": "tutorial 6 (docs/tutorials/06-draft-tree.md), step 4. Worked example, parents [-1, 0, 0, "
          "1]: row 3 of the mask is True at columns 0, 1, 3; depths [0, 1, 1, 2]; leaves 2 and 3 "
          "give retrieve_indices [[0, 2, -1], [0, 1, 3]].",
    "09": "tutorial 7 (docs/tutorials/07-verification-loop.md). Worked example: tokens [r, a, b, c], "
          "parents [-1, 0, 0, 1], predicted [a, c, x, y] accepts [0, 1, 3] and the next root is y.",
    "10": "tutorial 7 (docs/tutorials/07-verification-loop.md), KV compaction. Worked example: L = "
          "3, accepted [0, 2] keeps slots [0, 1, 2, 3, 5].",
}
