"""The mypy plugin's expected output, case by case (tests/plugin/cases/*.test).

Each case is one pytest item; mypy runs once per configuration group for the whole session
(see mypy_cases.py for the format and the runner).
"""

from __future__ import annotations

import pytest

import mypy_cases

CASES = mypy_cases.load_cases()
GROUPS = mypy_cases.group_cases(CASES)


def _param(case: mypy_cases.Case) -> object:
    marks = [pytest.mark.xfail(reason=case.xfail, strict=True)] if case.xfail else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case(case: mypy_cases.Case, case_results) -> None:  # noqa: ANN001
    if case.missing is not None:
        pytest.skip(f"{case.missing} is not installed")
    result = case_results.result(case.config)
    problem = mypy_cases.compare(case, result)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


@pytest.mark.parametrize("config", list(GROUPS), ids=[c.label() for c in GROUPS])
def test_no_output_outside_the_cases(config: mypy_cases.Config, case_results) -> None:  # noqa: ANN001
    """Nothing is reported outside the case modules (the stubs, the plugin's own imports)."""
    result = case_results.result(config)
    assert not result.stray, "\n".join(result.stray)


def test_case_files_parse() -> None:
    assert len(CASES) > 0
    for case in CASES:
        assert case.module.isidentifier(), case.name
