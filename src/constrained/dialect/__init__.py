"""The pattern language every grammar is written in, as values: its nodes, its one parser and its one writer.

Imports nothing of the engine above `constrained.errors`: automata, rules and front ends build on it.
"""
