"""Exercise 08 answered by the twin's ``TreeBuilder.flatten`` (via ``DraftTree.subtree``)."""
import numpy as np

from racer_ref.reference.draft_tree import TreeBuilder


def _tree(parents):
    builder = TreeBuilder(root=0, capacity=len(parents))
    for i in range(1, len(parents)):
        builder.insert_child(parents[i], i, 1)  # token i: children never collide
    return builder.flatten()


def tree_attention_mask(parents):
    return _tree(parents).attention_mask.tolist()


def position_ids(parents, past_length):
    return (past_length + _tree(parents).depths).tolist()


def retrieve_indices(parents):
    return np.asarray(_tree(parents).retrieve_indices).tolist()
