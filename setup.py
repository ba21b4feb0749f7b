"""Builds the one C extension: the token-trie walk behind per-state masks (src/constrained/_kernel.c)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("constrained._kernel", ["src/constrained/_kernel.c"], extra_compile_args=["-O3"])])
