"""Pages this service built, kept with the version of the session they were built
from, so a read that finds the session at that version again answers the page
kept instead of building it anew (``messages-tail``).

Only a store that names versions (:meth:`~session_manager.store.base.SessionStore.
meta_and_leaf_since`: postgres by the session row's ``xmin``, sqlite by its ``rev``)
makes pages worth keeping: it checks the version in the read the call makes anyway
(one statement, and no path read when it holds), so every call still sees every
write, this instance's or another's. A page is kept as its exact JSON line: each
caller gets containers of its own, and the bytes bound the memory kept. A page orjson
cannot write exactly (an integer past 64 bits, a lone surrogate) is not kept; what it
writes it reads back equal (the store's values hold no NaN or infinity).

A kept page is answered by decoding its line (one C call); from its ``PLAN_AFTER``-th
answer on (a page read often: a caller polling an idle session), that answer's values
(strings, numbers, ``True``/``False``/``None``: immutable, so shared safely) are then
kept with the page's *shape*: each message item, and each other value of the
page's top level, becomes a function compiled from its structure alone (a nested dict
and list display with the values as ``t[0]``, ``t[1]``...: ``BUILD_CONST_KEY_MAP`` and
``BUILD_LIST`` in one frame, no parsing, no new strings; a dict of values alone is a
private template in the tuple, cloned by ``dict.copy``) and the tuple of its values.
Later answers call them: ~120,000 fewer client instructions than the decoding for a
page of 50 short messages (callgrind, 2026-12-07). The functions are cached by
structure (a chat's items take few shapes: the next page's, after an append, reuse
them); an item too deep or too wide, a page of more than ``MAX_NEW_SHAPES`` new structures, or a
new structure once the cache is full, leaves its page answered by decoding, as before.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import orjson

__all__ = ["PageMemo"]

MAX_PAGES = 256  # sessions x requests kept (the least recently used goes first)
MAX_BYTES = 8 * 1024 * 1024  # their JSON and shapes' values, all together
MAX_PAGE_BYTES = 512 * 1024  # a larger page is built each time (a rare, heavy page is no hot path)

# A page is answered by decoding until its PLAN_AFTER-th answer, whose values are then kept
# with its shape: planning costs about as many instructions as 10-17 answers save (a page
# of 50 short messages, callgrind), so a page read a few times never pays for it, and one
# read often pays it once (the rent-or-buy rule: at most about twice the better choice's cost).
PLAN_AFTER = 8
MAX_SHAPES = 512
# New structures one page's planning may compile (~50-100 µs each, what ~100 answers save per
# item): a page whose items mostly differ in structure (varied tool calls) stays decoded.
MAX_NEW_SHAPES = 8  # structures compiled (process-wide; a full cache compiles no more)
MAX_SHAPE_DEPTH = 16  # containers within containers in one item
MAX_SHAPE_VALUES = 256  # values (and so ``t[i]``) in one item
# A structure's source holds its keys, which are callers' text: bounded by the bytes it takes
# (sys.getsizeof: a character past U+FFFF takes 4, review 19), so the process-wide cache
# (MAX_SHAPES of them, kept for the process's life) holds at most ~5.5 MiB, sources and their
# code (the keys again as its constants) together (tracemalloc, 512 sources of ~4 KB).
MAX_SHAPE_SOURCE = 4096  # bytes, as the source is held

Shape = Callable[[tuple[Any, ...]], Any]
_SHAPES: dict[str, Shape] = {}
_SHAPES_LOCK = threading.Lock()  # (inserts only: a lookup is one dict read)
_NOT_A_SHAPE = object()  # (an item past the bounds: its page is not planned)

# A page's plan: its top level as a dict of values (containers replaced at each answer),
# and, per container value, its key and either (shape, values) or, for a list, a list of
# (shape, values) per element (an element that is no container: (None, element)).
Plan = tuple[dict[str, Any], tuple[tuple[str, Any], ...]]


class PageMemo:
    """Pages by request key, each with the session version it was built from."""

    def __init__(self, max_pages: int = MAX_PAGES, max_bytes: int = MAX_BYTES) -> None:
        # key -> (version, JSON line, [plan: None untried, False none, or the plan; its bytes; key;
        # the answers decoded])
        self._pages: OrderedDict[Hashable, tuple[Hashable, bytes, list[Any]]] = OrderedDict()
        self._bytes = 0
        self._max_pages = max_pages
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[Hashable, bytes, list[Any]] | None:
        """The version and page kept for ``key`` (hold on to both: the page may be
        replaced or dropped before the read that checks the version answers)."""
        with self._lock:
            found = self._pages.get(key)
            if found is not None:
                self._pages.move_to_end(key)
            return found

    def page(self, kept: tuple[Hashable, bytes, list[Any]]) -> Any:
        """A fresh copy of a kept page (containers no other caller holds)."""
        state = kept[2]
        plan = state[0]
        if plan:
            return _answer(plan)
        page = orjson.loads(kept[1])
        if plan is None:
            state[3] += 1
            if state[3] >= PLAN_AFTER:  # (this answer's values kept with the page's shape)
                planned = _plan(page, len(kept[1]))
                with self._lock:  # (its bytes counted while the page is still kept)
                    if state[0] is None:
                        state[0] = planned[0] if planned is not None else False
                        if planned is not None and self._pages.get(state[2]) is kept:
                            state[1] = planned[1]
                            self._bytes += planned[1]
                            self._trim()
        return page

    def keep(self, key: Hashable, version: Hashable, page: Any) -> None:
        """Keep ``page``, built from the session at ``version``, for ``key``. Call it
        before handing ``page`` out: what is kept is its JSON as built."""
        try:
            line = orjson.dumps(page)
        except TypeError:  # (orjson.JSONEncodeError is one)
            return  # not for orjson: built each time
        if len(line) > MAX_PAGE_BYTES:
            return
        with self._lock:
            old = self._pages.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1]) + old[2][1]
            self._pages[key] = (version, line, [None, 0, key, 0])
            self._bytes += len(line)
            self._trim()

    def _trim(self) -> None:
        while self._pages and (len(self._pages) > self._max_pages or self._bytes > self._max_bytes):
            _, (_, dropped, state) = self._pages.popitem(last=False)
            self._bytes -= len(dropped) + state[1]


def _answer(plan: Plan) -> Any:
    top, parts = plan
    out = top.copy()
    for name, part in parts:
        if type(part) is list:
            out[name] = [shape(values) if shape is not None else values for shape, values in part]
        else:
            out[name] = part[0](part[1])
    return out


def _plan(page: Any, line: int) -> tuple[Plan, int] | None:
    """``page``'s plan and a bound of the bytes its values hold (``line``: the length of the
    page's JSON), or None (not a dict, an item past the bounds, a structure not compiled)."""
    if type(page) is not dict:
        return None
    count = 0
    budget = [MAX_NEW_SHAPES]
    parts: list[tuple[str, Any]] = []
    for name, value in page.items():
        kind = type(value)
        if kind is list:
            elements: list[tuple[Shape | None, Any]] = []
            for element in value:
                if type(element) is dict or type(element) is list:
                    planned = _planned(element, budget)
                    if planned is None:
                        return None
                    elements.append(planned)
                    count += _weight(planned[1])
                else:
                    elements.append((None, element))
            parts.append((name, elements))
            count += _PER_VALUE * len(elements)
        elif kind is dict:
            planned = _planned(value, budget)
            if planned is None:
                return None
            parts.append((name, planned))
            count += _weight(planned[1])
    top = page.copy()
    for name, _ in parts:
        top[name] = None  # (replaced in every answer: the first answer's containers not held)
    # The values' text is within the JSON's (a character in at most 4 bytes either way); each
    # value's object header, tuple slot and share of a template's table within _PER_VALUE, each
    # template's value and slot within _PER_KEY (count: _weight's, in bytes).
    return (top, tuple(parts)), 4 * line + count + sys.getsizeof(top)


def _weight(values: tuple[Any, ...]) -> int:
    """A bound of the bytes a shape's tuple of values holds beyond their text: ``_PER_VALUE`` a
    value, and a template (a dict of values alone, one value of the tuple) ``_PER_KEY`` more per
    key, its value's object and table slot (review 19: counted as one value, a template of 62
    floats held ~1.7x the bytes counted, past ``MAX_BYTES``)."""
    return _PER_VALUE * len(values) + _PER_KEY * sum([len(v) for v in values if type(v) is dict])


def _planned(value: Any, budget: list[int]) -> tuple[Shape, tuple[Any, ...]] | None:
    values: list[Any] = []
    try:
        source = _source(value, values, 0)
    except _PastBounds:
        return None
    shape = _SHAPES.get(source)
    if shape is None:
        if len(_SHAPES) >= MAX_SHAPES or budget[0] <= 0 or sys.getsizeof(source) > MAX_SHAPE_SOURCE:
            return None
        budget[0] -= 1
        # Only structure is compiled: keys as their repr (a str literal), values as t[i].
        made = eval(compile("lambda t: " + source, "<page shape>", "eval"), {"__builtins__": {}})
        with _SHAPES_LOCK:  # (the bound checked again where it is kept: threads compile at once)
            shape = _SHAPES.get(source)
            if shape is None:
                if len(_SHAPES) >= MAX_SHAPES:
                    return None
                shape = _SHAPES[source] = made
    return shape, tuple(values)


class _PastBounds(Exception):
    pass


def _source(value: Any, values: list[Any], depth: int) -> str:
    """The display building ``value`` from ``t`` (its values appended to ``values``)."""
    if depth >= MAX_SHAPE_DEPTH:
        raise _PastBounds
    parts = []
    if type(value) is dict:
        if len(value) > 1 and _CONTAINERS.isdisjoint(map(type, value.values())):
            # Values alone: a private copy kept as the template, copied at each answer (one C
            # clone of its table, cheaper than inserting each key).
            values.append(value.copy())
            return _COPY[len(values) - 1] if len(values) <= MAX_SHAPE_VALUES else _past()
        for k, v in value.items():
            t = type(v)
            if t is dict or t is list:
                parts.append(f"{k!r}:{_source(v, values, depth + 1)}")
            else:
                values.append(v)
                parts.append(f"{k!r}:{_LEAF[len(values) - 1] if len(values) <= MAX_SHAPE_VALUES else _past()}")
        return "{" + ",".join(parts) + "}"
    for v in value:
        t = type(v)
        if t is dict or t is list:
            parts.append(_source(v, values, depth + 1))
        else:
            values.append(v)
            parts.append(_LEAF[len(values) - 1] if len(values) <= MAX_SHAPE_VALUES else _past())
    return "[" + ",".join(parts) + "]"


def _past() -> str:
    raise _PastBounds


_CONTAINERS = frozenset((dict, list))
_PER_VALUE = 200  # bytes: a str's header (~80), its slot (8), a 2-key template's table per value (~92)
_PER_KEY = 100  # bytes, a template's value (a str's header ~80, a float 24) and its slot (~40 as copied)
_LEAF = tuple(f"t[{i}]" for i in range(MAX_SHAPE_VALUES))
_COPY = tuple(f"t[{i}].copy()" for i in range(MAX_SHAPE_VALUES))
