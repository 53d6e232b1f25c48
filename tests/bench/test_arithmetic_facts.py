"""bench/arithmetic_facts.py: the level-1 sums and differences a model completes right after their equation."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from arithmetic_facts import Fact, fact_table, first_integer, level1_facts, main  # noqa: E402


def test_the_facts_are_level_1s_sums_and_differences():
    facts = level1_facts()
    sums, differences = [f for f in facts if f.op == "+"], [f for f in facts if f.op == "-"]
    assert len(sums) == 100 and len(differences) == 55  # 10 x 10; 10 + 9 + ... + 1 with b <= a
    assert {(f.a, f.b) for f in sums} == {(a, b) for a in range(1, 11) for b in range(1, 11)}
    assert all(1 <= f.b <= f.a <= 10 for f in differences)
    assert Fact(7, "-", 6).value == 1 and Fact(6, "+", 4).value == 10 and Fact(6, "+", 4).equation == "6 + 4 ="


def test_the_number_read_is_the_one_the_continuation_starts_with():
    assert first_integer(" 10 cards") == 10
    assert first_integer("3\n#### 3") == 3
    assert first_integer(" -2") == -2
    assert first_integer(" ten") is None and first_integer("") is None


def test_the_table_counts_sums_and_differences_apart():
    facts = [Fact(1, "+", 1), Fact(2, "+", 3), Fact(5, "-", 2), Fact(4, "-", 4)]
    table = fact_table([("m", facts, [2, 5, 3, None])])  # right, right, right, unreadable
    assert table.splitlines()[2] == "| m | 2 of 2 | 1 of 2 | 0.750 |"
    with pytest.raises(ValueError, match="3 answers for 4 facts"):
        fact_table([("m", facts, [2, 6, 3])])


def test_a_model_folder_gets_one_row_over_all_155_facts(tiny_model_dir, capsys):
    main([str(tiny_model_dir)])
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {tiny_model_dir} |")]
    cells = row.strip("| ").split(" | ")
    assert cells[1].endswith(" of 100") and cells[2].endswith(" of 55")
    right = int(cells[1].split()[0]) + int(cells[2].split()[0])
    assert float(cells[3]) == pytest.approx(right / 155, abs=5e-4)
