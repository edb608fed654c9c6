"""The applications: the ``racer-ref`` command line (:mod:`racer_ref.app.cli`) and the main
job it runs as ``racer-ref demo`` (:mod:`racer_ref.app.demo`, also ``make demo``).

Imports run one way: app -> harness -> ``racer_ref.generate()``; nothing below imports this package.
"""
