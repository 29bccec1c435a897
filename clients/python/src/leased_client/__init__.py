"""leased_client: the Python client of leased, a gRPC lease service with fencing tokens.

The blocking API is here (`LeaseClient`, `Lease`, the reentrant and read-write locks, `Watch`);
the asyncio one, on `grpc.aio`, is `leased_client.aio`; fencing a resource with the tokens
(PostgreSQL, Redis, a gRPC server interceptor) is `leased_client.fencing`. `pb` is the
generated protobuf module of `lease.v1`, for raw requests. See the package's README for usage.
"""

from ._blocking import Lease, LeaseClient, LockHold, ReadWriteLock, ReentrantLock, Watch
from ._common import (
    ACQUIRE_RETRIES,
    ACQUIRE_RETRY_BACKOFF_S,
    GIVE_UP_RELEASE_TIMEOUT_S,
    AcquireCancelled,
    AcquireTimeout,
    FencedResource,
    HolderInfo,
    InvalidTokenError,
    LeaseBusy,
    LeaseInfo,
    ListPage,
    NotGranted,
    RenewError,
    StaleTokenError,
    TokenCheck,
    WatchEvent,
    new_lease_id,
)
from ._proto.lease.v1 import lease_pb2 as pb

__version__ = "0.1.0"

__all__ = [
    "ACQUIRE_RETRIES",
    "ACQUIRE_RETRY_BACKOFF_S",
    "GIVE_UP_RELEASE_TIMEOUT_S",
    "AcquireCancelled",
    "AcquireTimeout",
    "FencedResource",
    "HolderInfo",
    "InvalidTokenError",
    "Lease",
    "LeaseBusy",
    "LeaseClient",
    "LeaseInfo",
    "ListPage",
    "LockHold",
    "NotGranted",
    "ReadWriteLock",
    "ReentrantLock",
    "RenewError",
    "StaleTokenError",
    "TokenCheck",
    "Watch",
    "WatchEvent",
    "new_lease_id",
    "pb",
]
