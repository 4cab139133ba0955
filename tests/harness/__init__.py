"""Test harness: moto servers over HTTP on loopback, plain or with ``ClientToken`` honoured.

* :mod:`tests.harness.moto_server` starts a moto server subprocess on a free loopback port, waits until it
  answers, resets it between tests and stops it;
* :mod:`tests.harness.moto_tokens` is imported *inside* such a subprocess to make moto honour
  ``ClientToken`` the way AWS documents it, for the creates capa-py sends tokens with.

The resource tests' fixtures (``tests/resources/conftest.py``) are built on these.
"""
