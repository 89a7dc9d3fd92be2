"""ZeroMQ transport: the wire format and the channels between learner and actors."""

from .channels import ExperienceReceiver, ExperienceSender, WeightPublisher, WeightSubscriber, bind_random
from .security import JobKeys, KeyFolderError, authenticate, stop_authenticator
from .wire import ALLOWED_DTYPES, SCHEMA_VERSION, Message, WireError, decode, encode

__all__ = [
    "ALLOWED_DTYPES",
    "SCHEMA_VERSION",
    "ExperienceReceiver",
    "ExperienceSender",
    "JobKeys",
    "KeyFolderError",
    "Message",
    "WeightPublisher",
    "WeightSubscriber",
    "WireError",
    "authenticate",
    "stop_authenticator",
    "bind_random",
    "decode",
    "encode",
]
