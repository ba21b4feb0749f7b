"""Byte automata: dialect values → minimal DFAs over bytes and special-token symbols, and operations on them.

Knows nothing of tokens, masks or schemas: it imports only `constrained.dialect`, `constrained.errors` and the
native extensions.
"""
