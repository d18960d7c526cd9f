"""DAPO's overlong treatments against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from agentrl.core.overlong import overlong_loss_mask, overlong_rows, soft_overlong_penalty


def test_soft_penalty_is_zero_before_the_buffer_then_a_linear_ramp_to_minus_the_factor():
    # budget 100, buffer 20: the ramp starts after 80 tokens and reaches -f at 100
    lengths = torch.tensor([10, 80, 81, 90, 99, 100, 130])
    got = soft_overlong_penalty(lengths, max_length=100, buffer=20, factor=0.5)
    expected = torch.tensor([0.0, 0.0, -0.5 / 20, -0.5 * 10 / 20, -0.5 * 19 / 20, -0.5, -0.5])
    assert torch.allclose(got, expected)


def test_soft_penalty_with_no_buffer_is_off():
    assert torch.equal(soft_overlong_penalty(torch.tensor([5, 100]), 100, 0), torch.zeros(2))


@pytest.mark.parametrize("buffer", [-1, 100, 150])
def test_soft_penalty_refuses_a_buffer_outside_the_budget(buffer):
    with pytest.raises(ValueError, match=r"overlong buffer must be in \[0, 100\)"):
        soft_overlong_penalty(torch.tensor([1]), 100, buffer)


def test_overlong_filter_zeroes_every_token_of_an_overlong_row_and_keeps_the_others():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    got = overlong_loss_mask(mask, torch.tensor([False, True, False]))
    assert torch.equal(got, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]))
    assert torch.equal(mask[1], torch.tensor([1.0, 0.0, 1.0]))  # the input is not modified


def test_overlong_filter_needs_one_flag_per_row():
    with pytest.raises(ValueError, match="one flag per row"):
        overlong_loss_mask(torch.ones(3, 2), torch.tensor([True, False]))


def test_a_row_is_overlong_when_the_response_budget_or_the_context_cut_it():
    got = overlong_rows([True, False, False, True], [False, True, False, True])
    assert got.tolist() == [True, True, False, True]
