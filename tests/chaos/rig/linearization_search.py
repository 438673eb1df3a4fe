"""The depth-first search behind ``check_key`` (linearizability.py), on one key's
operations once they passed its precheck and its unobserved ``unknown`` writes were
dropped. The algorithm and its prunings are described in linearizability.py.

The operations become small integers (kind, value written or seen, value expected)
and Lowe's event list a doubly linked list of call and return nodes, from which a
placed operation is lifted and to which it is put back when backtracking. A search
step places an operation, skips a candidate or backtracks; past ``max_steps`` the
verdict is ``too_hard``, never a pass. The memo holds 128-bit Zobrist hashes of the
configurations. When no linearization exists, the deepest point reached explains
the failure (``_Stuck``): the operations placed last, the one that returned before
it could be placed, and those concurrent with it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from tests.chaos.rig.history import Op, describe_all

Verdict = Literal["linearizable", "nonlinearizable", "too_hard"]

#: How many placed operations before the stuck point a failure excerpt shows.
EXCERPT_PREFIX = 6
#: At most this many operations concurrent with the stuck one are shown.
EXCERPT_CONCURRENT = 12

_READ, _WRITE, _CAS = 0, 1, 2
_KIND_CODE = {"read": _READ, "write": _WRITE, "cas": _CAS}


@dataclass
class SearchOutcome:
    """What the search found: its verdict, the steps spent and, on a
    ``nonlinearizable`` or ``too_hard`` verdict, an explanation and the
    ``Op.describe()`` lines of the operations around the stuck point."""

    verdict: Verdict
    steps: int
    message: str = ""
    excerpt: list[str] = field(default_factory=list)


@dataclass
class _Stuck:
    """The deepest point the search reached before getting stuck."""

    depth: int
    placed_tail: list[int]
    value: int
    blocked: int
    concurrent: list[int]


def find_linearization(
    kept: list[Op], initial: str | None, observed: set[str | None], max_steps: int
) -> SearchOutcome:
    """Search a linearization of ``kept``, the operations ``check_key`` keeps, given
    the register's ``initial`` value and the values some kept operation observes (a
    read's result, a cas's expected value)."""
    ops = sorted(kept, key=lambda o: (o.invoke, o.index))
    count = len(ops)

    # Register values as small integers: 0 is the initial value, 1 stands
    # for every value nothing observes.
    unobserved = 1
    ids: dict[str | None, int] = {initial: 0}
    labels: list[str] = [repr(initial), "a value no read or cas observes"]

    def value_id(value: str | None) -> int:
        if value != initial and value not in observed:
            return unobserved
        if value not in ids:
            ids[value] = len(labels)
            labels.append(repr(value))
        return ids[value]

    kind = [_KIND_CODE[op.kind] for op in ops]
    # read: the value seen; write/cas: the value written.
    val = [value_id(op.result if op.kind == "read" else op.value) for op in ops]
    # cas: the value expected (-1 for others).
    exp = [value_id(op.expected) if op.kind == "cas" else -1 for op in ops]
    required = [op.outcome == "ok" for op in ops]
    absorbable = [required[i] and kind[i] == _WRITE and val[i] == unobserved for i in range(count)]
    # The memo holds Zobrist hashes of (placed set, value, flag): 128 random
    # bits per operation and per value, XORed, so a configuration costs one
    # small integer whatever the history's length (a false match, which could
    # only turn a pass into a failure, has odds far below 2**-64).
    rng = random.Random(0x5EED)
    op_key = [rng.getrandbits(128) for _ in range(count)]
    value_key = [rng.getrandbits(128) for _ in range(len(labels))]
    flag_key = rng.getrandbits(128)

    # Lowe's event list: calls, and returns of the required operations (an
    # ``unknown`` one never has to be placed). At equal times calls come
    # first, so touching intervals count as concurrent.
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.invoke, 0, i))
        if required[i]:
            end = math.inf if op.complete is None else max(op.complete, op.invoke)
            events.append((end, 1, i))
    events.sort()
    size = len(events) + 1
    nxt = [-1] * size
    prv = [-1] * size
    node_op = [-1] * size
    is_call = [False] * size
    call_node = [-1] * count
    ret_node = [-1] * count
    for position, (_, typ, i) in enumerate(events, start=1):
        node_op[position] = i
        is_call[position] = typ == 0
        prv[position] = position - 1
        nxt[position - 1] = position
        if typ == 0:
            call_node[i] = position
        else:
            ret_node[i] = position
    ret_of = [-1] * size
    for i in range(count):
        ret_of[call_node[i]] = ret_node[i]
    no_absorbed: tuple[int, ...] = ()

    # A frame: the call node placed, the value and flag before it, whether it
    # was a forced read (no alternative to explore when backtracking), and
    # the call nodes of the writes absorbed before it.
    stack: list[tuple[int, int, bool, bool, tuple[int, ...]]] = []
    cache: set[int] = set()
    placed = 0  # Zobrist hash of the placed operations
    value = 0  # the register's value
    # Set after placing an ``unknown`` write/cas: the next operation placed
    # must observe its value.
    must_observe = False
    # Required operations left to place, absorbable writes aside.
    remaining = sum(1 for i in range(count) if required[i] and not absorbable[i])
    steps = 0
    stuck: _Stuck | None = None
    fresh = True  # at a configuration not yet swept for a forced read
    entry = nxt[0]

    while remaining:
        steps += 1
        if steps > max_steps:
            return SearchOutcome(
                "too_hard",
                steps - 1,
                f"search gave up after {max_steps} steps ({count} operations,"
                f" at most {stuck.depth if stuck else 0} placed in a row);"
                " neither proved nor refuted",
                _stuck_excerpt(ops, stuck) if stuck else [],
            )
        blocked = False
        if fresh:
            # Place a read that can be placed now, with no alternative.
            fresh = False
            node = nxt[0]
            while node != -1 and is_call[node]:
                i = node_op[node]
                if kind[i] == _READ and val[i] == value:
                    break
                node = nxt[node]
            else:
                node = -1
            if node != -1:
                i = node_op[node]
                config = placed ^ op_key[i] ^ value_key[value]
                if config in cache:
                    blocked = True
                else:
                    cache.add(config)
                    stack.append((node, value, must_observe, True, no_absorbed))
                    placed ^= op_key[i]
                    must_observe = False
                    # Lift the read's call and return out of the event list.
                    after = nxt[node]
                    nxt[prv[node]] = after
                    prv[after] = prv[node]
                    n = ret_of[node]
                    after = nxt[n]
                    nxt[prv[n]] = after
                    if after != -1:
                        prv[after] = prv[n]
                    remaining -= 1
                    fresh = True
                    continue
            else:
                entry = nxt[0]
        if not blocked:
            if is_call[entry]:
                i = node_op[entry]
                k = kind[i]
                if (
                    k != _READ
                    and not absorbable[i]
                    and ((k == _WRITE and not must_observe) or exp[i] == value)
                ):
                    new_flag = not required[i]
                    new_placed = placed ^ op_key[i]
                    absorbed = no_absorbed
                    if k == _WRITE:
                        absorbed = tuple(_minimal_absorbable(nxt, is_call, node_op, absorbable))
                        for node in absorbed:
                            new_placed ^= op_key[node_op[node]]
                    config = new_placed ^ value_key[val[i]]
                    if new_flag:
                        config ^= flag_key
                    if config not in cache:
                        cache.add(config)
                        stack.append((entry, value, must_observe, False, absorbed))
                        placed = new_placed
                        value = val[i]
                        must_observe = new_flag
                        for node in (*absorbed, entry):
                            after = nxt[node]
                            nxt[prv[node]] = after
                            if after != -1:
                                prv[after] = prv[node]
                            n = ret_of[node]
                            if n != -1:
                                after = nxt[n]
                                nxt[prv[n]] = after
                                if after != -1:
                                    prv[after] = prv[n]
                        if required[i]:
                            remaining -= 1
                        fresh = True
                        continue
                entry = nxt[entry]
                continue
            i = node_op[entry]
            if absorbable[i] and not must_observe:
                # An absorbable write that no write can follow any more in
                # time to absorb it: place it now (and the other minimal
                # ones), leaving an unobserved value; nothing else is left to
                # try here.
                absorbed = tuple(_minimal_absorbable(nxt, is_call, node_op, absorbable))
                new_placed = placed
                for node in absorbed:
                    new_placed ^= op_key[node_op[node]]
                config = new_placed ^ value_key[unobserved]
                if config not in cache:
                    cache.add(config)
                    stack.append((absorbed[0], value, must_observe, True, absorbed[1:]))
                    placed = new_placed
                    value = unobserved
                    for node in (*absorbed[1:], absorbed[0]):
                        _lift(nxt, prv, ret_of, node)
                    fresh = True
                    continue
            # A required operation returned before it could be placed.
            if stuck is None or len(stack) > stuck.depth:
                stuck = _stuck_at(stack, node_op, nxt, is_call, value, entry)
        # Backtrack to the last choice that has an alternative.
        while True:
            if not stack:
                return SearchOutcome(
                    "nonlinearizable",
                    steps,
                    _stuck_message(ops, labels, stuck),
                    _stuck_excerpt(ops, stuck) if stuck else [],
                )
            node, value, must_observe, was_forced, absorbed = stack.pop()
            i = node_op[node]
            if required[i] and not absorbable[i]:
                remaining += 1
            # Put back each return, then its call, in the reverse order of
            # lifting.
            for m in (node, *reversed(absorbed)):
                placed ^= op_key[node_op[m]]
                n = ret_of[m]
                if n != -1:
                    nxt[prv[n]] = n
                    after = nxt[n]
                    if after != -1:
                        prv[after] = n
                nxt[prv[m]] = m
                after = nxt[m]
                if after != -1:
                    prv[after] = m
            if not was_forced:
                entry = nxt[node]
                break
    return SearchOutcome("linearizable", steps)


def _lift(nxt: list[int], prv: list[int], ret_of: list[int], node: int) -> None:
    """Unlink an operation's call node, and its return node if any."""
    for n in (node, ret_of[node]):
        if n != -1:
            after = nxt[n]
            nxt[prv[n]] = after
            if after != -1:
                prv[after] = prv[n]


def _minimal_absorbable(
    nxt: list[int], is_call: list[bool], node_op: list[int], absorbable: list[bool]
) -> list[int]:
    """The call nodes of the absorbable writes not placed yet and minimal
    (invoked before the first pending return)."""
    found: list[int] = []
    node = nxt[0]
    while node != -1 and is_call[node]:
        if absorbable[node_op[node]]:
            found.append(node)
        node = nxt[node]
    return found


def _stuck_at(
    stack: list[tuple[int, int, bool, bool, tuple[int, ...]]],
    node_op: list[int],
    nxt: list[int],
    is_call: list[bool],
    value: int,
    blocked_node: int,
) -> _Stuck:
    concurrent: list[int] = []
    node = nxt[0]
    while node != -1 and node != blocked_node:
        if is_call[node]:
            concurrent.append(node_op[node])
        node = nxt[node]
    return _Stuck(
        depth=len(stack),
        placed_tail=[node_op[frame[0]] for frame in stack[-EXCERPT_PREFIX:]],
        value=value,
        blocked=node_op[blocked_node],
        concurrent=concurrent,
    )


def _stuck_message(ops: list[Op], labels: list[str], stuck: _Stuck | None) -> str:
    if stuck is None:
        return "no linearization exists"
    blocked = ops[stuck.blocked]
    if blocked.kind == "read":
        what = f"a read of {blocked.result!r}"
    elif blocked.kind == "cas":
        what = f"a cas expecting {blocked.expected!r}"
    else:
        what = f"a write of {blocked.value!r}"
    others = len([i for i in stuck.concurrent if i != stuck.blocked])
    return (
        f"no linearization: the longest linearizable prefix places {stuck.depth} of"
        f" {len(ops)} operations and leaves the register at {labels[stuck.value]};"
        f" then #{blocked.index}, {what}, cannot be placed before it returns, whichever"
        f" of the {others} operation(s) concurrent with it go first"
    )


def _stuck_excerpt(ops: list[Op], stuck: _Stuck) -> list[str]:
    chosen = [
        *stuck.placed_tail,
        stuck.blocked,
        *[i for i in stuck.concurrent if i != stuck.blocked][:EXCERPT_CONCURRENT],
    ]
    return describe_all(ops[i] for i in chosen)
