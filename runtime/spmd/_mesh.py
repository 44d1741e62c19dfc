"""The current mesh: mesh axis names -> process groups.

::

    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    spmd.set_mesh(mesh)                 # from now on "dp" and "tp" name process groups
    with spmd.set_mesh(other_mesh):     # ... or only inside the block
        ...

A collective's ``axis`` is resolved here, once per (mesh, axis) and cached:

- a name (``"tp"``): the mesh's process group of that dim;
- a tuple of names (``("dp", "tp")``): ONE collective over the flattened group of
  those dims, the ranks ordered row-major over the dims in the order written
  (``("dp", "tp")`` is dp-major, as in ``PS[("dp", "tp"), None]``); the group is
  the mesh's own flattened group (``DeviceMesh._flatten``), created the first
  time the tuple is used -- creating a group is collective over the whole world,
  so every rank must reach that first use (SPMD code does);
- a ``torch.distributed.ProcessGroup``: used as is; with a mesh set it must be
  the group of some of the mesh's dims (it is then known by those names).

A flattened dim (``mesh["dp_replicate", "dp_shard"]._flatten("dp")``, kept by torch in the root
mesh's ``_flatten_mapping``) is a name for its component axes: under the root mesh (or any mesh
holding all its components), or with the flattened mesh itself set, ``"dp"`` resolves to
``("dp_replicate", "dp_shard")`` -- the same group, and the same names in every type and
message -- so a value reduced over the tuple is not reduced again over ``"dp"``.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch.distributed as dist
from spmd_mypy.engine.annotations import alias_note, closest, expand_axes
from spmd_mypy.engine.types import repeated_axis_message

from ._context import without_user_modes
from ._dist_utils import AxisGroup

try:  # torch without distributed support has no DeviceMesh
    from torch.distributed.device_mesh import DeviceMesh
except ImportError:  # pragma: no cover
    DeviceMesh = None  # type: ignore[assignment,misc]


_SERIALS = itertools.count(1)


class _Binding:
    """A mesh made current: its names and the axis -> AxisGroup cache."""

    __slots__ = ("mesh", "names", "coordinate", "cache", "plans", "serial", "direct", "world",
                 "_aliases", "_aliases_key", "_parts", "_all_parts", "named")

    def __init__(self, mesh: Any) -> None:
        if DeviceMesh is None or not isinstance(mesh, DeviceMesh):
            raise TypeError("spmd.set_mesh takes a torch.distributed DeviceMesh with dim names, "
                            f"not {type(mesh).__name__}")
        names = mesh.mesh_dim_names
        if not names:
            raise ValueError(
                "spmd.set_mesh needs a DeviceMesh with dim names, e.g. "
                'init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))')
        coordinate = mesh.get_coordinate()
        if coordinate is None:
            raise ValueError(f"rank {dist.get_rank()} is not in the mesh {mesh}")
        self.mesh = mesh
        self.names: tuple[str, ...] = tuple(names)
        self.coordinate: tuple[int, ...] = tuple(coordinate)
        self.cache: dict[Any, AxisGroup] = {}
        self.plans: dict[Any, Any] = {}  # the collectives' per-call plans (see _collectives)
        # which binding this is, as an int torch.compile guards on (a traced function is
        # traced again under another mesh)
        self.serial: int = next(_SERIALS)
        # axis -> AxisGroup whose collectives are one flat torch.distributed call on the
        # input as is (more than one rank, numbered in logical order): the fast paths of
        # the commonest no-grad collectives (filled by _collectives._plan)
        self.direct: dict[Any, Any] = {}
        # the default process group it was made under (another after destroy/init_process_group)
        self.world: Any = _default_group()
        # flattened dims -> component axes (see aliases), recomputed when torch's mapping grows
        self._aliases: dict[str, tuple[tuple[str, ...], Any]] = {}
        self._aliases_key: int = -1
        self._parts: dict[str, tuple[str, ...]] = {}
        self._all_parts: dict[str, tuple[str, ...]] = {}  # every flattened dim of the root
        # axis -> the names it stands for (axis_names: out_partial_axes at every spmd.linear)
        self.named: dict[Any, tuple[str, ...]] = {}

    def aliases(self) -> dict[str, tuple[tuple[str, ...], Any]]:
        """The flattened dims this mesh can name: name -> (component axes in mesh order, the
        flattened DeviceMesh).  Those of the root mesh whose components are all dims of this
        mesh, and this mesh's own name when it is a flattened mesh.  Read from torch's
        ``_flatten_mapping`` (private: without it, no flattened names)."""
        try:
            root = self.mesh._get_root_mesh()
            mapping = root._flatten_mapping
        except Exception:  # noqa: BLE001 - a DeviceMesh without the private API
            return self._aliases
        if len(mapping) == self._aliases_key:
            return self._aliases
        out: dict[str, tuple[tuple[str, ...], Any]] = {}
        every: dict[str, tuple[str, ...]] = {}
        for name, flat in list(mapping.items()):
            parts = _components(root, name, flat)
            if parts is None:
                continue
            every[name] = parts
            own = self.names == (name,) and flat is self.mesh or (
                self.names == (name,) and root is not self.mesh and flat == self.mesh)
            if own or (name not in self.names and set(parts) <= set(self.names)):
                out[name] = (parts, flat)
        self._aliases, self._aliases_key = out, len(mapping)
        self._parts = {n: parts for n, (parts, _) in out.items()}
        self._all_parts = every
        if unbound_names and self is _current:  # flattened after this mesh was set
            _bind_declared(self)
        return out

    def alias_parts(self) -> dict[str, tuple[str, ...]]:
        """name -> component axes of :meth:`aliases`."""
        self.aliases()
        return self._parts

    def written_aliases(self) -> tuple[str, ...]:
        """The flattened names of :meth:`aliases` a user made (``_flatten("dp")``, or torch's
        default name when the user flattened without one), not those ``spmd`` made for a
        tuple axis: the names messages list."""
        return tuple(n for n in self.alias_parts() if n not in _made_here)

    def type_aliases(self) -> dict[str, tuple[str, ...]]:
        """Every flattened dim of the root mesh -> its components: what "dp" means in a type
        (under ``mesh["tp"]`` too, where it names no group)."""
        self.aliases()
        return self._all_parts

    # -- resolution -------------------------------------------------------------------
    def ranks_of(self, names: tuple[str, ...]) -> list[int]:
        """Global ranks of the sub-mesh through this rank over ``names``, in logical order."""
        dims = [self.names.index(n) for n in names]
        index: list[Any] = list(self.coordinate)
        for d in dims:
            index[d] = slice(None)
        sub = self.mesh.mesh[tuple(index)]  # the remaining dims, in mesh order
        in_mesh_order = sorted(dims)
        sub = sub.permute([in_mesh_order.index(d) for d in dims])
        return [int(r) for r in sub.reshape(-1).tolist()]

    def group_of(self, names: tuple[str, ...]) -> dist.ProcessGroup:
        if len(names) == 1:
            return self.mesh.get_group(names[0])
        in_mesh_order = tuple(sorted(names, key=self.names.index))
        for parts, flat in self.aliases().values():  # flattened already: that group
            if parts == in_mesh_order:
                return flat.get_group()
        sub = self.mesh[in_mesh_order]
        try:
            before = set(self.mesh._get_root_mesh()._flatten_mapping)
        except Exception:  # noqa: BLE001 - a DeviceMesh without the private API
            before = set()
        try:
            flat = sub._flatten()
        except ValueError:  # the default name is taken by a different flattening
            flat = sub._flatten("_spmd_" + "_".join(in_mesh_order))
        made = tuple(flat.mesh_dim_names or ())
        if made and made[0] not in before:  # a name spmd made, not the user
            _made_here.add(made[0])
        return flat.get_group()

    def resolve(self, axis: Any) -> AxisGroup:
        group = self.cache.get(axis)
        if group is not None:
            return group
        with without_user_modes():  # (the first call may be under the user's modes)
            if isinstance(axis, dist.ProcessGroup):
                group = self._resolve_process_group(axis)
            else:
                names = self._check_names(axis)
                written = (axis,) if isinstance(axis, str) else tuple(axis)
                if len(written) == 1 and names != written:  # one flattened dim: its group
                    own = written[0] in self.names  # the flattened mesh itself is set
                    group = AxisGroup(
                        self.group_of(written) if own else self.aliases()[written[0]][1].get_group(),
                        names, self.ranks_of(written if own else names))
                else:
                    group = AxisGroup(self.group_of(names), names, self.ranks_of(names))
        self.cache[axis] = group
        return group

    def _check_names(self, axis: Any) -> tuple[str, ...]:
        """The axis names ``axis`` stands for, flattened dims replaced by their components."""
        names = (axis,) if isinstance(axis, str) else axis
        if not isinstance(names, tuple) or not names or not all(isinstance(n, str) for n in names):
            raise TypeError(f"a collective's axis is a mesh axis name, a tuple of names or a "
                            f"ProcessGroup, not {axis!r}")
        aliases = self.alias_parts()
        for n in names:
            if n not in self.names and n not in aliases:
                raise ValueError(unknown_axis_message(n, self.names, self.written_aliases()))
        expanded = expand_axes(names, aliases)
        repeated = repeated_axis_message(expanded)
        if repeated is not None:
            raise ValueError(repeated + alias_note(names, aliases))
        if expanded != names and len(names) > 1:
            outside = [n for n in expanded if n not in self.names]
            if outside:  # the flattened mesh set, its name in a tuple with another
                raise ValueError(unknown_axis_message(outside[0], self.names,
                                                      self.written_aliases()))
        return expanded

    def _resolve_process_group(self, pg: dist.ProcessGroup) -> AxisGroup:
        pg_ranks = list(dist.get_process_group_ranks(pg))
        # a flattened dim's group: its components (with size-1 ones the smallest set of
        # dims with these ranks would drop: a value reduced over the group is reduced
        # over them too)
        for name, (parts, flat) in self.aliases().items():
            try:
                if flat.get_group() is pg:
                    return AxisGroup(pg, parts, pg_ranks)
            except Exception:  # noqa: BLE001 - a flattened mesh without this rank's group
                continue
        for k in range(1, len(self.names) + 1):
            for names in itertools.combinations(self.names, k):
                if sorted(self.ranks_of(names)) == sorted(pg_ranks):
                    # a group passed directly keeps its own rank order
                    return AxisGroup(pg, names, pg_ranks)
        raise ValueError(
            f"the ProcessGroup {pg.group_name!r} (ranks {pg_ranks}) is not a group of the current "
            f"mesh (dims {', '.join(map(repr, self.names))}, through rank {dist.get_rank()}): pass a "
            f"mesh axis name or a tuple of them, or spmd.set_mesh() a mesh that has this group")


def unknown_axis_message(name: str, known: tuple[str, ...], flattened: tuple[str, ...] = ()) -> str:
    """With the closest names as the static checker finds them (case-insensitive); a name of
    another mesh set before (an expert mesh's "ep" while the dense mesh is current) is said so,
    not taken for a misspelling of a current one.  ``flattened``: the mesh's flattened dims."""
    msg = f"unknown mesh axis {name!r}: the current mesh has axes {', '.join(map(repr, known))}"
    if flattened:
        msg += f" (and the flattened {', '.join(map(repr, flattened))})"
    for binding in _live_bindings(_default_group()):
        if name in binding.names and binding.names != known:
            return (msg + f"; {name!r} is an axis of the mesh with axes "
                    f"{', '.join(map(repr, binding.names))}: run this under "
                    f"`with spmd.set_mesh(that_mesh):` (docs/meshes.md)")
    return (msg + closest(name, known + flattened) + "; an axis of another mesh needs that "
            "mesh current: `with spmd.set_mesh(that_mesh):` (docs/meshes.md)")


def is_axis_of_another_mesh(name: str) -> bool:
    """``name`` is an axis of a mesh set before whose groups are alive."""
    return any(name in b.names for b in _live_bindings(_default_group()))


def _components(root: Any, name: str, flat: Any) -> tuple[str, ...] | None:
    """The root mesh's dims the flattened mesh ``flat`` (named ``name``) flattens, in mesh
    order, from torch's layouts: the dims whose layouts collapse to ``flat``'s.  torch's
    layouts drop size-1 dims, so where sets differing only in size-1 dims match, the one
    torch's default name spells (``"dp_replicate_dp_shard"``) is taken, else the one without
    the size-1 dims.  None when no set matches (not a flattening of the root's dims)."""
    try:
        from torch.distributed._mesh_layout import _MeshLayout

        names = tuple(root.mesh_dim_names or ())
        target = flat._layout[0]
        found: list[tuple[str, ...]] = []
        for k in range(1, len(names) + 1):
            for dims in itertools.combinations(range(len(names)), k):
                if _MeshLayout([root._layout[d] for d in dims]).collapse() == target:
                    found.append(tuple(names[d] for d in dims))
    except Exception:  # noqa: BLE001 - another torch: no flattened names
        return None
    for parts in found:
        if "_".join(parts) == name:
            return parts
    return min(found, key=len) if found else None


_current: _Binding | None = None
# Flattened dims spmd made for a tuple axis (torch's default names, "dp_shard_tp"): real
# names, but not the user's, so no message lists them
_made_here: set[str] = set()
# Axis names of the types declared in the check mode while no mesh was current: read as the
# flattened dims of the first mesh that has them (``_bind_declared``)
unbound_names: set[str] = set()
_bare_groups: dict[Any, AxisGroup] = {}  # ProcessGroups used without a mesh
_bare_plans: dict[Any, Any] = {}  # plans of collectives called without a mesh
_bare_direct: dict[Any, Any] = {}  # and the direct groups without a mesh
# The current binding's direct groups (``_bare_direct`` without a mesh): one global read
# on the collectives' fast paths, kept in step with ``_current`` by ``_make_current``
direct_groups: dict[Any, Any] = _bare_direct


class _MeshScope:
    """What set_mesh returns: already in effect; as a context manager, undone on exit."""

    __slots__ = ("mesh", "_previous")

    def __init__(self, mesh: Any, previous: _Binding | None) -> None:
        self.mesh = mesh
        self._previous = previous

    def __enter__(self) -> Any:
        return self.mesh

    def __exit__(self, *exc: object) -> None:
        _make_current(self._previous)


# mesh -> its binding: caches survive set_mesh again, and an equal mesh (``mesh["dp", "cp"]``
# sliced again at every step: a new DeviceMesh object each time) shares its binding when its
# groups are the same ones (not after the process groups were made again)
_bindings: dict[Any, _Binding] = {}


def _binding_of(mesh: DeviceMesh) -> _Binding:
    binding = _bindings.get(mesh)
    if binding is None or (binding.mesh is not mesh and not _same_groups(binding.mesh, mesh)):
        binding = _Binding(mesh)
        _warn_if_a_name_means_other_ranks(binding)
        _bindings.pop(mesh, None)  # the key too: the equal mesh it held may be a dead one's
        _bindings[mesh] = binding
    return binding


def _live_bindings(world: Any) -> list[_Binding]:
    """The meshes set before whose process groups are alive (made under ``world``, not
    before a destroy_process_group / init_process_group)."""
    return [b for b in _bindings.values() if b.world is world]


def _default_group() -> Any:
    try:
        return dist.group.WORLD
    except Exception:  # noqa: BLE001 - no process group
        return None


def _warn_if_a_name_means_other_ranks(new: _Binding) -> None:
    """Types name axes, not groups: an axis name of a mesh set before that spans other ranks
    here (an expert mesh calling its data-parallel axis "dp" too) makes a value typed on it
    under one mesh reducible over the other's group with no error (the meshes probe: dense
    gradients all-reduced over the expert "dp", forgot to switch back). Said once per mesh."""
    for old in _live_bindings(new.world):
        for name in set(old.names) & set(new.names):
            try:
                before, now = old.ranks_of((name,)), new.ranks_of((name,))
            except Exception:  # noqa: BLE001 - a dead mesh: nothing to compare
                continue
            if before != now:
                import warnings

                warnings.warn(
                    f"spmd.set_mesh: axis {name!r} of the mesh with axes "
                    f"{', '.join(map(repr, new.names))} spans ranks {now} here, but {name!r} of "
                    f"the mesh with axes {', '.join(map(repr, old.names))} spans {before}: a "
                    f"value typed on {name!r} under one means other ranks under the other. "
                    f"Give the axes different names, or move values between the meshes through "
                    f"a full tensor or spmd.declare (the check mode raises spmd-mesh on a value "
                    f"used under the other mesh; docs/meshes.md)",
                    UserWarning, stacklevel=4)  # the caller of set_mesh
                return


def _same_groups(a: DeviceMesh, b: DeviceMesh) -> bool:
    try:
        return all(a.get_group(n) is b.get_group(n) for n in (b.mesh_dim_names or ()))
    except Exception:  # noqa: BLE001 - a group torch cannot give: not the same
        return False


def set_mesh(mesh: DeviceMesh | None) -> _MeshScope:
    """Make ``mesh`` (a DeviceMesh with dim names) the current mesh; ``None`` unsets it.

    Takes effect at once.  Used as a context manager, the previous mesh comes back
    on exit::

        spmd.set_mesh(mesh)
        with spmd.set_mesh(mesh2):
            spmd.all_reduce(x, "tp", src=P, dst=R)   # "tp" of mesh2
    """
    previous = _current
    if mesh is None:
        _make_current(None)
    else:
        _make_current(_binding_of(mesh))
    return _MeshScope(mesh, previous)


# Called with the binding made current (the check mode interns types per mesh: a value
# typed under one mesh is known as such under another; _checking sets it).
on_switch: Any = None


def _make_current(binding: _Binding | None) -> None:
    global _current, direct_groups
    _current = binding
    if on_switch is not None:
        on_switch(binding)
    direct_groups = binding.direct if binding is not None else _bare_direct
    if unbound_names and binding is not None:
        _bind_declared(binding)


def _bind_declared(binding: _Binding) -> None:
    """The types declared before any mesh was set (``P["dp"]``) that name a flattened dim of
    ``binding``'s family: every tracked type naming it now names its components, as if the
    mesh had been set first; a mesh dim's name is bound too (it stays itself)."""
    aliases = binding.type_aliases()
    names = {n for n in unbound_names if n in aliases}
    unbound_names.difference_update(names, binding.names)
    if names:
        from . import _checking

        _checking.expand_tracked({n: aliases[n] for n in names})


def family_axis_names() -> frozenset[str] | None:
    """The current mesh's axis names with those of the mesh it was sliced or flattened from
    (``mesh["tp"]`` is part of the (dp, tp) mesh: a value's "dp" type still holds under it),
    and that mesh's flattened names; None without a mesh.  A mesh made separately over the
    same ranks (an expert mesh) is another family: its axes say nothing here."""
    binding = _current
    if binding is None:
        return None
    names = set(binding.names)
    try:
        root = binding.mesh._get_root_mesh()
        names.update(root.mesh_dim_names or ())
        names.update(getattr(root, "_flatten_mapping", None) or ())
    except Exception:  # noqa: BLE001 - a DeviceMesh without the private API: its own names
        pass
    return frozenset(names)


def get_mesh() -> DeviceMesh | None:
    """The current DeviceMesh, or None."""
    return _current.mesh if _current is not None else None


def resolve_axis(axis: Any) -> AxisGroup:
    """``axis`` (a name, a tuple of names or a ProcessGroup) -> its AxisGroup (cached)."""
    if type(axis) is list:
        axis = tuple(axis)
    binding = _current
    if binding is not None:
        group = binding.cache.get(axis)
        return group if group is not None else binding.resolve(axis)
    if isinstance(axis, dist.ProcessGroup):
        group = _bare_groups.get(axis)
        if group is None:
            group = AxisGroup(axis, (), dist.get_process_group_ranks(axis))
            _bare_groups[axis] = group
        return group
    raise RuntimeError(
        f"no mesh is set, so the axis {axis!r} names nothing: call spmd.set_mesh(mesh) with a "
        f"DeviceMesh that has dim names (init_device_mesh(device, shape, mesh_dim_names=(...))), "
        f"or pass a ProcessGroup as the axis")


def expand_type(t: Any) -> tuple[Any, list[Any]]:
    """``t`` (an SpmdType) with the current mesh's flattened dims read as their components
    (``Tensor[R["dp"]]`` is ``Tensor[R["dp_replicate", "dp_shard"]]``), and the annotation
    errors that makes (a component typed twice); ``t`` itself when it names none."""
    binding = _current
    if binding is None or not t.axes and t.spec is None:
        return t, []
    aliases = binding.type_aliases()
    if not aliases or not any(a in aliases for a, _ in t.axes):
        return t, []
    from spmd_mypy.engine.annotations import build, entries_of

    return build(entries_of(t), None, aliases=aliases)


def flattened_names() -> tuple[str, ...]:
    """The current mesh's flattened dims a user made (names for several of its axes), as
    messages list them."""
    return _current.written_aliases() if _current is not None else ()


def axis_names(axis: Any) -> tuple[str, ...]:
    """The names of ``axis`` without resolving a group (validated if a mesh is set)."""
    if isinstance(axis, dist.ProcessGroup):
        return resolve_axis(axis).axes
    names = (axis,) if isinstance(axis, str) else tuple(axis)
    binding = _current
    if binding is not None:
        try:
            got = binding.named.get(names)
        except TypeError:  # an unhashable item: not names (the TypeError that says so)
            return binding._check_names(names)
        if got is None:  # (a name's meaning never changes: torch refuses to redefine one)
            got = binding.named[names] = binding._check_names(names)
        return got
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"out_partial_axes takes a mesh axis name or a tuple of names, not {axis!r}")
    return names


__all__ = ["set_mesh", "get_mesh", "resolve_axis", "axis_names", "unknown_axis_message"]