"""Exercise 02: failure links, the eager Aho-Corasick build (tutorial 2).

The failure link of a trie state s is the state of the longest *proper* suffix of s's
string that is also in the trie (the root, ``()``, if none is). The textbook build goes
breadth-first: a depth-1 state fails to the root, and for s = p + (t,) we walk p's failure
chain q = fail(p), fail(fail(p)), ... and stop at the first q that has a child t: that
child is fail(s) (the root if even the root has no child t).

    trie of "abcabdab" (ngram 3):  fail(dab) = ab,  fail(ab) = b,  fail(b) = ()

Check your code:  racer-ref check exercises/02_failure_links.py
(the automaton's named cases, then every link of random tries against the Rust core).
"""

from __future__ import annotations

from typing import Dict, Set, Tuple

Path = Tuple[int, ...]


def failure_links(paths: Set[Path]) -> Dict[Path, Path]:
    """The failure link of every state of a trie.

    Args:
        paths: the trie's states as token tuples, the root ``()`` excluded; prefix-closed
            (with every path, each of its prefixes is in the set).

    Returns:
        ``{path: fail(path)}`` for every path of ``paths``; ``()`` stands for the root.
    """
    ...
