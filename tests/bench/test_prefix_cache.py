"""bench/prefix_cache.py's table: each block size's generation time against the first one's, and whether it
sampled the same tokens."""

from support import load_bench_script


def _result(block_size, round_s, tokens):
    return {"block_size": block_size, "round_s": round_s, "val_s": 40.0, "tokens": tokens, "mean_prompt_tokens": 78}


def test_each_block_size_is_compared_with_the_first():
    prefix_cache = load_bench_script("prefix_cache")
    same = [[[1, 2], [3]], [[4]]]
    rows = prefix_cache.format_rows(
        [
            _result(128, [12.0, 14.0], same),
            _result(32, [6.0, 7.0], [list(map(list, r)) for r in same]),  # equal tokens in new lists
            _result(64, [13.0, 13.0], [[[1, 2], [3]], [[5]]]),  # one token of the validation differs
        ]
    )
    # means 13, 6.5 and 13: the first against each, 13 / 6.5 = 2.00x; its own row 1.00x
    assert rows[1].split()[:2] == ["128", "13.00"] and rows[1].endswith("1.00x  yes")
    assert rows[2].split()[:2] == ["32", "6.50"] and rows[2].endswith("2.00x  yes")
    assert rows[3].split()[:2] == ["64", "13.00"] and rows[3].endswith("1.00x  no")
    assert "6.00 7.00" in rows[2]  # every round's seconds
