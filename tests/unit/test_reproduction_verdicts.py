"""docs/benchmarks/reproduction.md's verdicts come from one rule (benchmarks._common.verdict): every
`lead ± SE → verdict` in its claims table is recomputed here from the table's own numbers."""
import os
import re

import pytest

from benchmarks._common import verdict

TABLE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "benchmarks", "reproduction.md")
JUDGED = re.compile(r"([+−-]\d+\.\d+) ± (\d+\.\d+) SE → \*\*(holds|does not hold|within noise)\*\*")


def _claim_rows() -> list[str]:
    with open(TABLE, encoding="utf-8") as fh:
        text = fh.read()
    table = text[:text.index("## Notes per claim")]
    return [line for line in table.splitlines() if re.match(r"\| \d+b? \|", line)]


def test_every_written_verdict_is_the_rules():
    judged = [m for row in _claim_rows() for m in JUDGED.finditer(row)]
    assert len(judged) >= 8
    for lead, se, word in (m.groups() for m in judged):
        assert verdict(float(lead.replace("−", "-")), float(se)) == word, f"{lead} ± {se} SE is not {word!r}"


def test_every_row_has_a_verdict_and_an_untestable_claim_gives_its_number():
    for row in _claim_rows():
        verdict_cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        untestable = "**cannot be tested here**" in verdict_cell
        assert JUDGED.search(verdict_cell) or untestable or "close" in row, row[:80]
        if untestable:
            reason = verdict_cell.split("**cannot be tested here**", 1)[1]
            assert re.search(r"\d", reason), f"no number says why: {row[:80]}"


@pytest.mark.parametrize("lead, se, word", [(0.05, 0.02, "holds"), (-0.05, 0.02, "does not hold"),
                                            (0.039, 0.02, "within noise"), (0.0, 0.0, "within noise")])
def test_the_rule(lead, se, word):
    assert verdict(lead, se) == word
