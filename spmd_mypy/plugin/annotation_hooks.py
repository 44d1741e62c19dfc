"""The annotation hooks: ``Tensor[R["tp"], V["dp"]]`` analysed into a canonical instance.

mypy's semantic analysis calls :meth:`AnnotationHooks.analyze_tensor` for every ``Tensor[...]``
it meets (parameters, returns, variables, aliases): the entries are read
(:func:`.mypy_types.read_entry_fields`), validated by the engine (:func:`~spmd_mypy.engine.annotations.build`)
and turned into the canonical instance (:class:`.mypy_types.TypeBuilder`); each mistake is an
``spmd-annotation`` error at the annotation.  A lone marker (``V["tp"]`` outside a tensor type)
and ``spmd.grad_type[...]`` have their own hooks.
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING, Final

from mypy import errorcodes as codes
from mypy.plugin import AnalyzeTypeContext
from mypy.types import (
    AnyType,
    Instance,
    RawExpressionType,
    TupleType,
    Type,
    TypeList,
    TypeOfAny,
    UnboundType,
    UnionType,
    get_proper_type,
)

from ..engine.annotations import Entry, build
from ..engine.errors import SpmdError
from ..engine.types import SpmdType
from .codes import ERROR_CODES
from .torch_namespaces import split_params
from .mypy_types import (
    MARKER_FULLNAMES,
    MARKER_NAME_TO_FULLNAME,
    AnnotationError,
    EntryFields,
    read_entry_fields,
    show_unanalyzed,
)

if TYPE_CHECKING:
    from . import SpmdPlugin


class AnnotationHooks:
    """The type-analyze hooks of ``Tensor``, the markers and ``grad_type`` (module docstring)."""

    def __init__(self, plugin: SpmdPlugin) -> None:
        self.plugin = plugin
        # the same few annotations recur all over a code base: entries (as plain tuples, see
        # mypy_types.EntryFields) -> (type, errors)
        self._built: dict[tuple[EntryFields, ...], tuple[SpmdType, list[SpmdError]]] = {}

    def analyze_tensor(self, ctx: AnalyzeTypeContext) -> Type:
        plugin = self.plugin
        sem = getattr(ctx.api, "api", None)
        module = getattr(sem, "cur_mod_id", None)
        if module:
            plugin.promotion.typed_modules.add(module)
        # a module re-parsed without get_additional_deps: rename its redefinitions now
        plugin.renamer.ensure(getattr(sem, "cur_mod_node", None))
        plugin.boundaries.watch(getattr(sem, "errors", None))
        try:
            _drop_false_name_errors(ctx)
        except Exception:  # noqa: BLE001 - never crash mypy over a cosmetic fix
            pass
        entries: list[EntryFields] = []
        for arg in ctx.type.args:
            marker = _marker_of(ctx, arg) if isinstance(arg, UnboundType) else None
            if marker is _UNDEFINED and isinstance(arg, UnboundType):
                # mypy's own error (it does not report it here itself)
                ctx.api.fail(f'Name "{arg.name}" is not defined', ctx.context, code=codes.NAME_DEFINED)
                continue
            if marker is None:
                called = _called_marker(ctx, arg) if isinstance(arg, RawExpressionType) else None
                if called is not None and called.startswith(_SUBSCRIPTED):
                    _fail(ctx, called)
                    continue
                indexed = _indexed_shard(ctx, arg) if isinstance(arg, RawExpressionType) else None
                if indexed is not None:
                    _fail(ctx, indexed)
                    continue
                shown = called if called is not None else show_unanalyzed(arg)
                _fail(ctx, f'Tensor[...] takes entries R["axis"], I[...], V[...], P[...], '
                           f'S[dim, "axis"] or PS[...], not {shown}')
                continue
            try:
                entries.append(read_entry_fields(marker, arg))  # type: ignore[arg-type]
            except AnnotationError as e:
                _fail(ctx, str(e))
        key = tuple(entries)
        built = self._built.get(key)
        if built is None:
            built = build([Entry(m, axes, dim=dim, spec=spec) for m, axes, dim, spec in entries],
                          plugin.config.mesh_axes, plugin.config.axes_setting,
                          plugin.config.aliases)
            if len(self._built) > 10_000:
                self._built.clear()
            self._built[key] = built
        t, errors = built
        for err in errors:
            _fail(ctx, err.message)
        inst = plugin.types.to_instance(t)
        return inst if inst is not None else AnyType(TypeOfAny.from_error)

    def analyze_lone_marker(self, ctx: AnalyzeTypeContext) -> Type:
        name = ctx.type.name.rsplit(".", 1)[-1]
        if not ctx.type.args:  # `src: type[R]` and the like in stubs
            info = self.plugin.dispatch.lookup_info(MARKER_NAME_TO_FULLNAME.get(name, ""))
            return Instance(info, []) if info is not None else AnyType(TypeOfAny.special_form)
        api = ctx.api
        if getattr(api, "allow_unbound_tvars", False) or (
                getattr(api, "allow_placeholder", False) and not getattr(api, "defining_alias", False)):
            # `Act = Tensor[V["tp"]]` is also analysed as a value expression (a type
            # application of Tensor); the alias itself goes through analyze_tensor.
            return AnyType(TypeOfAny.special_form)
        example = 'S[0, "tp"]' if name in ("S", "Shard") else f'{name}["tp"]'
        _fail(ctx, f"{name}[...] is an entry of a tensor type: write Tensor[{example}]")
        return AnyType(TypeOfAny.from_error)

    def analyze_grad_type(self, ctx: AnalyzeTypeContext) -> Type:
        """``spmd.grad_type[Tensor[R["tp"]]]``: the gradient's type, ``Tensor[P["tp"]]``."""
        args = ctx.type.args
        if len(args) != 1:
            _fail(ctx, 'grad_type[...] takes one tensor type: grad_type[Tensor[R["tp"]]]'
                  if args else 'grad_type needs the tensor type whose gradient it names: '
                  'grad_type[Tensor[R["tp"]]]')
            return AnyType(TypeOfAny.from_error)
        analyzed = ctx.api.analyze_type(args[0])
        types = self.plugin.types
        t = types.from_type(analyzed)
        if t is None:
            p = get_proper_type(analyzed)
            if not isinstance(p, AnyType):
                _fail(ctx, f'grad_type[...] takes a tensor type such as Tensor[R["tp"]], '
                           f'not {show_unanalyzed(args[0])}')
            return AnyType(TypeOfAny.from_error)
        inst = types.to_instance(t.dual())
        return inst if inst is not None else AnyType(TypeOfAny.from_error)


_UNDEFINED: Final = "<undefined>"  # _marker_of: the entry's name is defined nowhere


def _marker_of(ctx: AnalyzeTypeContext, t: UnboundType) -> str | None:
    """The marker an entry names (``V`` of ``V["tp"]``); None for another name, _UNDEFINED
    for a name not defined (``V`` not imported)."""
    api = ctx.api
    try:
        sym = api.lookup_qualified(t.name, ctx.context, suppress_errors=True)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - never crash mypy on a lookup
        return None
    if sym is None:
        return _UNDEFINED
    if sym.node is not None:
        return MARKER_FULLNAMES.get(sym.node.fullname)
    return None


_SUBSCRIPTED: Final = "entries are subscripted, not called"
_CALL_NOTE: Final = "Suggestion: use "  # mypy's note on a call in a type: "... X[...] instead of X(...)"


def _called_marker(ctx: AnalyzeTypeContext, t: RawExpressionType) -> str | None:
    """The message for an entry written as a call (``R("tp")``, ``S(0, "tp")``: the form of
    ``src=``/``dst=``); ``a call f(...)`` for a call of something else; else None.  mypy's parser keeps only the callee's name (in its note),
    so the arguments are read back from the source at the call's position."""
    note = t.note or ""
    if t.literal_value is not None or not note.startswith(_CALL_NOTE):
        return None
    name = note[len(_CALL_NOTE):].split("[", 1)[0]
    marker: str | None = None
    try:
        sym = ctx.api.lookup_qualified(name, ctx.context, suppress_errors=True)  # type: ignore[attr-defined]
        if sym is not None and sym.node is not None:
            marker = MARKER_FULLNAMES.get(sym.node.fullname)
    except Exception:  # noqa: BLE001 - never crash mypy on a lookup
        return None
    if marker is None:
        return f"a call {name}(...)"
    args = _call_args(ctx, t, name)
    shown = args if args is not None else ("0, ..." if marker in ("S", "Shard") else "...")
    text = (f"{_SUBSCRIPTED}: write {name}[{shown}], not "
            f"{name}({shown})")
    if marker in ("S", "Shard"):
        dim = shown.split(",")[0].strip()
        text += f" ({name}({dim if dim.lstrip('-').isdigit() else 0}) is the form for src=/dst=)"
    return text


def _call_args(ctx: AnalyzeTypeContext, t: RawExpressionType, name: str) -> str | None:
    """The arguments of the call ``name(...)`` written at ``t``'s position, as written (on
    one line), or None when the source cannot be read."""
    sem = getattr(ctx.api, "api", None)
    errors = getattr(sem, "errors", None)
    read = getattr(errors, "read_source", None)
    path = getattr(getattr(sem, "cur_mod_node", None), "path", None)
    if read is None or not path or t.line < 1 or t.column < 0:
        return None
    try:
        lines = read(path)
    except Exception:  # noqa: BLE001 - the message falls back to "..."
        return None
    if not lines:
        return None
    # mypy gives the annotation's line and the call's column: the call starts there or on
    # one of the next lines (an annotation split over lines)
    for ln in range(t.line - 1, min(len(lines), t.line + 9)):
        rest = lines[ln][t.column:]
        if not rest.startswith(name) or not rest[len(name):].lstrip().startswith("("):
            continue
        return _inside_parens(" ".join([rest.rstrip()] + [line.strip() for line in lines[ln + 1:ln + 10]]))
    return None


def _indexed_shard(ctx: AnalyzeTypeContext, t: RawExpressionType) -> str | None:
    """The message for ``S(0)["dp_shard"]`` (the src=/dst= value subscripted: mypy keeps no
    trace of it, so it is read back from the source at ``t``'s position), or None."""
    if t.literal_value is not None or t.note:
        return None
    sem = getattr(ctx.api, "api", None)
    read = getattr(getattr(sem, "errors", None), "read_source", None)
    path = getattr(getattr(sem, "cur_mod_node", None), "path", None)
    if read is None or not path or t.line < 1 or t.column < 0:
        return None
    try:
        lines = read(path) or []
    except Exception:  # noqa: BLE001 - no message then
        return None
    for ln in range(t.line - 1, min(len(lines), t.line + 9)):
        m = re.match(r"(\w+)\s*\(\s*(-?\d+)\s*\)\s*\[([^\]]*)\]", lines[ln][t.column:])
        if m is None:
            continue
        try:
            sym = ctx.api.lookup_qualified(m.group(1), ctx.context, suppress_errors=True)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - never crash mypy on a lookup
            return None
        if sym is None or sym.node is None or MARKER_FULLNAMES.get(sym.node.fullname) not in ("S", "Shard"):
            return None
        name, dim, axes = m.group(1), m.group(2), " ".join(m.group(3).split())
        return (f"{name}({dim})[{axes}] is not an entry: write {name}[{dim}, {axes}] "
                f"({name}({dim}) is the value for src=/dst=, {name}[dim, axis] the annotation entry)")
    return None


def _inside_parens(text: str) -> str | None:
    """``"tp"`` of ``R("tp")) -> None: ...``: the text between the first parenthesis and the
    one closing it (strings skipped), whitespace runs made single spaces."""
    open_at = text.find("(")
    split = split_params(text[open_at + 1:]) if open_at >= 0 else None
    if split is None:
        return None
    return " ".join(", ".join(split[0]).split())


def _fail(ctx: AnalyzeTypeContext, message: str) -> None:
    ctx.api.fail(message, ctx.context, code=ERROR_CODES["spmd-annotation"])


def _drop_false_name_errors(ctx: AnalyzeTypeContext) -> None:
    """Undo ``Name "tp" is not defined`` for the axis strings of this annotation.

    The rewrite in get_additional_deps prevents them, but mypy re-parses a module
    that is re-checked only because a dependency changed without calling that hook
    (build.parse_all(post_parse=False)); then the signature's type-variable pass has
    just reported them, before this hook runs.  Only errors on the exact line of an
    axis string of this annotation, naming that string, are removed.
    """
    # the errors first: most files have none, and then the annotation need not be walked
    sem = getattr(ctx.api, "api", None)
    store = getattr(sem, "errors", None)
    if store is None:
        return
    infos = store.error_info_map.get(store.file)
    if not infos:
        return
    found: set[tuple[int, str]] = set()
    for arg in ctx.type.args:
        _axis_strings(arg, found)
    if not found:
        return
    keep = [i for i in infos if not (
        i.code is not None and i.code.code == "name-defined"
        and (i.line, i.message.split(";")[0]) in found)]
    if len(keep) != len(infos):
        infos[:] = keep


def _axis_strings(t: object, found: set[tuple[int, str]]) -> None:
    """The axis strings (forward references) of an unanalysed annotation, with their line."""
    if isinstance(t, UnboundType):
        if t.original_str_expr is not None and not t.args:
            found.add((t.line, f'Name "{t.original_str_expr}" is not defined'))
        for a in t.args:
            _axis_strings(a, found)
    elif isinstance(t, (TypeList, UnionType, TupleType)):
        # isinstance, not getattr(t, "items", None): a missing attribute raises (and
        # discards) an AttributeError, ~4k instructions, once per entry of every annotation
        for item in t.items:
            _axis_strings(item, found)
