"""Builds the C extensions: the token-trie walk behind per-state masks (src/constrained/kernel/, one concern per
source, built as the one module constrained._kernel) and the
NFA → minimal DFA compiler behind fsm.compile_dfa (src/constrained/_fsm.c) and the pattern → program front end
before it (src/constrained/_pattern.c)."""
from setuptools import Extension, setup

_SHARED = "src/constrained/_native.h"  # the growable vector and sort both compilers include
_KERNEL = "src/constrained/kernel/"
_KERNEL_SOURCES = [_KERNEL + name for name in
                   ("module.c", "buffers.c", "trie.c", "walks.c", "template.c", "bits.c", "tables.c", "graphs.c")]

setup(ext_modules=[
    Extension("constrained._kernel", _KERNEL_SOURCES, depends=[_KERNEL + "kernel.h"],
              extra_compile_args=["-O3", "-fvisibility=hidden"]),  # exports PyInit__kernel only
    Extension("constrained._fsm", ["src/constrained/_fsm.c"], depends=[_SHARED], extra_compile_args=["-O3"]),
    Extension("constrained._pattern", ["src/constrained/_pattern.c"], depends=[_SHARED], extra_compile_args=["-O3"]),
])
