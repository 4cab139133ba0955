"""Prometheus metrics of a controller process, under controller-runtime's and CAPA's names.

Each :class:`ControllerMetrics` has its own ``CollectorRegistry`` (a process may hold several, tests do), so
nothing is registered globally. It records

* reconciles: ``controller_runtime_reconcile_total{controller,result}`` (success, error, requeue,
  requeue_after), ``controller_runtime_reconcile_errors_total{controller}``,
  ``controller_runtime_reconcile_time_seconds{controller}``;
* work queues (one per controller, named after it): ``workqueue_depth`` (keys waiting, including those
  whose retry delay has not passed), ``workqueue_adds_total`` (adds that queued a key not already
  waiting), ``workqueue_queue_duration_seconds`` (from when a key is due until a worker takes it),
  ``workqueue_work_duration_seconds``, ``workqueue_retries_total``;
* leader election: ``leader_election_master_status{name}`` (1 while leading);
* AWS calls, through a client hook on botocore's events: ``aws_api_requests_total{controller,service,
  region,operation,status_code,error_code}``, ``aws_api_request_duration_seconds{controller,service,
  region,operation}`` (per HTTP request) and ``aws_api_call_retries{controller,service,region,operation}``
  (per call: how many times it was retried for throttling or transient errors). The controller label is
  that of the reconcile making the call (:data:`current_controller`), empty outside reconciles;
  ``status_code`` is ``0`` when no HTTP response came back (the error code then names the exception).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.client import BaseClient
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from capa_py.aws.session import operation_of_event, register_call_observer, register_client_hook
from capa_py.runtime.context import current_controller

RESULTS = ("success", "error", "requeue", "requeue_after")
_QUEUE_BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, float("inf"))
_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
    float("inf"),
)  # fmt: skip


class QueueMetricsAdapter:
    """The ``workqueue_*`` series of one named queue (:class:`~capa_py.runtime.queue.QueueMetrics`)."""

    def __init__(self, metrics: ControllerMetrics, name: str) -> None:
        self._depth = metrics.workqueue_depth.labels(name=name)
        self._adds = metrics.workqueue_adds.labels(name=name)
        self._retries = metrics.workqueue_retries.labels(name=name)
        self._queue_duration = metrics.workqueue_queue_duration.labels(name=name)
        self._work_duration = metrics.workqueue_work_duration.labels(name=name)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def depth(self, depth: int) -> None:
        self._depth.set(depth)

    def waited(self, seconds: float) -> None:
        self._queue_duration.observe(seconds)

    def worked(self, seconds: float) -> None:
        self._work_duration.observe(seconds)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=r)
        self.workqueue_adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", ["name"], registry=r
        )
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_retries = Counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", ["name"], registry=r
        )
        self.leader_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )
        self.aws_requests = Counter(
            "aws_api_requests_total",
            "Total number of AWS API requests",
            ["controller", "service", "region", "operation", "status_code", "error_code"],
            registry=r,
        )
        self.aws_duration = Histogram(
            "aws_api_request_duration_seconds",
            "Latency of AWS API requests",
            ["controller", "service", "region", "operation"],
            registry=r,
        )
        self.aws_retries = Histogram(
            "aws_api_call_retries",
            "Number of retries made against an AWS API",
            ["controller", "service", "region", "operation"],
            buckets=(0, 1, 2, 3, 4, 5, 10, float("inf")),
            registry=r,
        )
        self._unhook: list[Callable[[], None]] = []

    # -- reconciles ---------------------------------------------------------------------------------
    def add_controller(self, name: str) -> None:
        """Start every series of a controller at zero, as controller-runtime does."""
        for result in RESULTS:
            self.reconcile_total.labels(controller=name, result=result)
        self.reconcile_errors.labels(controller=name)
        for series in (self.workqueue_adds, self.workqueue_retries):
            series.labels(name=name)
        self.workqueue_depth.labels(name=name).set(0)

    def reconciled(self, controller: str, result: str, seconds: float) -> None:
        self.reconcile_total.labels(controller=controller, result=result).inc()
        if result == "error":
            self.reconcile_errors.labels(controller=controller).inc()
        self.reconcile_time.labels(controller=controller).observe(seconds)

    def queue(self, name: str) -> QueueMetricsAdapter:
        return QueueMetricsAdapter(self, name)

    def leading(self, lease: str, leading: bool) -> None:
        self.leader_status.labels(name=lease).set(1 if leading else 0)

    # -- AWS calls ----------------------------------------------------------------------------------
    def hook_aws_clients(self) -> None:
        """Count the calls of every AWS client made from now on (until :meth:`close`)."""
        if not self._unhook:
            self._unhook = [register_client_hook(self._instrument), register_call_observer(self._retries)]

    def _retries(self, service: str, region: str, operation: str, retries: int) -> None:
        self.aws_retries.labels(
            controller=current_controller.get(), service=service, region=region, operation=operation
        ).observe(retries)

    def _instrument(self, client: BaseClient, service: str) -> None:
        started = threading.local()
        region = str(client.meta.region_name or "")

        def before_call(**_: Any) -> None:
            started.at = time.monotonic()

        def observe(operation: str, status_code: str, error_code: str) -> None:
            controller = current_controller.get()
            self.aws_requests.labels(
                controller=controller,
                service=service,
                region=region,
                operation=operation,
                status_code=status_code,
                error_code=error_code,
            ).inc()
            began = getattr(started, "at", None)
            if began is not None:
                self.aws_duration.labels(
                    controller=controller, service=service, region=region, operation=operation
                ).observe(time.monotonic() - began)
                started.at = None

        def after_call(http_response: Any, parsed: Any, model: Any, **_: Any) -> None:
            code = parsed.get("Error", {}).get("Code", "") if isinstance(parsed, dict) else ""
            observe(model.name, str(http_response.status_code), str(code or ""))

        def after_call_error(exception: Exception, event_name: str, **_: Any) -> None:
            observe(operation_of_event(event_name), "0", type(exception).__name__)

        client.meta.events.register("before-call", before_call)
        client.meta.events.register("after-call", after_call)
        client.meta.events.register("after-call-error", after_call_error)

    # -- exposition ---------------------------------------------------------------------------------
    def render(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        for unhook in self._unhook:
            unhook()
        self._unhook = []
