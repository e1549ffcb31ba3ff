"""What a training loop raises when its loss or gradients stop being finite numbers.

An optimizer step with a nan or inf gradient writes nan into the weights (and AdamW's moments):
every later loss is nan, and a model trained on would be registered as done with a loss of nan.
So both loops that update weights (`models.trainer`, `pipelines.dense.qsft`) check the loss and
the gradients' norm before each update, leave that update out, and stop with this error.
"""

from __future__ import annotations


class TrainingDiverged(RuntimeError):
    """The loss or the gradients are no longer finite: training cannot go on, and no model is
    registered."""

