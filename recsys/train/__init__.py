"""Training: the shared trainer, its engines, optimizers and checkpoints."""
