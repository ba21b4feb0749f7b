"""Type stub of the native extension (C, built from src/constrained/kernel/): its functions take and return numpy arrays and ints."""

from typing import Any

def __getattr__(name: str) -> Any: ...
