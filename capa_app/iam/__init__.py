"""IAM: the least-privilege policies from what capa-py calls; ``capa iam bootstrap`` and ``delete``."""
