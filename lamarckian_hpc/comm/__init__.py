"""ZeroMQ transport: the wire format and the channels between learner and actors."""

from .channels import (
                       WEIGHTS_TOPIC,
                       ExperienceReceiver,
                       ExperienceSender,
                       WeightPublisher,
                       WeightSubscriber,
                       bind_random,
                       make_socket,
)
from .limits import (
                       CONTROL_MESSAGE_BYTES,
                       DEFAULT_MAX_MESSAGE_BYTES,
                       MEGABYTE,
                       largest_message_bytes,
                       limit_bytes,
                       message_limit,
)
from .security import BROADCAST, LEARNER, JobKeys, KeyFolderError, KeyPair, authenticate, stop_authenticator
from .wire import ALLOWED_DTYPES, SCHEMA_VERSION, Message, WireError, decode, encode

__all__ = [
    "ALLOWED_DTYPES",
    "BROADCAST",
    "CONTROL_MESSAGE_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "LEARNER",
    "MEGABYTE",
    "SCHEMA_VERSION",
    "WEIGHTS_TOPIC",
    "ExperienceReceiver",
    "ExperienceSender",
    "JobKeys",
    "KeyFolderError",
    "KeyPair",
    "Message",
    "WeightPublisher",
    "WeightSubscriber",
    "WireError",
    "authenticate",
    "bind_random",
    "decode",
    "encode",
    "largest_message_bytes",
    "limit_bytes",
    "make_socket",
    "message_limit",
    "stop_authenticator",
]
