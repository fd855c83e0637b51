"""Shared pieces every method uses: one training loop, one evaluation, flat weights, the server step."""
from algorithms.common.evaluation import evaluate
from algorithms.common.server_optimizer import server_step
from algorithms.common.training import LocalTraining, train_local
from algorithms.common.weights import get_flat_weights, parameter_mask, set_flat_weights

__all__ = ["LocalTraining", "evaluate", "get_flat_weights", "parameter_mask", "server_step", "set_flat_weights",
           "train_local"]
