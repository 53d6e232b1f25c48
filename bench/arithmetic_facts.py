"""How many one-digit sums and differences a model gets right when the equation is written for it.

The quickstart's level-1 problems are one sum or difference of numbers up to 10, and its runs differ most there
(docs/experiments.md). A wrong level-1 answer can be a wrong fact (`4 - 2 = 1`) or a wrong reading of the problem; this
separates the first: for every sum a + b (a, b in 1..10) and difference a - b (1 <= b <= a <= 10), it asks
"What is a + b?" with the task's instruction and writes the start of the answer, `a + b =`, into the model's turn,
then reads the number the model continues with (greedy, 4 new tokens). Per model it prints how many of the 100 sums
and 55 differences come out right.

    python bench/arithmetic_facts.py MODEL_DIR [MODEL_DIR ...]

MODEL_DIR is a Hugging Face folder: the imported base model or a run's `hf_model`. Generation uses transformers (bf16
where the CPU has native bf16, else fp32), as `bench/arithmetic_levels.py` does.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from arithmetic_levels import greedy_continuations, load_model  # noqa: E402


@dataclass(frozen=True)
class Fact:
    a: int
    op: str  # "+" or "-"
    b: int

    @property
    def value(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def equation(self) -> str:
        return f"{self.a} {self.op} {self.b} ="


def level1_facts() -> list[Fact]:
    """The sums and differences of the arithmetic task's level 1 (app/data/arithmetic_task.py): 100 and 55."""
    sums = [Fact(a, "+", b) for a in range(1, 11) for b in range(1, 11)]
    differences = [Fact(a, "-", b) for a in range(1, 11) for b in range(1, a + 1)]
    return sums + differences


def first_integer(text: str) -> Optional[int]:
    """The integer a continuation starts with (spaces allowed before it), or None."""
    match = re.match(r"\s*(-?\d+)", text)
    return int(match.group(1)) if match else None


def fact_table(results: Sequence[tuple[str, Sequence[Fact], Sequence[Optional[int]]]]) -> str:
    """A markdown table: per model, the sums, differences and all facts answered right."""
    lines = ["| model | sums right | differences right | all |", "|---|---|---|---|"]
    for name, facts, answers in results:
        if len(facts) != len(answers):
            raise ValueError(f"{len(answers)} answers for {len(facts)} facts")
        right = {op: sum(f.value == a for f, a in zip(facts, answers) if f.op == op) for op in "+-"}
        count = {op: sum(f.op == op for f in facts) for op in "+-"}
        share = (right["+"] + right["-"]) / len(facts)
        lines.append(f"| {name} | {right['+']} of {count['+']} | {right['-']} of {count['-']} | {share:.3f} |")
    return "\n".join(lines)


def model_answers(model_dir: Path, facts: Sequence[Fact]) -> list[Optional[int]]:
    """The number `model_dir` writes after each fact's equation, prefilled into its answer to the task's question."""
    from app.data.arithmetic_task import INSTRUCTION
    from app.data.prompts import render_prompts

    tokenizer, model = load_model(model_dir)
    questions = [[{"role": "user", "content": f"What is {f.a} {f.op} {f.b}?\n{INSTRUCTION}"}] for f in facts]
    texts = [text + f.equation for text, f in zip(render_prompts(tokenizer, questions), facts)]
    return [first_integer(text) for text in greedy_continuations(tokenizer, model, texts, max_tokens=4)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="Hugging Face model folders")
    args = parser.parse_args(argv)
    facts = level1_facts()
    print(fact_table([(str(model_dir), facts, model_answers(model_dir, facts)) for model_dir in args.models]))


if __name__ == "__main__":
    main()
