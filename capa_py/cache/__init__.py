"""The cache behind the resource classes: reads served from what this process already observed of AWS.

* :mod:`capa_py.cache.front`: :class:`ReadThrough`, the read-through front of one resource class —
  describes served from the shared observations, lookups by tags and key answered from what this process
  created, creates and deletes noted — which the engine and the controllers' services call;
* :mod:`capa_py.cache.known`: :class:`Known`, the rarely-changing values a resource class reuses
  (attributes read with a call of their own, an AMI's root device, tags read alongside another kind's) and
  the observations of a related kind it reads instead of describing again.

Both sit on :class:`~capa_py.aws.observations.Observations` (one per region, on the region's clients); with
the cache disabled they pass every read to AWS.
"""

from capa_py.cache.front import PENDING_FRESHNESS, PassReads, ReadThrough
from capa_py.cache.known import MISS, Known, known_of

__all__ = ["MISS", "PENDING_FRESHNESS", "Known", "PassReads", "ReadThrough", "known_of"]
