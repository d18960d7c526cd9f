"""The CPU quickstart: watch a tiny policy learn to search, end to end, in minutes.

    python -m agentrl.quickstart [--out runs/quickstart] [--short | --profile NAME] [--seed 0] [--preset ppo]
                                 [key=value ...]

Phases (``PHASES``; each timed, each printed as it starts and ends):

1. **world**     an invented knowledge base (``agentrl.data.world``): corpus + 1-/2-hop questions
2. **index**     BM25 index over the corpus (``retriever.build_index``)
3. **model**     a BPE tokenizer trained on the world's text and a random tiny Qwen2 LM
4. **retriever** the retriever server as a subprocess (``retriever.process.RetrieverProcess``)
5. **sft_data**  oracle solutions of some training questions, plus "shortcut" ones that
   answer at once with the name the question mentions, played through the *real* rollout
   (scripted turns, real retriever, real observation tokens)
6. **sft**       the warm start (``agentrl.trainer.sft``) in two stages: the oracle
   demonstrations teach the skill (search, read, copy the answer out of the passage), then
   a short pass over oracle + shortcuts teaches the habit of not searching, which PPO has
   to unlearn from reward alone
7. **eval_sft**  greedy held-out EM after SFT, per hop, and searches per question
   (``agentrl.eval`` in agent mode, with the PPO config's rollout settings)
8. **ppo**       PPO (GAE, critic, KL in the reward) on Ray with the SFT model as actor,
   reference and critic initialisation (``agentrl.trainer.ppo_trainer``)
9. **eval_ppo**  the same evaluation after PPO

Then, once, the report: ``report.md`` with the before/after table, the reward and EM
curves (PNG) and the wall time of every phase and of the whole run until then;
``report.json`` with the same numbers.

Extra ``key=value`` arguments override the PPO config (same keys as
``python -m agentrl.trainer.main``), e.g. ``algorithm.adv_estimator=grpo actor.rollout.n=4``.
``--short`` is the same code path on a smaller world with a few steps (the test suite
runs it). The profiles' sizes and schedules are data: ``agentrl/quickstart/profiles/*.yaml``.
``--profile two_tool`` trains the policy in the ``hermes`` format with two tools, search and
calculate, on a world with numeric facts and arithmetic questions (``dialects.py``); not yet measured.
The retriever is stopped and Ray shut down whatever happens.

Modules: ``profiles`` (the YAML profiles as ``Profile``), ``dialects`` (the tools and their call
format: tags with search, or hermes with search and calculate), ``demonstrations`` (QA rows per hop,
the SFT demonstrations), ``evaluation`` (the before/after evaluation), ``phases`` (each phase's
function), ``pipeline`` (``run_quickstart``: the phases in order), ``report`` (``QuickstartResult``,
``report.md``/``.json``, plots), ``cli`` (``main``). The quickstart is the synthetic-world recipe
on the spine the recipes share (``agentrl.recipes``): its phases run on the recipes'
``phases.PhaseRunner`` (without markers: every run starts afresh), its profiles are read by
``profiles.load_profile``.
"""

from agentrl.quickstart.cli import main
from agentrl.quickstart.demonstrations import (
    DATA_SOURCE,
    Demonstrations,
    demonstration_rounds,
    pick_sft_questions,
    record_demonstrations,
    tokenizer_texts,
)
from agentrl.quickstart.evaluation import eval_settings, evaluate_policy, summarize
from agentrl.quickstart.pipeline import PHASES, run_quickstart
from agentrl.quickstart.profiles import FULL, PROFILES, SHORT, TWO_TOOL, Profile
from agentrl.quickstart.report import QuickstartResult, write_report

__all__ = [
    "DATA_SOURCE",
    "FULL",
    "PHASES",
    "PROFILES",
    "SHORT",
    "TWO_TOOL",
    "Demonstrations",
    "Profile",
    "QuickstartResult",
    "demonstration_rounds",
    "eval_settings",
    "evaluate_policy",
    "main",
    "pick_sft_questions",
    "record_demonstrations",
    "run_quickstart",
    "summarize",
    "tokenizer_texts",
    "write_report",
]
