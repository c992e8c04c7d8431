"""Warnings that point at the script's line, not memcomm's.

A fixed stacklevel names the right line only for one call path: stop() reached from a with block's
__exit__ pointed at memcomm/profiler.py, and the same warning from a direct stop() call at the
script. warn() names the first frame outside the memcomm package and the standard library, whichever
path led there; under python -m memcomm after the script (or the function a child ran) ended, the
script with line 0.
Under python -m memcomm a warning that a filter turns into an error is printed, not raised (RunnerWarnings).
The profile's advice on what it did not see has categories of its own (ProfileAdvice), so a filter can
name them by kind rather than by their wording.
"""
import os
import sys
import warnings
from types import CodeType
from typing import Any, Callable, Set, Type

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_INSTALLED = tuple(_STDLIB + folder + os.sep for folder in ("site-packages", "dist-packages"))


def in_memcomm(filename: str) -> bool:
    """Whether a code object's file is one of the memcomm package's."""
    return os.path.abspath(filename).startswith(_PACKAGE)


def _not_the_scripts(filename: str) -> bool:
    """memcomm's own frames, and the standard library's that led to them: Python's frozen runpy that runs
    python -m memcomm, contextlib's exit of a with block, multiprocessing's start of a child that
    runs a function of the script (a child's profile ends after that function returned)."""
    return in_memcomm(filename) or filename.startswith("<frozen") or _in_standard_library(filename)


def _in_standard_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_STDLIB) and not path.startswith(_INSTALLED)


class ProfileAdvice(UserWarning):
    """What a profile did not see and how to let it see it (no step, no forward): advice about the
    script, not a fault in the trace."""


class NothingRecorded(ProfileAdvice):
    """A profile that recorded no forward, backward or optimizer step at all in its process."""


class RunnerWarnings:
    """Set by python -m memcomm: memcomm's warnings never fail the script it runs, whatever -W error or
    the script's own warnings.simplefilter("error") says (a warning from a DDP communication hook would
    raise inside the script's backward); they are printed instead."""
    on = False


_ENTRIES: Set[CodeType] = set()  # where a child begins the script's function: what called them is machinery


def entry_of_the_script(function: Callable[..., Any]) -> Callable[..., Any]:
    """Marks `function` as one that runs the script's code for a process's machinery (torch's or
    multiprocessing's start of a child): warn() reaching it has passed the script."""
    _ENTRIES.add(function.__code__)
    return function


def say(text: str) -> None:
    """memcomm's own text on stderr: the script's sys.stderr, else the process's; nothing where the script
    closed both (it ends as it would have without memcomm, where it ended with exit 1, "lost sys.stderr")."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            stream.write(text)
            stream.flush()
            return
        except (AttributeError, ValueError, OSError):  # None, closed, or a closed descriptor
            continue


def _stderr_closed() -> bool:
    return sys.stderr is None or getattr(sys.stderr, "closed", False)


def warn(message: str, category: Type[Warning] = UserWarning) -> None:
    level, frame = 2, sys._getframe(1)  # level 2: warn()'s caller
    while frame is not None and _not_the_scripts(frame.f_code.co_filename):
        frame, level = (None, level) if frame.f_code in _ENTRIES else (frame.f_back, level + 1)
    if _stderr_closed():  # the warnings module would raise writing to it (it catches OSError alone)
        with warnings.catch_warnings(record=True) as caught:  # the filters as they are, shown here
            _warn_at(frame, level + 1, message, category)
        for w in caught:
            say(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
        return
    _warn_at(frame, level + 1, message, category)


def _warn_at(frame: Any, level: int, message: str, category: Type[Warning]) -> None:
    """warnings.warn for warn(), at the script's frame (`level` frames up from _warn_at), or after the script."""
    try:
        if frame is None:  # python -m memcomm after the script (or a child's function) ended: the script, at no line
            script = getattr(sys.modules.get("__main__"), "__file__", None) or "memcomm"
            warnings.warn_explicit(message, category, script, 0, module="memcomm")
        else:
            warnings.warn(message, category, stacklevel=level)
    except category:  # a filter made it an error
        if not RunnerWarnings.on:
            raise
        say(f"{category.__name__}: {message}\n")
