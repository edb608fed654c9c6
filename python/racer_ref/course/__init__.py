"""The course kit: the exercises' checker and the named test cases it shares with the tests.

* ``racer_ref.course.check``: ``racer-ref check FILE``, the checker of ``exercises/NN_*.py``;
* ``racer_ref.course.cases``: the named, hand-checked cases that the Rust core, the Python
  twin and the checker all run;
* ``racer_ref.course.recorded``: the reference's answers recorded for a handout without the
  reference (``make handout``), and replayed there.

Until 0.2.0 these were ``racer_ref.check`` and ``racer_ref.cases``; those paths still import,
with a DeprecationWarning, for one release.
"""
