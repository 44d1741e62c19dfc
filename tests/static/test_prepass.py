"""The pre-pass (``plugin/rewrite.prepare_file``) renames only the top-level definitions that
define a name twice in one scope, and ends with exactly the tree and gradient-free regions that
renaming every definition first would give (what it did before, at the cost of mypy's renamer
walking every function).

Each binding form mypy's renamer counts as a definition is covered: parameters, assignment
targets (tuples, lists, starred), ``for`` and ``with ... as`` targets, ``except ... as`` names,
``match`` captures (not read by the walk: such a definition is always renamed), class bodies,
nested functions.  Names bound by forms the renamer does not count (a walrus, ``+=``, an
import) do not make a definition rebinding.
"""

from __future__ import annotations

import textwrap

import pytest
from mypy.errors import Errors
from mypy.nodes import MypyFile, NameExpr
from mypy.options import Options
from mypy.parse import parse
from mypy.server.subexpr import get_subexpressions

from spmd_mypy.plugin import rewrite

# A test that counts calls by replacing a function of rewrite.py: the compiled plugin calls its
# own functions directly (a module attribute set from outside is not what it calls)
_counts_calls = pytest.mark.skipif(
    rewrite.__file__.endswith((".so", ".pyd")),
    reason="the compiled rewrite.py calls its functions directly: replacing one counts nothing")

SOURCE = textwrap.dedent('''
    import torch
    import spmd
    from spmd import Tensor, I, R

    def plain(x: Tensor[R["tp"]]) -> Tensor[R["tp"]]:
        y = x * 2
        return y

    def reassigns_param(x):
        x = x.detach()
        return x

    def two_excepts(x):
        try:
            pass
        except ValueError as e:
            print(e)
        except KeyError as e:
            print(e)
        return x

    def two_withs(x):
        with open("a") as h:
            pass
        with open("b") as h:
            pass
        return h

    def two_loops(xs):
        for a in xs:
            print(a)
        for a in xs:
            print(a)
        return a

    def starred(t):
        a, *b = t
        *b, c = t
        return b

    def matches(v):
        match v:
            case [a, b]:
                return a
        return None

    class ClassLevel:
        z = 1
        z = "a"

    class Nested:
        def meth(self, x):
            def inner(y):
                y = y + 1
                return y
            return inner(x)

    class Quiet:
        def meth(self, x):
            y = x + 1
            return y

    def walrus_once(x):
        if (y := x) is not None:
            return y
        y = 3
        return y

    def augmented(x):
        d = x.detach()
        d += 1
        return d

    def imports_then_binds(x):
        import math
        math = 3
        return math

    @torch.no_grad()
    def decorated(x):
        d = x.detach()
        d = d * 2
        return d

    def detached_then_not(x):
        m = x.max().detach()
        n = spmd.all_reduce(m, "tp", src=R, dst=I)
        m = m + x
        return n, m

    class Mixed:
        scale = 2

        def quiet(self, x):
            y = x * self.scale
            return y

        @torch.no_grad()
        def loud(self, x):
            d = x.detach()
            d = d * 2
            return d

        def loops(self, xs):
            for a in xs:
                print(a)
            for a in xs:
                print(a)
            return a
''')

REBINDING = {"reassigns_param", "two_excepts", "two_withs", "two_loops", "starred", "matches",
             "ClassLevel", "Nested", "decorated", "detached_then_not", "Mixed"}


def _parse(source: str) -> tuple[MypyFile, Options]:
    options = Options()
    return parse(source, "m.py", "m", Errors(options), options, eager=True), options


def _name(d: object) -> str:
    inner = getattr(d, "func", d)
    return getattr(inner, "name", "")


def test_only_definitions_that_define_a_name_twice_are_renamed() -> None:
    tree, _ = _parse(SOURCE)
    w = rewrite._Walker(rewrite=False)
    flagged = set()
    for d in tree.defs:
        w.rebinds = False
        w.stmt(d)
        if w.rebinds:
            flagged.add(_name(d))
    assert flagged == REBINDING


def test_the_tree_and_regions_equal_renaming_everything_first() -> None:
    ours, options = _parse(SOURCE)
    regions = rewrite.prepare_file(ours, options)

    reference, _ = _parse(SOURCE)
    rewrite.rename_redefinitions(reference, options)  # every definition, then the walk
    expected = rewrite._walk(reference, rewrite=True)

    assert str(ours) == str(reference)
    assert sorted(regions.detached_names) == sorted(expected.detached_names)
    assert regions.ranges == expected.ranges
    # renamed where they should be: the second definitions, and only in rebinding functions
    text = str(ours)
    assert all(f"NameExpr({n}')" in text for n in ("x", "e", "a", "b", "y", "d", "m"))
    # the gradient-free names are the renamed ones of decorated() and detached_then_not()
    names = {n for _, _, n in regions.detached_names}
    assert {"d", "d'"} <= names
    assert "m" in names and "m'" not in names and "n" in names


@pytest.mark.parametrize("redefinition", ["allow_redefinition", "allow_redefinition_old"])
def test_modules_that_allow_redefinition_are_not_renamed(redefinition: str) -> None:
    tree, options = _parse(SOURCE)
    setattr(options, redefinition, True)
    rewrite.prepare_file(tree, options)
    assert "x'" not in str(tree)


LOOPS = textwrap.dedent('''
    def owned(ps, qs, gs):
        for p in ps:
            g = p.grad
            assert g is not None
        with ctx():
            for m, g in zip(qs, gs):
                m.add_(g)
            for p, m in zip(ps, qs):
                p.copy_(m)
        for k in range(3):
            for q in ps:
                q.mul_(2)
            if k:
                for q in qs:
                    q.mul_(2)
        for b in ps:
            b.sum()
        with ctx():
            for b in f(b):
                b.sum()

    def kept(ps, qs, c):
        for p in ps:
            p.sum()
        with ctx():
            for p in qs:
                p.sum()
        print(p)
        for a in ps:
            a.sum()
        with ctx():
            for a in qs:
                a.sum()
            else:
                print(a)
        q = ps
        for k in range(2):
            if k:
                print(q)
            for q in ps:
                q.sum()
        for h in ps:
            h.sum()
        with ctx():
            for h in qs:
                fn = lambda h: h * 2
        for z in ps:
            z.sum()
        with ctx():
            for z in qs:
                z.sum()
        def inner():
            return z
        for y in ps:
            y.sum()
        with ctx():
            for y in qs:
                y.sum()
        fy = lambda: y
''')


def _loop_names(function: str) -> list[str]:
    tree, options = _parse(LOOPS)
    rewrite.prepare_file(tree, options)
    f = next(d for d in tree.defs if _name(d) == function)
    return [n.name for n in get_subexpressions(f) if isinstance(n, NameExpr)]


def test_each_loop_owns_its_variables_when_nothing_else_reads_them() -> None:
    names = _loop_names("owned")
    # each loop of p, g, q binds a name of its own; g = p.grad keeps g; the two loops of m
    # in one block are mypy's renamer's (m, m')
    assert {"p'", "p''", "g'", "q'", "q''", "m'"} <= set(names)
    assert "p" not in names and "q" not in names
    assert names.count("g") == 2 and names.count("g'") == 2 and names.count("m") == 2
    # the second loop of b reads the first one's b in its iterable, then binds its own
    assert names[-4:] == ["b'", "f", "b", "b'"] and names.count("b") == 3


def test_a_loop_variable_another_read_may_see_keeps_its_name() -> None:
    # read after the loop, in its else, earlier in a loop around it, by a lambda with its
    # name, a nested function, a lambda: one variable, as mypy has it
    names = _loop_names("kept")
    assert not any(n.endswith("'") for n in names)


@pytest.mark.parametrize("redefinition", ["allow_redefinition", "allow_redefinition_old"])
def test_loop_variables_are_their_own_under_any_redefinition_option(redefinition: str) -> None:
    tree, options = _parse(LOOPS)
    setattr(options, redefinition, True)
    rewrite.prepare_file(tree, options)
    assert "NameExpr(p')" in str(tree)


CLASS_SOURCE = textwrap.dedent('''
    import torch
    import spmd
    from spmd import I, R

    class Layer:
        def rebinds(self, x):
            m = x.max().detach()
            m = m + x
            k = m.argmax(-1)
            return m, k

        def clean(self, x):
            g = x.detach()
            n = spmd.all_reduce(g, "tp", src=R, dst=I)

            def inner(y):
                h = y.detach()
                return h

            return n, inner(x)

        @torch.no_grad()
        def decorated(self, x):
            c = x * 2
            i = c.argmax(-1)
            return c, i
''')


@_counts_calls
def test_a_method_defining_no_name_twice_is_not_walked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The renamer changes nothing in a function that defines each name once: after renaming
    a class (one of its methods rebinds a name), only that method is walked again; the
    others keep their first walk's gradient-free and integer names."""
    walks: list[list[str]] = []
    fixpoint = rewrite._gradient_free_names

    def counted(assigns, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        walks.append(sorted(assigns))
        return fixpoint(assigns, *args, **kwargs)

    ours, options = _parse(CLASS_SOURCE)
    monkeypatch.setattr(rewrite, "_gradient_free_names", counted)
    regions = rewrite.prepare_file(ours, options)
    monkeypatch.undo()
    # the first walk: rebinds, inner, clean, decorated; again: rebinds only (renamed)
    assert len(walks) == 5
    assert walks[0] == ["k", "m", "self", "x"] and walks[-1] == ["k", "m", "m'", "self", "x"]

    reference, _ = _parse(CLASS_SOURCE)
    rewrite.rename_redefinitions(reference, options)
    expected = rewrite._walk(reference, rewrite=True)
    rewrite._resolve_integers(regions)
    rewrite._resolve_integers(expected)
    assert str(ours) == str(reference)
    assert regions.detached_names == expected.detached_names
    assert regions.integer_names == expected.integer_names
    assert regions.shadowed == expected.shadowed
    names = {n for _, _, n in regions.detached_names}
    assert {"g", "n", "h", "c", "i", "m"} <= names and "m'" not in names


@_counts_calls
def test_a_class_gives_the_renamer_only_its_methods_that_define_a_name_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each function is a scope of its own to mypy's renamer (and to .webs, .loop_names): a
    class whose body defines no name twice hands over only its rebinding methods; a class
    whose body does (ClassLevel) is renamed whole."""
    given: list[list[str]] = []
    rename = rewrite.rename_redefinitions

    def recorded(file, options, defs=None, loops=None):  # noqa: ANN001, ANN202
        given.append([_name(d) for d in defs or ()])
        given.append([_name(d) for d in loops or ()])
        return rename(file, options, defs, loops)

    tree, options = _parse(SOURCE)
    monkeypatch.setattr(rewrite, "rename_redefinitions", recorded)
    rewrite.prepare_file(tree, options)
    monkeypatch.undo()
    defs, loops = given
    assert "quiet" not in defs and "Mixed" not in defs and "Nested" not in defs
    assert {"loud", "loops", "meth", "ClassLevel", "two_loops"} <= set(defs)
    assert "loops" in loops and "two_loops" in loops and "quiet" not in loops
    assert "NameExpr(d')" in str(tree) and "NameExpr(a')" in str(tree)


WEBS = textwrap.dedent('''
    def split(a, b, c, how):
        if how:
            flat = a
            return flat
        if c:
            flat = b
            return flat
        x = a
        if c:
            x = b
            return x
        return x

    def joined(a, b, c, n):
        x = a
        if c:
            x = b
        print(x)
        y = a
        for _ in range(n):
            print(y)
            y = b
        z = a
        with ctx():
            z = b
        print(z)
        w = a
        if c:
            w = b
            f = lambda: w
        return f
''')


def _web_names(function: str) -> list[str]:
    tree, options = _parse(WEBS)
    rewrite.prepare_file(tree, options)
    f = next(d for d in tree.defs if _name(d) == function)
    return [n.name for n in get_subexpressions(f) if isinstance(n, NameExpr)]


def test_bindings_no_read_joins_are_variables_of_their_own() -> None:
    names = _web_names("split")
    # the first binding keeps the name; the later branch's flat, the branch's x, their own
    assert names.count("flat") == 2 and names.count("flat'") == 2
    assert names.count("x") == 2 and names.count("x'") == 2


def test_bindings_a_read_may_join_stay_one_variable() -> None:
    # after a branch, in the next iteration, after a with body (left at any point), through
    # a lambda: one variable, as mypy has it
    assert not any(n.endswith("'") for n in _web_names("joined"))
