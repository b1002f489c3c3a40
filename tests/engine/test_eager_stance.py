"""An eager engine runs vLLM's own ``torch.compile``-wrapped ops eagerly (:func:`arrol_pl.engine.adapter.eager_stance`):
under the stance a compiled function traces nothing and returns what the eager one does; without it, it compiles."""

import torch

from arrol_pl.engine.adapter import eager_stance


def test_the_eager_stance_skips_compilation_and_keeps_the_result():
    from torch._dynamo.utils import counters  # a second of imports: here, not in every worker's collection

    torch._dynamo.reset()

    @torch.compile(dynamic=True, backend="eager")
    def gather(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return logits.log_softmax(-1).gather(-1, ids)

    logits, ids = torch.randn(4, 11), torch.randint(0, 11, (4, 1))
    expected = logits.log_softmax(-1).gather(-1, ids)
    before = counters["stats"]["unique_graphs"]
    with eager_stance(True):
        assert torch.equal(gather(logits, ids), expected)
    assert counters["stats"]["unique_graphs"] == before, "the stance traced a graph"
    with eager_stance(False):
        assert torch.equal(gather(logits, ids), expected)
    assert counters["stats"]["unique_graphs"] == before + 1, "without the stance the function compiles"
