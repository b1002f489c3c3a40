"""``arrol advise``: will pruning pay on this policy and data? The quality head's ranking within groups at several
detection lengths, the decode cost of a pruned rollout, the gradient probe against the control that costs the same
generation, the saving modelled for this machine and a GPU setting, and one verdict."""
