"""Training with several trainer processes (``torchrun``): the world, FSDP2 sharding, the data-parallel
split of each minibatch, and rank 0's lead of the others (docs/scaling.md)."""
