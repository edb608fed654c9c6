"""Named, hand-checked test cases shared by the test suite and ``racer-ref check``.

They live in the package (not in ``tests/``) so that the checker of the exercises can run
the very cases the Rust core and the Python twin pass, from an installed package:

* ``racer_ref.course.cases.automaton``: the automaton (trie, frequencies, failure links, LRU,
  borders, retrieval tree) and the brute-force oracles;
* ``racer_ref.course.cases.trees``: the LRU list, the copy-logit table, the logits tree (Eq. 3),
  the merged draft tree, the tree attention mask, greedy acceptance and KV compaction.
"""
