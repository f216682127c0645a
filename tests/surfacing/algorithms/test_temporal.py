from __future__ import annotations

import pytest

from surfacing.algorithms.temporal import asks_when, says_when


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("what year did Tim go to the Smoky Mountains?", True),
        ("Which week did Tim visit the UK?", True),
        ("How long ago was the outage?", True),
        ("What did Caroline research?", False),
        ("whenever possible, list the invoices", False),
    ],
)
def test_asks_when_recognises_questions_about_a_time(query: str, expected: bool) -> None:
    assert asks_when(query) is expected


def test_says_when_marks_texts_that_carry_a_time_expression() -> None:
    texts = [
        "I went to a LGBTQ support group yesterday",
        "We met last Friday at the cafe",
        "Back in May 2023 the team moved",
        "The deploy ran at 14:30",
        "I love painting sunsets",
        "Mayday is a distress call",
        "I may go, we may not",
        "",
    ]
    assert says_when(texts).tolist() == [True, True, True, True, False, False, False, False]
