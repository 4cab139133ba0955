"""botocore's data (service models, endpoints, waiters, paginators) read once per process and shared.

Every botocore session makes its own loader, and a loader caches what it read: so each session (one per
region and identity in :class:`~capa_py.aws.session.AWSClients`, plus the offline checks of
:mod:`capa_py.api.aws_checks` and the waiter cadences of the controllers) parsed the EC2 service model
again, 14 MiB of Python objects each time. :func:`shared_loader` is the one loader of the process;
:func:`session_with_shared_data` makes a botocore session that reads through it. botocore's loader is safe
to share: what it caches never changes once read, and two threads reading the same file at once only
parse it twice.
"""

from __future__ import annotations

from functools import cache

import botocore.loaders
import botocore.session


@cache
def shared_loader() -> botocore.loaders.Loader:
    """The process's botocore data loader (its cache holds every model read so far)."""
    return botocore.loaders.create_loader()


def session_with_shared_data(
    session: botocore.session.Session | None = None, profile: str | None = None
) -> botocore.session.Session:
    """``session`` (or a new botocore session for ``profile``) reading botocore's data through the
    process's loader."""
    if session is None:
        session = botocore.session.Session(profile=profile)
    session.register_component("data_loader", shared_loader())
    return session


def forget_repeated_paths() -> None:
    """Drop repeated search paths of the shared loader: every boto3 session made over it appends boto3's
    data directory once more."""
    paths = shared_loader().search_paths
    paths[:] = list(dict.fromkeys(paths))


__all__ = ["forget_repeated_paths", "session_with_shared_data", "shared_loader"]
