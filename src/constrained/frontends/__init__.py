"""Input languages → dialect values and rule sets: JSON Schema, GBNF.

Front ends never see tokens, masks or caches; they import only `dialect`, `automata`, `rules` and `errors`.
"""
