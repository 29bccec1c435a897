"""The package as users get it: `leased_client` is the installed wheel (not the source tree), it
runs without grpcio-tools or the proto, and its generated modules import each other inside the
package. And the README's Python code blocks, each run as written against the real server.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from leased_stack import HERE, Stack

import leased_client

README = HERE.parent / "README.md"
# The address the README's blocks connect to; the test swaps in the stack's.
README_TARGET = "127.0.0.1:50051"
# The fencing blocks' PostgreSQL and Redis (the resource); swapped for the module's own, started
# only when a block names them (conftest.py: the fencing SQL applied, the library loaded).
README_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
README_REDIS = "redis://127.0.0.1:6379/0"


def test_the_package_is_the_installed_wheel_without_build_tools() -> None:
    installed = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(leased_client.__file__).resolve().is_relative_to(installed), leased_client.__file__
    assert importlib.util.find_spec("grpc_tools") is None, "grpcio-tools is not needed at run time"
    package = Path(leased_client.__file__).parent
    assert (package / "py.typed").exists()
    assert (package / "_proto" / "lease" / "v1" / "lease_pb2.pyi").exists()
    assert not list(package.rglob("*.proto")), "the proto is compiled in, not shipped"
    # No stray top-level `lease` package: the generated modules import each other relatively.
    assert importlib.util.find_spec("lease") is None
    from leased_client._proto.lease.v1 import lease_pb2_grpc
    assert lease_pb2_grpc.LeaseServiceStub is not None


def readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_python_blocks() -> None:
    assert len(readme_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_a_readme_block_runs_against_the_server(
    stack: Stack, index: int, request: pytest.FixtureRequest
) -> None:
    code = readme_blocks()[index]
    assert README_TARGET in code, "each block connects to the documented address"
    code = code.replace(README_TARGET, stack.target)
    if README_POSTGRES in code:
        code = code.replace(README_POSTGRES, request.getfixturevalue("postgres_url"))
    if README_REDIS in code:
        code = code.replace(README_REDIS, request.getfixturevalue("redis_resource"))
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, f"block {index}:\n{code}\n{result.stdout}{result.stderr}"
