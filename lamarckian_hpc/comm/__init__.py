"""ZeroMQ transport: the wire format and the channels between learner and actors."""

from .channels import ExperienceReceiver, ExperienceSender, WeightPublisher, WeightSubscriber, bind_random
from .wire import ALLOWED_DTYPES, SCHEMA_VERSION, Message, WireError, decode, encode

__all__ = [
    "ALLOWED_DTYPES",
    "SCHEMA_VERSION",
    "ExperienceReceiver",
    "ExperienceSender",
    "Message",
    "WeightPublisher",
    "WeightSubscriber",
    "WireError",
    "bind_random",
    "decode",
    "encode",
]
