"""Rating models: plain nn.Modules over (batch, 2) [user, item] indices."""
