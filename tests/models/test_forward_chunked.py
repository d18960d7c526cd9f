"""Chunked log-probs: the vocabulary projection of response states only, equal to the full logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, Gemma2Config, Qwen2Config, Qwen2ForCausalLM

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.core.batch import Batch
from agentrl.core.losses import entropy_from_logits, log_probs_from_logits
from agentrl.models import forward
from agentrl.models.forward import policy_forward

TEMPERATURE = 0.7


def rollout_batch(vocab_size: int, rows: int = 4, seed: int = 0, extra_padding: int = 3) -> Batch:
    """Prompts of different lengths (left padding), a model turn, an observation, a second model
    turn of a different length per row (right padding), and ``extra_padding`` all-padding columns."""
    generator = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab_size, (n,), generator=generator).tolist()

    trajectories = []
    for i in range(rows):
        traj = Trajectory(prompt=PromptSpec(ids(3 + 3 * i)), group_id=f"g{i}", uid=str(i))
        traj.append(ids(7 - 2 * i if i < 3 else 9), Segment.MODEL, [0.0] * (7 - 2 * i if i < 3 else 9))
        traj.append(ids(4), Segment.OBSERVATION)
        traj.append(ids(2 + i), Segment.MODEL, [0.0] * (2 + i))
        trajectories.append(traj)
    batch = collate(trajectories, pad_token_id=0)
    for key in ("responses", "response_segments", "response_mask", "rollout_log_probs"):
        batch[key] = F.pad(batch[key], (0, extra_padding))
    batch["input_ids"] = F.pad(batch["input_ids"], (0, extra_padding))
    batch["attention_mask"] = F.pad(batch["attention_mask"], (0, extra_padding))
    batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    return batch


def build_model(directory: Path, arch: str, attn: str = "sdpa") -> torch.nn.Module:
    from agentrl.models.tiny import make_tiny_model_dir

    if not (directory / "config.json").is_file():
        make_tiny_model_dir(directory, seed=5, arch=arch)
    return AutoModelForCausalLM.from_pretrained(directory, attn_implementation=attn)


def response_attention(batch: Batch) -> torch.Tensor:
    return batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()


def plain_log_probs(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The computation before chunking: the full logits, response columns, fp32, T-scaled."""
    prompt_width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    columns = slice(prompt_width - 1, prompt_width - 1 + batch["responses"].shape[1])
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    ).logits[:, columns]
    logits = logits.float() / TEMPERATURE
    return log_probs_from_logits(logits, batch["responses"]), entropy_from_logits(logits)


def outputs_and_gradients(model: torch.nn.Module, batch: Batch, compute) -> tuple:
    """Masked log-probs and entropy, and the parameter gradients of a loss built from both."""
    model.zero_grad(set_to_none=True)
    log_probs, entropy = compute()
    mask = response_attention(batch)
    weights = torch.randn(log_probs.shape, generator=torch.Generator().manual_seed(1))
    ((log_probs * weights)[mask].sum() + (entropy * weights.flip(0))[mask].sum()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return log_probs[mask].detach(), entropy[mask].detach(), grads


def assert_same(ours: tuple, reference: tuple) -> None:
    torch.testing.assert_close(ours[0], reference[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[1], reference[1], atol=1e-5, rtol=1e-5)
    assert ours[2].keys() == reference[2].keys()
    for name, grad in reference[2].items():
        relative = float((ours[2][name] - grad).norm() / grad.norm().clamp(min=1e-12))
        assert relative < 1e-5, (name, relative)


def saved_for_backward_bytes(fn, model: torch.nn.Module) -> int:
    """Bytes of the distinct storages autograd keeps for backward while ``fn`` runs, parameters excluded
    (saving a weight for its gradient holds a reference, not new memory)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sum(storages.values())


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("chunk_tokens", [5, None])
def test_chunked_log_probs_entropy_and_gradients_equal_the_plain_full_logits_computation(
    tmp_path_factory, arch, chunk_tokens
):
    model = build_model(tmp_path_factory.getbasetemp() / f"chunked-{arch}", arch)
    batch = rollout_batch(model.config.vocab_size)
    assert int(response_attention(batch).sum()) > 2 * 5  # several chunks, the last one partial
    reference = outputs_and_gradients(model, batch, lambda: plain_log_probs(model, batch))
    ours = outputs_and_gradients(
        model,
        batch,
        lambda: policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=chunk_tokens),
    )
    assert_same(ours, reference)


def test_the_model_itself_computes_the_logits_of_one_position_only(tmp_path_factory):
    model = build_model(tmp_path_factory.getbasetemp() / "chunked-qwen2", "qwen2")
    batch = rollout_batch(model.config.vocab_size)
    shapes = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: shapes.append(tuple(args[0].shape))
    )
    try:
        log_probs, _ = policy_forward(model, batch, TEMPERATURE)
    finally:
        handle.remove()
    assert shapes == [(len(batch), 1, model.config.hidden_size)]
    assert torch.all(log_probs[~response_attention(batch)] == 0)  # padding was never projected


def large_vocabulary_model() -> torch.nn.Module:
    """Logits dominate its memory: 8192 words over a 16-wide, one-layer backbone."""
    config = Qwen2Config(
        vocab_size=8192,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def test_no_chunk_keeps_its_vocabulary_sized_logits_for_backward():
    model = large_vocabulary_model().train()
    batch = rollout_batch(model.config.vocab_size)
    tokens = int(response_attention(batch).sum())
    one_chunk_of_logits = 8 * model.config.vocab_size * 4
    chunked = saved_for_backward_bytes(
        lambda: policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=8), model
    )
    plain = saved_for_backward_bytes(lambda: plain_log_probs(model, batch), model)
    assert chunked < one_chunk_of_logits, (chunked, one_chunk_of_logits)
    assert plain > tokens * model.config.vocab_size * 4  # what the plain path keeps, for contrast


def test_a_metric_only_entropy_keeps_no_graph_and_no_saved_tensors():
    model = large_vocabulary_model().train()
    batch = rollout_batch(model.config.vocab_size)
    results = {}

    def run(with_entropy: bool) -> None:
        results[with_entropy] = policy_forward(
            model, batch, TEMPERATURE, with_entropy=with_entropy, entropy_grad=False, chunk_tokens=None
        )

    without_entropy = saved_for_backward_bytes(lambda: run(False), model)
    with_metric_entropy = saved_for_backward_bytes(lambda: run(True), model)
    log_probs, entropy = results[True]
    assert log_probs.requires_grad and not entropy.requires_grad and entropy.grad_fn is None
    assert with_metric_entropy == without_entropy
    assert float(entropy[response_attention(batch)].min()) > 0


def test_a_chunk_size_below_one_is_refused(tmp_path_factory):
    model = build_model(tmp_path_factory.getbasetemp() / "chunked-qwen2", "qwen2")
    with pytest.raises(ValueError, match="chunk_tokens"):
        policy_forward(model, rollout_batch(model.config.vocab_size), chunk_tokens=0)


def test_a_softcapped_model_takes_the_full_logits_path_and_matches_its_own_logits():
    config = Gemma2Config(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=0.5,  # small, so the cap changes every logit
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    batch = rollout_batch(config.vocab_size)
    assert forward._output_head(model) is None
    reference = outputs_and_gradients(model, batch, lambda: plain_log_probs(model, batch))
    ours = outputs_and_gradients(
        model, batch, lambda: policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=4)
    )
    assert_same(ours, reference)


class ScaledLogitsQwen2(Qwen2ForCausalLM):
    """Logits scaled after the LM head, with no config key announcing it."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, logits_to_keep=0, **kwargs):
        out = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        out.logits = out.logits * 3.0
        return out


def test_a_model_whose_logits_are_not_its_head_output_is_caught_on_its_first_call(tmp_path_factory):
    directory = tmp_path_factory.getbasetemp() / "chunked-qwen2"
    build_model(directory, "qwen2")
    model = ScaledLogitsQwen2.from_pretrained(directory)
    batch = rollout_batch(model.config.vocab_size)
    reference = outputs_and_gradients(model, batch, lambda: plain_log_probs(model, batch))
    ours = outputs_and_gradients(
        model, batch, lambda: policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=4)
    )
    assert_same(ours, reference)
    assert forward._output_head(model) is None  # remembered: later calls go straight to the full logits


def test_under_fsdp2_the_chunked_path_gives_the_plain_results_and_gradients(tmp_path_factory):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    directory = tmp_path_factory.getbasetemp() / "chunked-qwen2"
    reference_model = build_model(directory, "qwen2")
    sharded = build_model(directory, "qwen2")
    batch = rollout_batch(reference_model.config.vocab_size)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for layer in sharded.model.layers:
            fully_shard(layer)
        fully_shard(sharded)
        reference = outputs_and_gradients(
            reference_model, batch, lambda: plain_log_probs(reference_model, batch)
        )
        ours = outputs_and_gradients(
            sharded,
            batch,
            lambda: policy_forward(sharded, batch, TEMPERATURE, with_entropy=True, chunk_tokens=4),
        )
    finally:
        dist.destroy_process_group()
    assert forward._HEAD_VERIFIED.get(sharded) is True  # the hook path ran, not the fallback
    full = {
        name.replace("_fsdp_wrapped_module.", ""): grad.full_tensor()
        if hasattr(grad, "full_tensor")
        else grad
        for name, grad in ours[2].items()
    }
    assert_same((ours[0], ours[1], full), reference)
