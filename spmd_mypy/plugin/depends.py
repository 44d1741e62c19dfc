"""Fine-grained dependencies (dmypy) of what the plugin reads beyond the code mypy sees.

The daemon re-checks a function when a definition it depends on changes; mypy computes those
dependencies from the checked code itself (the names it refers to, the attributes and
``__call__`` of the types in its type map).  Where a hook types a call from another
definition than the one the call names (``model(x)`` typed by ``forward``, ``Fn.apply`` by
``Fn.forward``, ``self.seq(x)`` by the forwards of the classes the ``nn.Sequential`` was
built from), the plugin records the dependency itself, or an edit of that definition in
another module leaves the caller's diagnostics stale until the caller is edited too.

Not needed where the definition read ends up in the call's type map: a ``ModuleList``'s item
class is the type of the loop variable (``for b in self.blocks: b(x)`` depends on
``<Block.__call__>``), and a function that builds the items is called in the method that
builds the list (observed: an edit of its return type in another module re-checks the
methods that iterate the list; tests/editor/test_dmypy_deps.py).

Two kinds, both in the module's ``plugin_deps`` (merged into the daemon's dependency map
when the module is processed):

- class-level, from semantic analysis (:func:`class_dependency`): a trigger of the class
  fires another trigger of the same class (``<C.forward>`` -> ``<C.__call__>``), so every
  caller mypy already ties to ``<C.__call__>`` follows;
- call-site, from type checking (:func:`depend_on`): the definition read -> the target being
  checked (the enclosing top-level function, or the module's top level), as mypy's own
  dependency visitor names targets.

Limitation: mypy merges a module's ``plugin_deps`` when it processes the whole module (the
first build, an edit of the module); a function re-checked alone (because something it
depends on changed) keeps the dependencies it had, and gains no new call-site one.  What a
call site reads follows from its own module's code, so that edit is what changes it.
"""

from __future__ import annotations

from mypy.nodes import FuncDef, MypyFile
from mypy.plugin import ClassDefContext


def _trigger(fullname: str) -> str:
    return f"<{fullname}>"


def class_dependency(ctx: ClassDefContext, read: str, fires: str) -> None:
    """During semantic analysis of a class: a change of ``read`` (a fullname, often of a
    base class's member) is a change of ``fires`` (a member of the class)."""
    ctx.api.add_plugin_dependency(_trigger(read), _trigger(fires))


def depend_on(api: object, fullname: str) -> None:
    """During type checking: the code being checked (its target) read the definition
    ``fullname`` (a class member, a function, a class).  Nothing outside the daemon and
    ``cache_fine_grained`` builds (where mypy computes no fine-grained dependencies)."""
    options = getattr(api, "options", None)
    if options is None or not (options.fine_grained_incremental or options.cache_fine_grained):
        return
    tree = getattr(api, "tree", None)
    scope = getattr(api, "scope", None)
    if not isinstance(tree, MypyFile) or scope is None:
        return
    func = scope.top_level_function()
    target = func.fullname if isinstance(func, FuncDef) and func.fullname else tree.fullname
    tree.plugin_deps.setdefault(_trigger(fullname), set()).add(target)
