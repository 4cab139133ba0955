"""The ``capa`` command with test faults injected: ``python -m tests.harness.crashing_capa ARGS…``.

Installs the fault hooks :mod:`tests.harness.faults` reads from ``CAPA_TEST_*`` environment variables
(crash after the N-th mutating AWS call, a throttling storm, failing operations) and the store faults of
:mod:`tests.harness.store_faults` (an interrupt inside a store transaction, a full disk), then runs exactly
what the ``capa`` console script runs, with the same arguments. Without any ``CAPA_TEST_*`` variable it *is*
``capa``.
"""

from __future__ import annotations

import sys


def main() -> None:
    from tests.harness import store_faults
    from tests.harness.faults import install_from_env

    install_from_env()
    store_faults.install_from_env()
    from capa_app.cli.main import run

    sys.argv[0] = "capa"
    run()


if __name__ == "__main__":
    main()
