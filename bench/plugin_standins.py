"""Stand-ins for the plugin, for bench/overhead_parts.py: the real plugin with its
check-time hooks taken away, so that a run shows what the rest costs.

    plugins = bench/plugin_standins.py:annotations_only
    plugins = bench/plugin_standins.py:mypy_answers

``annotations_only``: the plugin's work outside type checking, as it does it (the annotation
hooks that turn ``Tensor[R["tp"]]`` into the canonical class, the pre-pass of
``get_additional_deps``, the class hooks), and no function, method, signature or attribute
hook.  What mypy pays for the canonical types themselves.

``mypy_answers``: the same, and for every name the real plugin hooks (asked at every call,
as mypy asks it) a hook that returns mypy's own answer: the default return type, signature
or attribute type.  What mypy pays to call the hooks (it builds a context per hook call),
with none of the rules run.  mypy then checks typed calls against the declared signatures
(the real plugin relaxes them): on the bench corpus that leaves it clean.

A wrapper around the real plugin rather than a subclass: the installed plugin is compiled
with mypyc, whose classes an interpreted class cannot subclass.  ``mypy_answers`` asks the
real getters through one interpreted method each (the real plugin's getters are its
dispatch's compiled methods), so the part it attributes to mypy's hook calls is a little
high.  ``annotations_only`` keeps mypy's own compiled getters: an interpreted getter
answering None at every ask would be counted as the types' cost.
"""

from __future__ import annotations

from typing import Any, Callable

from mypy.options import Options
from mypy.plugin import Plugin, ReportConfigContext
from mypy.types import Type

from spmd_mypy.plugin import SpmdPlugin


def _default_return(ctx: Any) -> Type:
    return ctx.default_return_type


def _default_signature(ctx: Any) -> Any:
    return ctx.default_signature


def _default_attribute(ctx: Any) -> Type:
    return ctx.default_attr_type


class _StandIn(Plugin):
    """The real plugin outside type checking (its check-time hooks: the subclasses)."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.real = SpmdPlugin(options)

    def set_modules(self, modules: dict[str, Any]) -> None:
        super().set_modules(modules)
        self.real.set_modules(modules)

    def report_config_data(self, ctx: ReportConfigContext) -> object:
        # the cache of a stand-in is its own (another plugin version for mypy)
        return (type(self).__name__, self.real.report_config_data(ctx))

    def get_additional_deps(self, file: Any) -> list[tuple[int, str, int]]:
        return self.real.get_additional_deps(file)

    def get_type_analyze_hook(self, fullname: str) -> Callable | None:
        return self.real.get_type_analyze_hook(fullname)

    def get_customize_class_mro_hook(self, fullname: str) -> Callable | None:
        return self.real.get_customize_class_mro_hook(fullname)


class AnnotationsOnly(_StandIn):
    """No check-time hook: mypy's own (compiled) getters of Plugin answer None."""


class MypyAnswers(_StandIn):
    """mypy's own answer from a hook wherever the real plugin has one."""

    def get_function_hook(self, fullname: str) -> Callable | None:
        return _default_return if self.real.get_function_hook(fullname) is not None else None

    def get_method_hook(self, fullname: str) -> Callable | None:
        return _default_return if self.real.get_method_hook(fullname) is not None else None

    def get_function_signature_hook(self, fullname: str) -> Callable | None:
        return _default_signature if self.real.get_function_signature_hook(fullname) is not None else None

    def get_method_signature_hook(self, fullname: str) -> Callable | None:
        return _default_signature if self.real.get_method_signature_hook(fullname) is not None else None

    def get_attribute_hook(self, fullname: str) -> Callable | None:
        return _default_attribute if self.real.get_attribute_hook(fullname) is not None else None


def annotations_only(version: str) -> type[Plugin]:
    return AnnotationsOnly


def mypy_answers(version: str) -> type[Plugin]:
    return MypyAnswers
