"""The policy on one or many ranks: log-probs, FSDP2 sharding, engine weights, the update's peak, a collective's end."""
