"""Forward helpers: padding trim keeps results exact; token-budget micro-batches cover the batch."""

import torch

from agentrl.core.batch import Batch
from agentrl.models.forward import micro_batches, policy_forward
from agentrl.models.layout import trim_padding
from agentrl.models.loading import load_causal_lm


def batch_with_padding() -> Batch:
    prompts = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    responses = torch.tensor([[11, 12, 0, 0, 0], [13, 14, 15, 0, 0]])
    prompt_mask = (torch.arange(4) >= torch.tensor([[2], [0]])).long()
    response_mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    return Batch.from_dict(
        {
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention,
            "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
            "responses": responses,
            "response_mask": response_mask.float(),
        }
    )


def test_trim_drops_all_padding_columns_and_points_at_the_first_response_logit():
    batch = batch_with_padding().index([0])
    trimmed = trim_padding(batch)
    assert trimmed.input_ids.tolist() == [[5, 6, 11, 12]]
    assert trimmed.first_logit == 1 and trimmed.response_width == 5


def test_trimmed_log_probs_equal_the_untrimmed_computation(tmp_path):
    from agentrl.models.tiny import make_tiny_model_dir

    model = load_causal_lm(make_tiny_model_dir(tmp_path / "m", seed=3)).eval()
    batch = batch_with_padding()
    with torch.no_grad():
        trimmed, _ = policy_forward(model, batch, temperature=0.7)
        logits = (
            model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"],
            )
            .logits[:, 3:8]
            .float()
            / 0.7
        )
        full = torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(trimmed[mask], full[mask], atol=1e-5, rtol=1e-5)
    assert torch.all(trimmed[:, 3:] == 0)  # columns past the longest response were never computed


def test_token_budget_micro_batches_respect_the_budget_and_cover_every_row():
    batch = Batch.concat([batch_with_padding()] * 3)  # rows of 4 and 7 attended tokens
    groups = list(micro_batches(batch, micro_batch_size=99, max_tokens=14))
    assert sum(len(g) for g in groups) == len(batch)
    for group in groups:
        longest = int(group["attention_mask"].sum(-1).max())
        assert longest * len(group) <= 14 or len(group) == 1
    assert [len(g) for g in micro_batches(batch, micro_batch_size=4)] == [4, 2]
