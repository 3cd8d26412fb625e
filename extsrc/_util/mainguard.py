"""Refuse, at ``Loader`` construction, a script whose loader code runs when it is imported.

DALI starts its reader processes with ``spawn`` on a GPU (and whenever ``start_method="spawn"``).
A spawned process imports the user's script again, as the module ``__mp_main__``, to find the
functions it was sent; every statement not under ``if __name__ == "__main__":`` runs once more in
it. A script that builds a Loader (or calls ``torch.distributed.init_process_group``) at top level
then builds it again in every reader: on a CPU machine DALI ends with its raw "Workers
initialization failed", on a GPU machine under ``torchrun`` the readers can block forever joining
the process group. Both checks here end that at once with one line saying what to change:

* in the script's own process, before any reader starts: the statement of ``__main__`` that is
  running lies outside an ``if __name__ == "__main__":`` block (read from the script's source);
* in a spawned process while it imports the script (a backstop, for scripts whose source cannot
  be read).
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from types import FrameType

from extsrc.errors import MainGuardError

__all__ = ["check_main_guard"]

_RE_IMPORTING_METHODS = ("spawn", "forkserver")


def check_main_guard(num_workers: int, start_method: str) -> None:
    """Raise :class:`~extsrc.errors.MainGuardError` when the Loader being built comes from a
    script's top-level code that a spawned reader process would run again.

    ``num_workers`` and ``start_method`` are the loader's: with no reader processes, or with
    ``fork`` (which imports nothing again), top-level code is harmless and nothing is checked in
    the script's own process.
    """
    reimport = _module_frame("__mp_main__")
    if reimport is not None or getattr(multiprocessing.current_process(), "_inheriting", False):
        # This process is a spawned child still importing the parent's script.
        where = _where(reimport) if reimport is not None else "the script"
        raise MainGuardError(_message(where, in_child=True))
    if num_workers == 0 or start_method not in _RE_IMPORTING_METHODS:
        return
    main = _module_frame("__main__")
    if main is None or _spawn_skips_main():
        return
    guarded = _under_main_guard(main.f_code.co_filename, main.f_lineno)
    if guarded is False:
        raise MainGuardError(_message(_where(main), in_child=False))


def _message(where: str, *, in_child: bool) -> str:
    ran = ("a DALI reader process is importing the script again and " if in_child else "")
    return (
        f"extsrc.Loader: {where} builds a Loader at import time, and {ran}DALI's reader "
        "processes start with 'spawn', which imports the script again and runs that code once "
        "more in each of them (hanging or failing): put the script's top-level code under "
        "`if __name__ == \"__main__\":` (e.g. in a main() called from there)"
    )


def _where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename} line {frame.f_lineno}"


def _module_frame(name: str) -> FrameType | None:
    """The frame running the top-level code of the module called ``name``, if on the stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == name:
            return frame
        frame = frame.f_back
    return None


def _spawn_skips_main() -> bool:
    """Whether spawned processes leave ``__main__`` alone, as multiprocessing does for a
    package's ``__main__.py`` (``python -m pkg``) and for the IPython launcher."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name.endswith("__main__"):
        return True
    file = getattr(main, "__file__", None)
    return file is None or file.rsplit("/", 1)[-1].split(".")[0] == "ipython"


def _under_main_guard(path: str, line: int) -> bool | None:
    """Whether ``line`` of the script at ``path`` lies inside an ``if __name__ == "__main__":``
    block; ``None`` when the source cannot be read (then nothing is claimed)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None

    def inside(nodes: list) -> bool:
        for node in nodes:
            end = getattr(node, "end_lineno", None) or node.lineno
            if not node.lineno <= line <= end:
                continue
            if isinstance(node, ast.If) and _tests_main(node.test):
                return _in_block(node.body, line)
            # Compound statements (with, try, for, if on something else): look inside.
            for block in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, block, None)
                if isinstance(children, list) and children and inside(children):
                    return True
            return False
        return False

    return inside(tree.body)


def _in_block(nodes: list[ast.stmt], line: int) -> bool:
    return any(n.lineno <= line <= (getattr(n, "end_lineno", None) or n.lineno) for n in nodes)


def _tests_main(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round, possibly inside an ``and``)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            sides = [node.left, *node.comparators]
            names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
            consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
            if names and consts:
                return True
    return False
