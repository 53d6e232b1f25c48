"""bench/format_trace.py: per step, the share of marked samples and the advantage each kind gets."""

import json

import pytest
from support import load_bench_script


def load_bench():
    return load_bench_script("format_trace")


def row(uid, response, score, step=1):
    return {"step": step, "uid": uid, "response": response, "score": score}


def test_a_step_counts_marked_samples_groups_and_their_advantage():
    bench = load_bench()
    rows = [
        # group a: mean (1.0 + 0.5 + 0.0 + 0.5) / 4 = 0.5; the one marked sample gets +0.5, the plain ones 0, 0, -0.5
        row("a", "3 + 4 = 7\n#### 7", 1.0),
        row("a", "It is 7.", 0.5),
        row("a", "I do not know.", 0.0),
        row("a", "7", 0.5),
        # group b: nothing marked, mean 0.25; plain advantages +0.25, -0.25
        row("b", "9", 0.5),
        row("b", "8", 0.0),
    ]
    t = bench.trace_step(rows)
    assert t.formatted_share == pytest.approx(1 / 6)
    assert t.groups_with_formatted == pytest.approx(0.5)
    assert t.advantage_formatted == pytest.approx(0.5)
    # group a's advantages sum to 0, so its plain ones sum to -0.5; group b's to 0
    assert t.advantage_plain == pytest.approx((0 - 0.5 + 0 + 0.25 - 0.25) / 5)
    assert t.samples == 6


def test_a_marked_wrong_answer_pushes_the_format_out_when_plain_answers_are_right():
    # the seed-1 failure in miniature: the marked sample is wrong (0.1) and the plain ones right (0.5)
    t = load_bench().trace_step([row("a", "#### 5", 0.1), row("a", "6", 0.5), row("a", "6", 0.5)])
    assert t.advantage_formatted == pytest.approx(0.1 - 1.1 / 3)
    assert t.advantage_formatted < 0 < t.advantage_plain


def test_the_table_reads_dumps_of_every_rank_and_the_entropy(tmp_path, capsys):
    bench = load_bench()
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    (dumps / "1-rank0.jsonl").write_text(json.dumps(row("a", "#### 1", 1.0)) + "\n")
    (dumps / "1-rank1.jsonl").write_text(json.dumps(row("b", "1", 0.5)) + "\n")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/entropy": 0.75}) + "\n")
    assert bench.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| 1 | 0.500 | 0.50 | +0.000 | +0.000 | 0.750 |"


def test_a_run_without_dumps_is_named(tmp_path, capsys):
    assert load_bench().main([str(tmp_path)]) == 2
    assert "no <step>-rank<r>.jsonl dumps (was trainer.rollout_data_dir set?)" in capsys.readouterr().err


def test_the_push_under_other_credits_rescores_the_same_samples():
    bench = load_bench()
    # one group: right marked, right unmarked, wrong marked, wrong unmarked (acc from the dump line)
    rows = [
        {**row("a", "#### 7", 1.0), "acc": 1.0},
        {**row("a", "7", 0.2), "acc": 1.0},
        {**row("a", "#### 8", 0.2), "acc": 0.0},
        {**row("a", "8", 0.0), "acc": 0.0},
    ]
    # credits 1, 0.5, 0.1: mean 0.4; marked samples 1.0 - 0.4 and 0.1 - 0.4 sum to +0.3
    assert bench.push_to_format(rows, (1.0, 0.5, 0.1), (1.0, 0.2, 0.2)) == pytest.approx(0.3)
    # credits 1, 0.2, 0.2: mean 0.35; 0.65 - 0.15 = +0.5
    assert bench.push_to_format(rows, (1.0, 0.2, 0.2), (1.0, 0.2, 0.2)) == pytest.approx(0.5)


def test_a_dump_without_acc_is_read_back_through_the_credits_it_was_scored_with():
    bench = load_bench()
    old = (1.0, 0.5, 0.1)
    assert bench.sample_is_right(row("a", "7", 0.5), old) is True  # unmarked, earned the unmarked credit
    assert bench.sample_is_right(row("a", "#### 8", 0.1), old) is False
    # an overlong penalty is taken off before the credit is matched
    assert bench.sample_is_right({**row("a", "#### 7", 0.9), "overlong_penalty": -0.1}, old) is True
    with pytest.raises(Exception, match="give three numbers"):
        bench.parse_credits("1,0.5")


def test_the_table_counts_the_steps_that_pushed_against_the_format(tmp_path, capsys):
    bench = load_bench()
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    # the marked sample is wrong and the plain one right: at 1,0.5,0.1 the format loses, at 1,0.2,0.2 it ties
    lines = [{**row("a", "#### 5", 0.1), "acc": 0.0}, {**row("a", "6", 0.5), "acc": 1.0}]
    (dumps / "1-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert bench.main([str(tmp_path), "--scored-with", "1,0.5,0.1", "--credits", "1,0.2,0.2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].endswith("| -0.20 | +0.00 |")  # (0.1 - 0.3) and (0.2 - 0.2)
    assert out[-2:] == [
        "credits 1,0.5,0.1: 1 steps pushed against the format",
        "credits 1,0.2,0.2: 0 steps pushed against the format",
    ]
