"""Layer 3 (training): the tiny MoE model trained in three precisions (`validate`).

Modules: `model` (the model's shape and parameters), `task` (the Markov and text tasks), `optimizer`
(AdamW), `trainer` (the training loop), `dense` (the f32 dense model), `jax_model` and
`torch_model` (the model on each framework's MoE layer, around any expert matmuls),
`validate` (the layer's results).
"""

from fp8check.layers.training.validate import (
    LAYER,
    MIN_LEARNED,
    SUITES,
    VARIANTS,
    ModelImpl,
    TrainingCase,
    iter_layer3,
    layer3_size,
)

__all__ = ["LAYER", "MIN_LEARNED", "SUITES", "VARIANTS", "ModelImpl", "TrainingCase", "iter_layer3",
           "layer3_size"]
