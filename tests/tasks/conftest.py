"""One reward worker pool for the task tests (starting workers costs about a second)."""

import pytest

from arrol_pl.tasks.reward import MathReward, RewardConfig


@pytest.fixture(scope="session")
def reward():
    # 1 s math-verify timeouts keep the pathological cases fast; 2 workers = the cores here.
    with MathReward(RewardConfig(num_workers=2, parse_timeout_s=1, verify_timeout_s=1)) as r:
        r.start()
        yield r
