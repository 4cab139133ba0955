"""The strategy engine: resource class traits → create/update/rollback strategy."""
