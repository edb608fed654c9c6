//! The Aho-Corasick n-gram automaton (to be written).
