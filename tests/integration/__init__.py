"""
Integration tests: slow, and each runs other processes (the Sphinx build with executed
notebooks, tf.distribute workers, a SavedModel loaded without GPflow). ``make test`` runs them
with the rest (``pytest -n 2 tests``); run the unit tests alone with
``pytest tests --ignore=tests/integration``.
"""
