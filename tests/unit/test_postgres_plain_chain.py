"""``plain.learn`` of a linked append grows the parent's chain without walking it again (issue 24):
it must be exactly the chain the walk (``plain.chain``) gives. No server."""

from __future__ import annotations

import random

from session_manager.store.postgres import plain


def _walked(links: dict[str, plain.Link], params: dict[str, object]) -> dict[str, plain.Link]:
    new = dict(links)
    new[str(params["id"])] = (params["depth"], params["jump"], params["jump_depth"])  # type: ignore[assignment]
    return plain.chain(new, str(params["id"]))


def test_a_linked_append_learns_the_walked_chain_in_its_order_at_every_depth() -> None:
    # Prevents: the grown chain differing from the walk's (a jump target skipped or kept, the
    # order changed): the next appends' links would then be wrong, and their depth and jump
    # pointers differ from what sm_append_at stores.
    links: dict[str, plain.Link] = {}
    parent: str | None = None
    for n in range(600):
        entry = f"e{n}"
        link = plain.next_link(links, parent, entry)
        assert link is not None
        params = {"id": entry, "parent": parent, "depth": link[0], "jump": link[1], "jump_depth": link[2]}
        expect = _walked(links, params)
        got = plain.learn(links, params, ())
        assert got == expect and list(got) == list(expect)
        links, parent = got, entry


def test_a_chain_that_is_not_the_parents_or_is_cut_short_is_walked() -> None:
    # Prevents: growing from a chain (Known.links is always one: plain.chain's or this) that does
    # not start at the parent, or lacks the jump target the new entry's jump skips to.
    rng = random.Random(7)
    for _ in range(500):
        every = {f"k{i}": (i, f"k{rng.randrange(0, i + 1)}", rng.randrange(0, i + 1)) for i in range(8)}
        for dropped in rng.sample(sorted(every), rng.randrange(0, 3)):
            del every[dropped]
        links = plain.chain(every, rng.choice([*every, "nope"]))
        if not links:
            continue
        parent = rng.choice([*links, next(iter(links)), next(iter(links)), "nope"])
        jump = rng.choice([parent, *links])
        params = {"id": "new", "parent": parent, "depth": 9, "jump": jump, "jump_depth": 3}
        expect = _walked(links, params)
        got = plain.learn(links, params, ())
        assert got == expect and list(got) == list(expect)
