"""A package's public names, each imported from its defining module on first use (PEP 562): a verb
loads only what it uses (`power` no regression library, `compare` no plotting one)."""
from __future__ import annotations

import importlib


def exports(package: str, public: dict[str, str]):
    """(__getattr__, __dir__) for `package`, whose `public` maps each name to the module defining it."""
    def __getattr__(name: str):
        if name in public:
            return getattr(importlib.import_module(public[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__
