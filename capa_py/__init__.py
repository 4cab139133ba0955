"""capa-py: a Cluster API style infrastructure reconciler for AWS.

The import packages are layered: :mod:`capa_py.api` (object models) and :mod:`capa_py.store` (the object
store) know nothing of AWS or the CLI; :mod:`capa_py.ctrlkit` composes reconcile actions; the AWS layer,
the strategy engine, the controllers and the CLI sit on top.
"""

__version__ = "0.1.0"
