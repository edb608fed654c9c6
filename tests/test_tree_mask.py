"""``racer_ref.tree.tree_attention_mask``: the one Python builder of the tree attention mask
equals the mask of every tree both drafters build, and the hand-drawn 6-node example."""

from __future__ import annotations

import numpy as np
import pytest

from racer_ref import Drafter
from racer_ref.tree import DraftTree, tree_attention_mask


def test_the_six_node_example():
    mask = tree_attention_mask(np.array([-1, 0, 0, 1, 1, 3]))
    assert mask.dtype == np.bool_
    assert mask.astype(int).tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0],
                                         [1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0], [1, 1, 0, 1, 0, 1]]
    assert tree_attention_mask(np.array([-1])).tolist() == [[True]]
    assert DraftTree.root_only(4).attention_mask.tolist() == [[True]]


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_equals_the_drafters_masks(backend):
    drafter = Drafter("racer", vocab_size=64, capacity=24, backend=backend)
    text = np.array([5, 6, 7, 8, 9, 10, 5, 6, 7, 11, 5, 6, 12] * 3, dtype=np.int64)
    topk = np.stack([(text + i) % 64 for i in range(8)], axis=1)  # (n, 8) a fake copy-logit table
    drafter.observe(text, topk)
    drafter.commit(text)
    sizes = set()
    for root in (5, 6, 7, 30):
        tree = drafter.draft(root)
        tree.validate(64)
        sizes.add(len(tree))
        assert np.array_equal(tree.attention_mask, tree_attention_mask(tree.parents))
    assert max(sizes) > 3  # real trees, not lone roots
