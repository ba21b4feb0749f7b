"""Builds the C extensions: the token-trie walk behind per-state masks (src/constrained/_kernel.c) and the
NFA → minimal DFA compiler behind fsm.compile_dfa (src/constrained/_fsm.c) and the pattern → program front end
before it (src/constrained/_pattern.c)."""
from setuptools import Extension, setup

_SHARED = "src/constrained/_native.h"  # the growable vector and sort both compilers include

setup(ext_modules=[
    Extension("constrained._kernel", ["src/constrained/_kernel.c"], extra_compile_args=["-O3"]),
    Extension("constrained._fsm", ["src/constrained/_fsm.c"], depends=[_SHARED], extra_compile_args=["-O3"]),
    Extension("constrained._pattern", ["src/constrained/_pattern.c"], depends=[_SHARED], extra_compile_args=["-O3"]),
])
