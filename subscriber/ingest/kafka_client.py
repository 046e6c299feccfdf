"""aiokafka client options from :class:`KafkaSettings`, and the error boundary.

Every aiokafka client we build (consumer, producer, admin) gets its connection
and security options here, so TLS and SASL are configured in one place. aiokafka
errors are translated into the service's error tree by :func:`kafka_errors`.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from aiokafka.helpers import create_ssl_context

from subscriber.config import KafkaSettings
from subscriber.errors import BrokerUnavailable, ConfigError, IngestError

__all__ = ["client_options", "consumer_options", "kafka_errors", "producer_options"]


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _ssl_context(settings: KafkaSettings) -> ssl.SSLContext | None:
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=settings.ssl_cafile or None,
            certfile=settings.ssl_certfile or None,
            keyfile=settings.ssl_keyfile or None,
            password=settings.ssl_key_password.get_secret_value() or None,
        )
    except (OSError, ssl.SSLError) as exc:
        # The message names the file, never the key password.
        raise ConfigError(f"kafka TLS settings unusable: {exc}") from exc
    context.check_hostname = settings.ssl_check_hostname
    return context


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Connection, TLS and SASL options shared by every aiokafka client.

    Raises:
        ConfigError: a TLS file cannot be read.
    """
    options: dict[str, Any] = {
        "bootstrap_servers": list(settings.bootstrap_servers),
        "client_id": settings.client_id,
        "request_timeout_ms": _ms(settings.request_timeout),
        "retry_backoff_ms": _ms(settings.retry_backoff),
        "security_protocol": settings.security_protocol,
    }
    context = _ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL_") and settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return options


def consumer_options(settings: KafkaSettings) -> dict[str, Any]:
    """Options of the ingest consumer: manual commits only, our group and timeouts."""
    return {
        **client_options(settings),
        "group_id": settings.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": settings.auto_offset_reset,
        "session_timeout_ms": _ms(settings.session_timeout),
        "heartbeat_interval_ms": _ms(settings.heartbeat_interval),
        "max_poll_interval_ms": _ms(settings.max_poll_timeout),
        # Members get this long to rejoin; our revoke listener drains
        # in-flight appends for up to revoke_drain_timeout first.
        "rebalance_timeout_ms": _ms(settings.session_timeout + settings.revoke_drain_timeout),
        "max_poll_records": settings.max_poll_records,
    }


def producer_options(settings: KafkaSettings) -> dict[str, Any]:
    """Options of the ``kafka publish`` producer: wait for every in-sync replica."""
    return {**client_options(settings), "acks": "all"}


@contextmanager
def kafka_errors(action: str) -> Iterator[None]:
    """Translate aiokafka errors raised inside the block.

    Arguments:
        action: what was being done, for the message ("publish to 'x'").

    Raises:
        BrokerUnavailable: no broker answered (connection refused, timeout,
            or any error aiokafka marks retriable).
        IngestError: any other Kafka error (authorization, bad topic ...).
    """
    try:
        yield
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise BrokerUnavailable(f"{action}: no Kafka broker answered ({exc})") from exc
    except KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise BrokerUnavailable(f"{action}: {type(exc).__name__}: {exc}") from exc
        raise IngestError(f"{action}: {type(exc).__name__}: {exc}") from exc
