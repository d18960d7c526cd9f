"""Plain HF weights out of a training model: LoRA merged, FSDP gathered, plain as held."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from agentrl.config.schema import LoraConfig
from agentrl.models.export import export_hf_dir, plain_weights
from agentrl.models.loading import build_value_model, load_causal_lm, load_tokenizer
from agentrl.models.lora import add_lora
from agentrl.models.sharding import shard_model


def trained_lora(model_dir: Path) -> torch.nn.Module:
    """A LoRA model whose adapters moved away from zero (a fresh one merges to the base)."""
    model = add_lora(load_causal_lm(model_dir), LoraConfig(rank=4, alpha=8.0))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


def peft_merge(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(model).merge_and_unload().state_dict()


def test_the_stream_of_a_lora_model_is_the_peft_merge_under_the_plain_names(tiny_model_dir):
    model = trained_lora(tiny_model_dir)
    streamed = dict(plain_weights(model, lora=True))
    expected = peft_merge(model)
    assert streamed.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, rtol=0, atol=1e-6)
    assert any(
        not torch.equal(streamed[n], t) for n, t in load_causal_lm(tiny_model_dir).state_dict().items()
    )


def test_the_export_merges_lora_adapters_into_a_loadable_hf_dir(tiny_model_dir, tmp_path):
    model = trained_lora(tiny_model_dir)
    out = tmp_path / "actor"
    export_hf_dir(model, out, rank=0, sharded=False, lora=True, tokenizer=load_tokenizer(tiny_model_dir))
    loaded = load_causal_lm(out).state_dict()
    for name, tensor in peft_merge(model).items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=1e-6)
    assert (out / "adapter" / "adapter_model.safetensors").is_file(), "a resumed run loads the adapters"
    assert load_tokenizer(out).get_vocab() == load_tokenizer(tiny_model_dir).get_vocab()


def test_only_rank_0_writes(tiny_model_dir, tmp_path):
    export_hf_dir(load_causal_lm(tiny_model_dir), tmp_path / "actor", rank=1, sharded=False)
    assert not (tmp_path / "actor").exists()


def test_a_plain_model_exports_what_it_holds(tiny_model_dir, tmp_path):
    model = load_causal_lm(tiny_model_dir)
    export_hf_dir(model, tmp_path / "actor", rank=0, sharded=False)
    for name, tensor in load_causal_lm(tmp_path / "actor").state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    assert not (tmp_path / "actor" / "adapter").exists()


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_sharded_model_exports_the_same_directory_as_the_unsharded_one(
    tiny_model_dir, tmp_path, one_rank_group
):
    export_hf_dir(load_causal_lm(tiny_model_dir), tmp_path / "plain", rank=0, sharded=False)
    sharded = shard_model(load_causal_lm(tiny_model_dir))
    export_hf_dir(sharded, tmp_path / "sharded", rank=0, sharded=True)
    assert sorted(p.name for p in (tmp_path / "sharded").iterdir()) == sorted(
        p.name for p in (tmp_path / "plain").iterdir()
    )
    plain, gathered = (load_file(tmp_path / d / "model.safetensors") for d in ("plain", "sharded"))
    assert plain.keys() == gathered.keys()
    for name, tensor in plain.items():
        assert torch.equal(gathered[name], tensor), name


def test_a_sharded_critic_exports_a_directory_the_critic_loads_back(tiny_model_dir, tmp_path, one_rank_group):
    critic = build_value_model(tiny_model_dir)
    with torch.no_grad():
        critic.value_head.weight.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))
    expected = {n: t.clone() for n, t in critic.state_dict().items()}
    export_hf_dir(shard_model(critic), tmp_path / "critic", rank=0, sharded=True)
    restored = build_value_model(tmp_path / "critic").state_dict()
    assert restored.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(restored[name], tensor), name
