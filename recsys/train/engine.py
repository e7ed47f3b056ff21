"""The one small protocol every engine implements, so the trainer never asks which model it holds.

An engine trains a model in place, an epoch at a time: the autograd engine (batches through torch's
autograd and optimizers), the compiled engine (per-rating AdaGrad in numba), the device engine (the
same AdaGrad in whole-batch steps, recsys.train.device), the Gibbs samplers, BPR and implicit ALS
implement it.
`recsys.train.trainer.fit` prepares one for the run (`config.engine`, and whether the model samples
its posterior), runs its epochs, checkpoints its state, and closes it.
"""

from typing import Any, Protocol

import torch

from recsys.data.encoding import RatingTensors


class Engine(Protocol):
    """Epochs of one kind of training, and the state that resumes them exactly."""

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """Train epoch `epoch` (from 1): (its mean training loss, the ratings it trained on)."""
        ...

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """RMSE and MAE ("rmse", "mae") on `valid` of the model as trained so far; for a ranking model,
        NDCG@10 ("ndcg@10") of its lists."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What `load_state_dict` takes back to continue after the last epoch exactly."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict`."""
        ...

    def close(self) -> None:
        """Give back what the engine took for the run (threads, sparse gradients), also after a failure."""
        ...
