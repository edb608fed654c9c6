"""Exercise 01 answered by the twin: ``racer_ref.reference.Automaton`` without eviction."""
from racer_ref.course.cases.automaton import parse_dump
from racer_ref.reference.automaton import Automaton


class Node:
    def __init__(self, token, parent, depth):
        self.token, self.parent, self.depth, self.children = token, parent, depth, {}


class Trie:
    def __init__(self, ngram):
        self._automaton = Automaton(max_nodes=10**9, ngram=ngram)

    def extend(self, tokens):
        self._automaton.extend(tokens)

    def _states(self):
        return parse_dump(self._automaton.dump())["states"]

    @property
    def root(self):
        """The twin's states as the exercise's nodes (its depth is the path's length)."""
        root, nodes = Node(-1, None, 0), {}
        for path in sorted(self._states(), key=len):
            parent = nodes.get(path[:-1], root)
            nodes[path] = parent.children[path[-1]] = Node(path[-1], parent, len(path))
        return root

    def freq(self, path):
        state = self._states().get(tuple(path))
        return 0 if state is None else state[0]

    def __len__(self):
        return len(self._automaton)
