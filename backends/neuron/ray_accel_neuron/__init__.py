"""ray-accel backend for AWS Neuron (Trainium, Trainium2, Inferentia2)."""

from ray_accel_neuron.plugin import NeuronPlugin

__all__ = ["NeuronPlugin"]
