"""Exercise 07 answered by the twin's ``build_draft_tree``."""
from racer_ref.reference.copy_logit import CopyLogitTable
from racer_ref.reference.draft_tree import build_draft_tree


def draft_tree(root, capacity, retrieval_paths, rows, k):
    ids = [root, k - 1, *rows, *(t for row in rows.values() for t in row), *(t for p in retrieval_paths for t in p)]
    table = CopyLogitTable(max(ids) + 1, k)
    if rows:
        table.observe(list(rows), [rows[t] for t in rows])
    tree = build_draft_tree(root, capacity, retrieval_paths, table)
    return tree.tokens.tolist(), tree.parents.tolist(), tree.sources.tolist()
