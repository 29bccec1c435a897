"""The build step pyproject.toml cannot express: generate the gRPC stubs of lease.proto with
grpcio-tools into the package (leased_client/_proto/lease/v1/), so that the wheel needs neither
grpcio-tools nor the proto at run time.

The proto comes from the repository's proto/ when building inside the repository, copied first to
proto/ here so that the sdist carries it; an sdist builds from that copy on its own.
"""

from __future__ import annotations

import importlib.resources
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
PROTO_FILE = "lease/v1/lease.proto"
REPO_PROTO = HERE.parent.parent / "proto"
LOCAL_PROTO = HERE / "proto"
# grpcio-tools writes `from lease.v1 import lease_pb2`, an import of a top-level package `lease`
# that would clash with anyone else's; inside the package it must be relative.
ABSOLUTE_IMPORT = "from lease.v1 import lease_pb2 as"
RELATIVE_IMPORT = "from . import lease_pb2 as"


def copy_repo_proto() -> None:
    """In the repository, refresh proto/ here from the contract, the one source of truth."""
    source = REPO_PROTO / PROTO_FILE
    if source.exists():
        target = LOCAL_PROTO / PROTO_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def generate(out_dir: Path) -> None:
    """lease_pb2.py, lease_pb2.pyi and lease_pb2_grpc.py in out_dir/lease/v1, made packages."""
    # google/protobuf/timestamp.proto, which lease.proto imports, ships with grpcio-tools.
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{LOCAL_PROTO}", f"-I{well_known}",
         f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}",
         PROTO_FILE],
        check=True,
    )
    grpc_module = out_dir / "lease" / "v1" / "lease_pb2_grpc.py"
    code = grpc_module.read_text()
    if ABSOLUTE_IMPORT not in code:
        raise RuntimeError(f"{grpc_module}: grpcio-tools no longer writes {ABSOLUTE_IMPORT!r}")
    grpc_module.write_text(code.replace(ABSOLUTE_IMPORT, RELATIVE_IMPORT))
    for package in (out_dir, out_dir / "lease", out_dir / "lease" / "v1"):
        (package / "__init__.py").write_text('"""Generated from lease.proto at build time."""\n')


# Before setup(): setuptools looks for the packages, _proto among them, as soon as it starts (for
# the sdist too, which leaves them out: see MANIFEST.in).
copy_repo_proto()
generate(HERE / "src" / "leased_client" / "_proto")
setup()
