"""The fleet's figures for Prometheus (the ``metrics`` extra: ``pip install ".[metrics]"`` from a clone).

``envs.serve_metrics(port)`` starts an HTTP endpoint (``/metrics``, Prometheus' text format) in a thread of
prometheus-client's. It serves the status the learner published last (once a second, while the learner is
inside a call, as it answers ``gym-remote status``): the thread reads a finished report and never touches the
learner's own state.

Metrics (all with a ``server`` label): ``gym_remote_slots``, ``gym_remote_slots_served``,
``gym_remote_clients_waiting``, ``gym_remote_uptime_seconds``; counters ``gym_remote_clients_joined_total``,
``..._rejoined_total``, ``..._lost_total``, ``..._left_total``, ``gym_remote_refused_total{reason}``; per slot
(labels ``slot`` and ``client``, empty for a slot without one) ``gym_remote_env_steps_total``,
``gym_remote_env_steps_per_second``, ``gym_remote_step_latency_seconds{stat="median"|"worst"}``,
``gym_remote_episodes_total``, ``gym_remote_episode_return_mean``, ``gym_remote_slot_losses_total``.

Example::

    envs = RemoteVectorEnv(num_envs=64, bind="tcp://0.0.0.0:5555", secret=...)
    envs.serve_metrics(9100)            # scrape http://LEARNER:9100/metrics
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
except ImportError as error:  # pragma: no cover - the extra is missing
    raise ImportError(
        'gym_remote.metrics needs prometheus-client: pip install prometheus-client (the "metrics" extra)'
    ) from error

__all__ = ["MetricsEndpoint", "FleetCollector"]


class FleetCollector:
    """A Prometheus collector of the status report ``source()`` returns (None: nothing published yet)."""

    def __init__(self, source: Callable[[], dict[str, Any] | None]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        report = self._source()
        if report is None:
            return
        server = str(report.get("server", ""))
        counts = report.get("counts", {})

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, text, labels=["server"])
            family.add_metric([server], value)
            return family

        def counter(name: str, text: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, text, labels=["server"])
            family.add_metric([server], value)
            return family

        yield gauge("gym_remote_slots", "Slots of the vector env.", report.get("num_envs", 0))
        yield gauge("gym_remote_slots_served", "Slots with a client now.", report.get("served", 0))
        yield gauge("gym_remote_clients_waiting", "Clients in line for a slot.", len(report.get("waiting", [])))
        yield gauge("gym_remote_uptime_seconds", "Seconds since the server started.", report.get("uptime", 0.0))
        for key, text in (
            ("joined", "Clients that joined."),
            ("rejoined", "Clients that joined again after losing their server."),
            ("lost", "Clients lost (dead, cut off, malformed)."),
            ("left", "Clients that left, saying goodbye."),
        ):
            yield counter(f"gym_remote_clients_{key}", text, counts.get(key, 0))
        refused = CounterMetricFamily("gym_remote_refused", "Refusals by reason.", labels=["server", "reason"])
        for reason, count in sorted(report.get("refused", {}).items()):
            refused.add_metric([server, reason], count)
        yield refused

        labels = ["server", "slot", "client"]
        steps = CounterMetricFamily("gym_remote_env_steps", "Env-steps each slot returned.", labels=labels)
        rates = GaugeMetricFamily("gym_remote_env_steps_per_second", "Over about 10 s.", labels=labels)
        latency = GaugeMetricFamily(
            "gym_remote_step_latency_seconds",
            "A command's round trip, sampled once a second over the last minute.",
            labels=[*labels, "stat"],
        )
        episodes = CounterMetricFamily("gym_remote_episodes", "Episodes that ended in each slot.", labels=labels)
        returns = GaugeMetricFamily("gym_remote_episode_return_mean", "Mean return of those episodes.", labels=labels)
        losses = CounterMetricFamily("gym_remote_slot_losses", "Clients lost while serving each slot.", labels=labels)
        for slot in report.get("slots", []):
            key = [server, str(slot["slot"]), str(slot.get("client", ""))]
            steps.add_metric(key, slot["steps"])
            rates.add_metric(key, slot["steps_per_second"])
            episodes.add_metric(key, slot["episodes"])
            losses.add_metric(key, slot["losses"])
            if slot.get("mean_return") is not None:
                returns.add_metric(key, slot["mean_return"])
            for stat in ("median", "worst"):
                if slot.get(f"latency_{stat}") is not None:
                    latency.add_metric([*key, stat], slot[f"latency_{stat}"])
        yield from (steps, rates, latency, episodes, returns, losses)


class MetricsEndpoint:
    """An HTTP endpoint serving :class:`FleetCollector`'s metrics at ``http://ADDRESS:PORT/metrics``."""

    def __init__(self, source: Callable[[], dict[str, Any] | None], port: int, address: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry()
        self.registry.register(FleetCollector(source))
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)
        self.address = address
        self.port = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
