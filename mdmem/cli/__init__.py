"""The ``mdmem`` command line: parse, call the layers below, print. Nothing imports it.

Until the next release, the attributes of the old module ``mdmem.cli`` (now ``mdmem.cli.commands``) are
forwarded from here (``from mdmem.cli import ...`` keeps working).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from importlib import import_module  # here: importing the package stays free
    from importlib.util import find_spec

    if name.startswith("__") or find_spec(f"{__name__}.{name}") is not None:  # a submodule: imported as such
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module("mdmem.cli.commands"), name)
