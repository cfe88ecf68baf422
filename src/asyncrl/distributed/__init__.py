"""The world of several trainer processes (``torchrun``), below the trainer: which rank this is, the
collectives' transport and listeners, the ranks' heartbeats and agreement on settings, the sharded
trainer's settings, the launcher (docs/scaling.md). What runs over one model across ranks (FSDP2
sharding, the data-parallel split, the optimizer's shards) is asyncrl.training's; rank 0's lead of the
others is asyncrl.runtime.ranks."""
