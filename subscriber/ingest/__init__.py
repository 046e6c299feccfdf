"""Ingress: the doors events come in by (HTTP callbacks; Kafka records)."""
