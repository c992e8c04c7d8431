"""What memcomm's Python arguments accept as numbers: Python's and numpy's ints and floats, never a
bool (an int subclass in Python, numpy's bool_ beside it) nor a tensor."""
import numbers
from typing import Any


def _a_bool(value: Any) -> bool:
    return type(value).__name__ in ("bool", "bool_")


def is_int(value: Any) -> bool:
    """An int, or a numpy integer."""
    return isinstance(value, numbers.Integral) and not _a_bool(value)


def is_real(value: Any) -> bool:
    """An int or a float, or a numpy one (np.float32 is no Python float; np.float64 is)."""
    return isinstance(value, numbers.Real) and not _a_bool(value)
