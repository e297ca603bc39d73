"""The layer table: what each layer kind costs under each recompute option.

One row per (kind, option), long form (docs/design.md "The layer table"). Every
model takes a :class:`LayerTable` or a plain DataFrame with these columns;
:func:`as_layer_table` validates either once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

import numpy as np
import pandas as pd

from .._check import check_number
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, BODY, COUNT, FIRST_WORKING_MB, FORWARD_TIME, HEAD, KIND, LAYER_NUMERIC,
    LAYER_REQUIRED, MEMORY_ONCE_MB, MODULE, OPTION, PARAM_MB, ROLE, ROLES, TAIL, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_MEMORY_MB
from .options import CUSTOM_OPTIONS, check_custom_options
from .table_rows import built_rows, check_kind_column, replaced_numbers, validated_rows
from .units import check_time_unit, time_unit_of, with_time_unit

__all__ = ["LayerTable", "as_layer_table"]

@dataclass(frozen=True, eq=False)
class LayerTable:
    """A validated layer table.

    Parameters
    ----------
    frame : DataFrame
        One row per (kind, option) with the columns of
        :data:`~sappkit.columns.LAYER_REQUIRED`; the optional ones
        (:data:`~sappkit.columns.LAYER_OPTIONAL`) are filled with their defaults. Body kinds keep the order of
        their first row: that is model order.
    const_mb : float
        Memory every stage holds whatever runs on it (the layer JSON's
        ``stage_const_mem``), in MB.
    device : str, optional
        The device the table was measured on (:func:`sappkit.torch.measure_layers`
        writes e.g. ``"cpu"``); None for estimated or given costs.
    time_unit : str, optional
        The unit of ``forward_time`` and ``backward_time`` (a short name such
        as ``"ms"``); default the frame's ``attrs["time_unit"]``, else
        ``"time units"`` (nobody stated one). Every result built from the
        table shows its times in this unit, and :attr:`frame` carries it in
        its ``attrs`` (:mod:`sappkit.layers.units`).
    custom_options : tuple of str, optional
        Recompute options the table may name beside SAPP's five (``none``,
        ``selective``, ``comm``, ``both``, ``full``: :data:`~sappkit.columns.SAPP_OPTIONS`),
        e.g. a measured ``"attention"`` (:func:`sappkit.torch.measure_layers`
        declares its own); default the frame's ``attrs["custom_options"]``,
        else none. Any other name is refused, so a typo (``fulll``) cannot
        plan as an option of its own. :attr:`frame` carries them in its
        ``attrs``; a CSV does not: declare them again when reading it
        (``read_layers_csv(..., custom_options=...)``, ``--custom-options``).
    breakdown : DataFrame, optional
        Where each kind's time goes, per ``kind`` and ``option``
        (:func:`sappkit.estimate_layers` writes it; :mod:`sappkit.layers.timing`
        names its columns); None for given or measured tables.

    Examples
    --------
    >>> rows = [
    ...     dict(kind="embed", role="head", count=1, param_mb=500, option="none",
    ...          forward_time=1, backward_time=2, activation_mb=100),
    ...     dict(kind="block", role="body", count=8, param_mb=900, option="none",
    ...          forward_time=4, backward_time=8, activation_mb=300),
    ...     dict(kind="block", role="body", count=8, param_mb=900, option="full",
    ...          forward_time=4, backward_time=12, activation_mb=20),
    ... ]
    >>> table = LayerTable(pd.DataFrame(rows))
    >>> table.body_kinds, table.options("block")
    (('block',), ('none', 'full'))
    >>> table.time_unit, LayerTable(pd.DataFrame(rows), time_unit="ms").frame.attrs["time_unit"]
    ('time units', 'ms')
    >>> LayerTable(pd.DataFrame(rows).replace({"option": {"full": "fulll"}}))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: layers row 2 (kind 'block') column 'option' is 'fulll'; expected a recompute option, ...
    >>> LayerTable(pd.DataFrame(rows).replace({"option": {"full": "mlp"}}), custom_options=("mlp",)).options("block")
    ('none', 'mlp')
    """

    frame: pd.DataFrame
    const_mb: float = 0.0
    device: str | None = None
    time_unit: str | None = None
    custom_options: tuple[str, ...] | None = None
    breakdown: pd.DataFrame | None = field(default=None, repr=False)
    _kinds: dict = field(init=False, repr=False, compare=False)
    _records: dict = field(init=False, repr=False, compare=False)
    _roles: dict = field(init=False, repr=False, compare=False)
    _fixed: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self._check(validated_rows)

    @classmethod
    def _built(cls, frame: pd.DataFrame, **fields) -> LayerTable:
        """The table of a frame sappkit built (:func:`sappkit.estimate_layers`'), its rows checked by
        :func:`~sappkit.layers.table_rows.built_rows`: the same table as the constructor's, at less cost."""
        table = object.__new__(cls)
        given = {f.name: f.default for f in dataclass_fields(cls) if f.init} | fields | {"frame": frame}
        for name, value in given.items():
            object.__setattr__(table, name, value)
        table._check(built_rows)
        return table

    def _check(self, rows) -> None:
        """Check the fields, the frame's rows with ``rows`` (a function of the frame and the custom options)."""
        unit = time_unit_of(self.frame) if self.time_unit is None else check_time_unit(self.time_unit)
        custom = check_custom_options(self.frame.attrs.get(CUSTOM_OPTIONS, ()) if self.custom_options is None
                                      and isinstance(self.frame, pd.DataFrame) else self.custom_options)
        frame = with_time_unit(rows(self.frame, custom), unit)
        frame.attrs[CUSTOM_OPTIONS] = custom
        self._index(frame)
        object.__setattr__(self, "time_unit", unit)
        object.__setattr__(self, "custom_options", custom)
        object.__setattr__(self, "const_mb", check_number("const_mb", self.const_mb, minimum=0, maximum=MAX_MEMORY_MB))
        if self.device is not None and not (isinstance(self.device, str) and self.device):
            raise InputError(f"device must be a non-empty string or None; got {self.device!r}")

    def _index(self, frame: pd.DataFrame) -> None:
        """Hold ``frame`` (validated) with its per-kind first rows and per-option records, as plain dicts, so
        that the lookups below cost no pandas indexing (a table is built per shape of a search)."""
        object.__setattr__(self, "frame", frame)
        columns = list(frame.columns)
        kinds: dict[str, dict] = {}
        records: dict[str, dict[str, dict]] = {}
        for values in frame.to_numpy(dtype=object).tolist():  # Python scalars, as to_dict("records") gives
            record = dict(zip(columns, values))
            kinds.setdefault(record[KIND], record)
            records.setdefault(record[KIND], {})[record[OPTION]] = record
        object.__setattr__(self, "_kinds", kinds)
        object.__setattr__(self, "_records", records)
        roles: dict[str, list[str]] = {role: [] for role in ROLES}
        for kind, first in kinds.items():
            roles[first[ROLE]].append(kind)
        object.__setattr__(self, "_roles", {role: tuple(names) for role, names in roles.items()})
        object.__setattr__(self, "_fixed", {})

    def _role_kinds(self, role: str) -> tuple[str, ...]:
        return self._roles[role]

    @property
    def body_kinds(self) -> tuple[str, ...]:
        """Body kinds in model order."""
        return self._role_kinds(BODY)

    @property
    def head(self) -> pd.Series | None:
        """The head's row (embedding), or None when the table has none."""
        return self._single_row(HEAD)

    @property
    def tail(self) -> pd.Series | None:
        """The tail's row (final norm, LM head, loss), or None when the table has none."""
        return self._single_row(TAIL)

    def _single_row(self, role: str) -> pd.Series | None:
        if role not in self._fixed:  # looked up once: the models ask for the head and tail often
            rows = self.frame[self.frame[ROLE] == role]
            self._fixed[role] = None if rows.empty else rows.iloc[0]
        row = self._fixed[role]
        return None if row is None else row.copy()

    @property
    def modules(self) -> tuple[str, ...]:
        """Modules of the body kinds in model order; more than one makes the model multimodal."""
        return tuple(dict.fromkeys(self._kinds[kind][MODULE] for kind in self.body_kinds))

    @property
    def multimodal(self) -> bool:
        """True when the body kinds belong to more than one module (a vision tower and a language model)."""
        return len(self.modules) > 1

    @property
    def body_layers(self) -> int:
        """Body layers in the model, all kinds together."""
        return int(sum(self._kinds[kind][COUNT] for kind in self.body_kinds))

    def count(self, kind: str) -> int:
        """Layers of ``kind`` in the model."""
        return int(self._kinds[self._known(kind)][COUNT])

    def param_mb(self, kind: str) -> float:
        """Parameter memory one layer of ``kind`` holds whatever it runs."""
        return float(self._kinds[self._known(kind)][PARAM_MB])

    def module(self, kind: str) -> str:
        """The module ``kind`` belongs to."""
        return str(self._kinds[self._known(kind)][MODULE])

    def rows(self, kind: str) -> pd.DataFrame:
        """The option rows of ``kind``, indexed by option, in table order."""
        return self.frame[self.frame[KIND] == self._known(kind)].set_index(OPTION)

    def options(self, kind: str) -> tuple[str, ...]:
        """Options of ``kind`` in table order."""
        return tuple(self._records[self._known(kind)])

    def front(self, kind: str) -> tuple[str, ...]:
        """Options of ``kind`` not dominated in (activation memory, forward + backward time).

        An option is dominated when another keeps no more activation memory,
        takes no more time and is strictly better in one; of identical options
        the first is kept. Returned fastest first.
        """
        rows = self.rows(kind)
        memory = rows[ACTIVATION_MB].to_numpy()
        time = (rows[FORWARD_TIME] + rows[BACKWARD_TIME]).to_numpy()
        keep = []
        for i in range(len(rows)):
            no_worse = (memory <= memory[i]) & (time <= time[i])
            better = no_worse & ((memory < memory[i]) | (time < time[i]))
            earlier_twin = no_worse & (memory == memory[i]) & (time == time[i]) & (np.arange(len(rows)) < i)
            if not better.any() and not earlier_twin.any():
                keep.append(i)
        keep.sort(key=lambda i: (time[i], memory[i]))
        return tuple(rows.index[keep])

    def plain(self, kind: str) -> str:
        """The option of ``kind`` that recomputes nothing: ``none``, else the one keeping the most activation.

        Without a ``none`` row, the option keeping the most ``activation_mb``
        is the one that recomputes least; of equal ones the fastest (forward +
        backward: less recompute), then the first in table order. This is what
        a fully recomputed layer runs again in its backward (SAPP's recompute
        chooser's ``_plain``, which takes the option recomputing nothing).

        Examples
        --------
        >>> rows = [dict(kind="block", role="body", count=8, param_mb=900, option=o, forward_time=4,
        ...              backward_time=b, activation_mb=a)
        ...         for o, b, a in (("comm", 9, 300), ("quick", 8, 300), ("full", 12, 20))]
        >>> LayerTable(pd.DataFrame(rows), custom_options=("quick",)).plain("block")
        'quick'
        """
        rows = self._option_records(kind)
        if "none" in rows:
            return "none"
        # max() keeps the first of equal keys, so table order breaks the last tie.
        return max(rows, key=lambda o: (rows[o][ACTIVATION_MB], -(rows[o][FORWARD_TIME] + rows[o][BACKWARD_TIME])))

    def working_set_mb(self, kind: str, option: str, *, first: bool = False) -> float:
        """What a layer of ``kind`` running ``option`` holds beyond what it keeps, when it ends warm-up.

        The layer that ends a stage's warm-up (the last body layer of the
        stage's last chunk; the tail when that cell ends with it) runs its
        backward right after its forward on the last warm-up micro-batch, so
        besides its activations at the micro-batches in flight it holds, once:
        what it keeps at one micro-batch, ``activation_mb + memory_once_mb``
        of the option it runs — the :meth:`plain` option's when ``option`` is
        ``full``, since its backward rebuilds the plain layer — plus its
        ``working_mb`` (SAPP's recompute chooser's ``_working``, its memory estimator's 1F1B
        working set).
        With ``first`` the same with ``first_working_mb``: the stage's first
        layer, whose backward is the stage's last (the second FSDP peak).
        The balancer (``working_set=True``) and the recompute chooser both
        charge this number.

        Examples
        --------
        >>> rows = [dict(kind="block", role="body", count=8, param_mb=900, option=o, forward_time=4,
        ...              backward_time=b, activation_mb=a, memory_once_mb=5, working_mb=w)
        ...         for o, b, a, w in (("none", 8, 300, 40), ("selective", 9, 120, 30), ("full", 12, 20, 10))]
        >>> table = LayerTable(pd.DataFrame(rows))
        >>> [table.working_set_mb("block", o) for o in ("none", "selective", "full")]
        [345.0, 155.0, 315.0]
        """
        rows = self._option_records(kind)
        if option not in rows:
            raise InputError(f"kind {kind!r} has no option {option!r}; its options are "
                             f"{', '.join(map(repr, rows))}")
        run = rows[self.plain(kind) if option == "full" else option]
        extra = rows[option][FIRST_WORKING_MB if first else WORKING_MB]
        return float(run[ACTIVATION_MB] + run[MEMORY_ONCE_MB] + extra)

    def _option_records(self, kind: str) -> dict[str, dict]:
        return self._records[self._known(kind)]

    def with_frame(self, frame: pd.DataFrame) -> LayerTable:
        """A new table with ``frame`` and this table's constant, device, time unit and custom options."""
        return LayerTable(frame, const_mb=self.const_mb, device=self.device, time_unit=self.time_unit,
                          custom_options=self.custom_options)

    def with_columns(self, *, breakdown: pd.DataFrame | None = None, **columns) -> LayerTable:
        """A copy with numeric ``columns`` replaced (one value per row, in the frame's order) and, if given, another
        ``breakdown``; the new values are checked as the constructor checks them (an array of numbers in numpy:
        :func:`~sappkit.layers.table_rows.replaced_numbers`), the rest is kept as checked.

        Examples
        --------
        >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1,
        ...              backward_time=2, activation_mb=a) for o, a in (("none", 50), ("full", 5))]
        >>> LayerTable(pd.DataFrame(rows)).with_columns(param_mb=[60.0, 60.0]).param_mb("b")
        60.0
        """
        frame = self.frame.copy()
        for column, values in columns.items():
            if column not in LAYER_NUMERIC or column == COUNT:
                raise InputError(f"with_columns replaces the numeric columns {', '.join(LAYER_NUMERIC[1:])}; "
                                 f"got {column!r}")
            frame[column] = replaced_numbers(frame, column, values)
        if PARAM_MB in columns:  # the only per-kind column replaced: the kinds, roles and counts are as checked
            check_kind_column(frame, PARAM_MB)
        table = object.__new__(LayerTable)
        for name in ("const_mb", "device", "time_unit", "custom_options"):
            object.__setattr__(table, name, getattr(self, name))
        object.__setattr__(table, "breakdown", self.breakdown if breakdown is None else breakdown)
        table._index(frame)
        return table

    def _known(self, kind: str) -> str:
        if kind not in self._kinds:
            raise InputError(f"kind {kind!r} is not in the layer table; its kinds are "
                             f"{', '.join(map(repr, self._kinds))}")
        return kind


def as_layer_table(layers, *, name: str = "layers") -> LayerTable:
    """Accept a :class:`LayerTable` or a DataFrame with the layer columns; return a validated table.

    A DataFrame's times are in its ``attrs["time_unit"]``, else in ``"time units"``
    (see :class:`LayerTable`).
    """
    if isinstance(layers, LayerTable):
        return layers
    if isinstance(layers, pd.DataFrame):
        return LayerTable(layers)
    raise InputError(f"{name} must be a LayerTable or a DataFrame with columns "
                     f"{', '.join(LAYER_REQUIRED)}; got {type(layers).__name__}")
