"""The one optimiser step (``optimizer_step``), without Ray: what its docstring promises."""

from __future__ import annotations

import pytest
import torch

from agentrl.core.losses import LOSS_AGG_MODES, agg_loss
from agentrl.models.update import NonFiniteLossError, optimizer_step
from tests.support.data_parallel import token_batch

LENGTHS = [1, 5, 2, 7, 3, 4]


def linear_model() -> torch.nn.Module:
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -1.0, 0.25]]))
    return model


def squared_error(model: torch.nn.Module, mode: str):
    def loss_fn(micro):
        values = model(micro["x"]).squeeze(-1)
        return agg_loss((values - micro["target"]).square(), micro["response_mask"], mode, norm_tokens=8), {}

    return loss_fn


def step_gradient(mode: str, **cut) -> torch.Tensor:
    """The gradient ``optimizer_step`` takes on the LENGTHS batch, cut into micro-batches by ``cut``."""
    model = linear_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the step leaves the weights alone
    weighting = "tokens" if mode == "token-mean" else "sequences"
    optimizer_step(
        model, optimizer, token_batch(LENGTHS, seed=3), squared_error(model, mode), weighting=weighting, **cut
    )
    return model.weight.grad.clone()


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(
    "cut", [{"micro_batch_size": 1}, {"micro_batch_size": 4}, {"micro_batch_size": 1, "max_tokens": 16}]
)
def test_micro_batching_does_not_change_the_gradient(mode, cut):
    whole = step_gradient(mode, micro_batch_size=len(LENGTHS))
    torch.testing.assert_close(step_gradient(mode, **cut), whole, rtol=1e-5, atol=1e-7)


def test_the_step_loss_is_the_one_loss_over_the_mini_batch():
    model = linear_model()
    batch = token_batch(LENGTHS, seed=3)
    with torch.no_grad():
        expected = squared_error(model, "token-mean")(batch)[0].item()
    result = optimizer_step(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        batch,
        squared_error(model, "token-mean"),
        micro_batch_size=2,
    )
    assert result.loss == pytest.approx(expected, rel=1e-6)


def test_gradients_are_clipped_to_grad_clip_and_the_norm_before_clipping_is_reported():
    model = linear_model()
    result = optimizer_step(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        token_batch(LENGTHS, seed=3),
        squared_error(model, "token-mean"),
        micro_batch_size=2,
        grad_clip=1e-3,
    )
    assert result.grad_norm > 1e-3
    assert model.weight.grad.norm().item() == pytest.approx(1e-3, rel=1e-4)


def test_a_non_finite_loss_stops_the_step_before_the_weights_move():
    model = linear_model()
    before = model.weight.detach().clone()

    def broken(micro):
        return torch.tensor(float("nan"), requires_grad=True), {}

    with pytest.raises(NonFiniteLossError, match="actor/loss is nan"):
        optimizer_step(
            model,
            torch.optim.SGD(model.parameters(), lr=1.0),
            token_batch(LENGTHS),
            broken,
            micro_batch_size=2,
            what="actor",
        )
    assert torch.equal(model.weight, before)


def test_a_loss_given_as_a_sum_over_tokens_takes_the_same_step_as_its_token_mean():
    def summed(model):
        def loss_fn(micro):
            values = model(micro["x"]).squeeze(-1)
            error = torch.where(micro["response_mask"].bool(), (values - micro["target"]).square(), 0.0)
            return error.sum(), {}

        return loss_fn

    model = linear_model()
    optimizer_step(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        token_batch(LENGTHS, seed=3),
        summed(model),
        micro_batch_size=2,
        reduction="sum",
    )
    torch.testing.assert_close(
        model.weight.grad, step_gradient("token-mean", micro_batch_size=2), rtol=1e-5, atol=1e-7
    )
