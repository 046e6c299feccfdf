"""Talking back to Tacker: auth, the client, the echo filter, subscriptions, the reconciler."""

from subscriber.tacker.client import TackerClient
from subscriber.tacker.echo import EchoFilter
from subscriber.tacker.ports import EchoLedger, EchoRecorder
from subscriber.tacker.reconciler import Reconciler
from subscriber.tacker.subscriptions import SubscriptionKeeper, ensure_subscription
from subscriber.vim_connection import vim_connection_entry

__all__ = [
    "EchoFilter",
    "EchoLedger",
    "EchoRecorder",
    "Reconciler",
    "SubscriptionKeeper",
    "TackerClient",
    "ensure_subscription",
    "vim_connection_entry",
]
