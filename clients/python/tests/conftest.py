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


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL per test module (scripts/postgres-scratch.sh), the fencing SQL applied."""
    from fencing_stack import running_postgres

    with running_postgres() as url:
        yield url


@pytest.fixture(scope="module")
def redis_resource(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of its own per test module as the resource, `leased_fencing` loaded."""
    from fencing_stack import running_redis_resource

    with running_redis_resource(tmp_path_factory.mktemp("redis-resource")) as url:
        yield url
