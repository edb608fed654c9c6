"""The Aho-Corasick n-gram automaton, pure-Python teaching twin (to be written)."""


class Automaton:  # placeholder, replaced by the real twin
    pass
