"""Training: the shared trainer, its two engines, optimizers and checkpoints."""
