"""arrol-pl: ARRoL (Accelerating RLVR via online RoLlout pruning) on PyTorch Lightning and vLLM.

Importing this package loads nothing heavy; the algorithm core lives in :mod:`arrol_pl.core`
(torch and numpy only), the vLLM adapter in :mod:`arrol_pl.engine`, datasets and rewards in
:mod:`arrol_pl.tasks`.
"""

__version__ = "0.1.0"
