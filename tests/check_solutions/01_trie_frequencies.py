"""Exercise 01 answered by the twin: ``racer_ref.reference.Automaton`` without eviction."""
from racer_ref.course.cases.automaton import parse_dump
from racer_ref.reference.automaton import Automaton


class Trie:
    def __init__(self, ngram):
        self._automaton = Automaton(max_nodes=10**9, ngram=ngram)

    def extend(self, tokens):
        self._automaton.extend(tokens)

    def freq(self, path):
        state = parse_dump(self._automaton.dump())["states"].get(tuple(path))
        return 0 if state is None else state[0]

    def __len__(self):
        return len(self._automaton)
