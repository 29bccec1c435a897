"""Fixtures of the Python client's tests: a real stack per test module and three clients of it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from leased_client import LeaseClient
    from leased_stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from leased_stack import running_stack

    with running_stack(tmp_path_factory.mktemp("leased")) as running:
        yield running


@pytest.fixture
def clients(stack: Stack) -> Iterator[tuple[LeaseClient, LeaseClient, LeaseClient]]:
    """Three independent clients (three channels), as three processes of a fleet would have."""
    from leased_client import LeaseClient

    with contextlib.ExitStack() as opened:
        a, b, c = (opened.enter_context(LeaseClient(stack.target)) for _ in range(3))
        yield a, b, c
