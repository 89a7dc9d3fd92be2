"""Torch networks: fully connected and convolutional encoders, action heads, actor-critic."""

from .actor_critic import ActorCritic
from .cnn import ConvEncoder
from .heads import CategoricalHead, GaussianHead
from .layers import fully_connected, layer_init

__all__ = ["ActorCritic", "CategoricalHead", "ConvEncoder", "GaussianHead", "fully_connected", "layer_init"]
