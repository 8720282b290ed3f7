"""The stored record of what the model saw: bounded whatever the chat's length, exact both ways, and a damaged
record reported as such."""

import pytest

from lib.storage import seen

ID = "01JABCDEFGHJKMNPQRSTVWXYZ0"  # 26 characters, as a ULID


def turn(i: int, tokens: int = 30) -> dict:
    return {"kind": "turn", "tokens": tokens, "id": f"01J{i:023d}"}


class TestCompact:
    def test_the_newest_turns_are_one_run_with_their_total(self):
        parts = [{"kind": "system", "tokens": 40}, *(turn(i) for i in range(300)), {"kind": "question", "tokens": 5}]
        out = seen.compact(parts)
        assert out == [
            {"kind": "system", "tokens": 40},
            {"kind": "turns", "tokens": 9000, "count": 300, "first": f"01J{0:023d}", "last": f"01J{299:023d}"},
            {"kind": "question", "tokens": 5},
        ]

    def test_a_run_with_a_message_sent_as_its_beginning_says_so_and_reads_back(self):
        parts = [turn(0), {**turn(1), "excerpt": True}, turn(2)]
        out = seen.compact(parts)
        assert out == [
            {
                "kind": "turns",
                "tokens": 90,
                "count": 3,
                "first": f"01J{0:023d}",
                "last": f"01J{2:023d}",
                "excerpt": True,
            }
        ]
        assert seen.decode(seen.encode(out)) == tuple(out)
        assert "excerpt" not in seen.compact([turn(0), turn(1)])[0]

    def test_memories_past_the_listed_bound_are_counted_in_one_part(self):
        parts = [{"kind": "memory", "tokens": i + 1, "id": f"M{i}"} for i in range(seen.MAX_LISTED + 5)]
        out = seen.compact(parts)
        assert [p.get("id") for p in out[: seen.MAX_LISTED]] == [f"M{i}" for i in range(seen.MAX_LISTED)]
        assert out[seen.MAX_LISTED :] == [
            {"kind": "memory", "tokens": sum(range(seen.MAX_LISTED + 1, seen.MAX_LISTED + 6)), "count": 5}
        ]

    def test_compacting_twice_changes_nothing(self):
        parts = [
            *({"kind": "memory", "tokens": 3, "id": f"M{i}"} for i in range(20)),
            *(turn(i) for i in range(4)),
        ]
        once = seen.compact(parts)
        assert seen.compact(once) == once


class TestEncoding:
    def test_a_record_reads_back_exactly(self):
        parts = seen.compact(
            [
                {"kind": "system", "tokens": 412},
                {"kind": "memory", "tokens": 12, "id": ID},
                {"kind": "summary", "tokens": 240, "id": "3", "excerpt": True},
                {"kind": "recalled", "tokens": 88, "id": ID, "excerpt": True},
                *(turn(i) for i in range(7)),
                {"kind": "question", "tokens": 14},
            ]
        )
        text = seen.encode(parts)
        assert "|" in text and "{" not in text
        assert list(seen.decode(text)) == parts

    def test_the_worst_record_is_within_its_stated_bound(self):
        wide = 999_999
        parts = [
            {"kind": "system", "tokens": wide},
            *({"kind": "memory", "tokens": wide, "id": ID} for _ in range(1000)),
            {"kind": "summary", "tokens": wide, "id": "999999999", "excerpt": True},
            *({"kind": "recalled", "tokens": wide, "id": ID, "excerpt": True} for _ in range(1000)),
            *({"kind": "turn", "tokens": wide, "id": ID} for _ in range(10_000)),
            {"kind": "question", "tokens": wide},
        ]
        text = seen.encode(seen.compact(parts))
        assert len(text.encode()) <= seen.MAX_BYTES
        assert len(text.encode()) > seen.MAX_BYTES * 0.8  # the bound is the worst case, not a loose guess

    def test_older_items_list_of_maps_still_reads(self):
        from decimal import Decimal

        old = [{"kind": "system", "tokens": Decimal(40)}, {"kind": "turn", "tokens": Decimal(9), "id": ID}]
        assert seen.decode(old) == ({"kind": "system", "tokens": 40}, {"kind": "turn", "tokens": 9, "id": ID})

    @pytest.mark.parametrize(
        "damaged", ["system", "system forty", "nonsense 3", "turns 3 2 only-one", "memory 3 a b", "memory -3", 7]
    )
    def test_a_damaged_record_is_one_unreadable_part(self, damaged):
        assert seen.decode(damaged) == ({"kind": seen.UNREADABLE, "tokens": 0},)

    def test_an_id_that_would_break_the_form_is_refused_when_writing(self):
        with pytest.raises(ValueError):
            seen.encode([{"kind": "memory", "tokens": 3, "id": "a|b"}])
