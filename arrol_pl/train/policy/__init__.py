"""The policy on one or many ranks: log-probs, FSDP2 sharding, weights for the engine, the update's peak."""
