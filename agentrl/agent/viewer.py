"""Render a trajectory dump as HTML: what the policy wrote vs what the loss ignores.

    python -m agentrl.agent.viewer dump.jsonl --out dump.html [--limit 50]

Model tokens (loss mask 1) are shown on a green background; observation tokens (loss
mask 0: retrieved documents, tool output, hints) are grey, struck through and marked
"masked", so the masking is visible at a glance. Hovering a span shows its token range.
Below the response, a table lists every tool call: the turn that made it, the tool, its
arguments and status (written by the policy: trained, loss mask 1) and the tool message
it got back (inserted: masked, loss mask 0).
"""

from __future__ import annotations

import argparse
import html
import json
from collections.abc import Iterable
from pathlib import Path

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 70em; }
.traj { border: 1px solid #ccc; border-radius: 6px; padding: 1em; margin-bottom: 1.5em; }
.meta { font-size: 0.85em; color: #444; margin-bottom: 0.5em; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: 0.9em; }
.prompt { color: #777; background: #f6f6f6; padding: 0.5em; margin-bottom: 0.5em; }
.model { background: #d9f5d9; }
.observation { background: #e4e4e4; color: #777; text-decoration: line-through; }
.observation::before { content: "[masked] "; font-size: 0.75em; color: #a00; text-decoration: none; }
.legend span { padding: 0 0.4em; margin-right: 1em; }
table.calls { border-collapse: collapse; margin-top: 0.6em; font-size: 0.85em; width: 100%; }
table.calls td, table.calls th { border: 1px solid #ddd; padding: 0.2em 0.4em; vertical-align: top; }
table.calls td.args { background: #d9f5d9; font-family: monospace; }
table.calls td.message { background: #e4e4e4; color: #555; white-space: pre-wrap; }
.bad { color: #a00; font-weight: bold; }
"""


def render_calls(calls: list[dict]) -> str:
    """The tool calls of one trajectory as a table (empty when it made none)."""
    if not calls:
        return ""
    rows = "".join(
        "<tr>"
        f"<td>{int(c.get('turn', 0))}</td><td>{html.escape(str(c.get('name')))}</td>"
        f'<td class="args">{html.escape(json.dumps(c.get("arguments"), ensure_ascii=False))}</td>'
        f'<td class="{"" if c.get("status") == "ok" else "bad"}">{html.escape(str(c.get("status")))}</td>'
        f'<td class="message">{html.escape(str(c.get("message", "")))}</td>'
        "</tr>"
        for c in calls
    )
    return (
        '<table class="calls"><tr><th>turn</th><th>tool</th><th>arguments (trained, loss_mask=1)</th>'
        f"<th>status</th><th>tool message (masked, loss_mask=0)</th></tr>{rows}</table>"
    )


def render_record(record: dict) -> str:
    """One trajectory as an HTML block."""
    meta_keys = (
        "uid",
        "data_source",
        "ground_truth",
        "reward",
        "num_turns",
        "num_invalid_actions",
        "tool_calls",
        "tool_calls_invalid",
        "finished",
        "truncation",
        "tool_failures",
        "token_drift",
        "num_steps",
        "turn_rewards",
    )
    meta = " · ".join(f"<b>{k}</b>: {html.escape(json.dumps(record.get(k)))}" for k in meta_keys)
    spans = _render_spans(record.get("spans", []))
    prompt = html.escape(record.get("prompt_text", ""))
    steps = record.get("steps") or []
    if steps:  # one block per step: its own prompt (the conversation then) and what it sampled
        body = "".join(
            f"<h4>step {k} ({html.escape(str(st.get('reason')))}, "
            f"turns {html.escape(json.dumps(st.get('turns')))})</h4>"
            f"<details><summary>prompt ({len(st.get('prompt_ids', []))} tokens)</summary>"
            f'<pre class="prompt">{html.escape(st.get("prompt_text", ""))}</pre></details>'
            f"<pre>{_render_spans(st.get('spans', []))}</pre>"
            for k, st in enumerate(steps)
        )
    else:
        body = (
            f"<details><summary>prompt ({len(record.get('prompt_ids', []))} tokens)</summary>"
            f'<pre class="prompt">{prompt}</pre></details><pre>{spans}</pre>'
        )
    return (
        f'<div class="traj"><div class="meta">{meta}</div>{body}'
        f"{render_calls(record.get('calls') or [])}</div>"
    )


def _render_spans(spans: list[dict]) -> str:
    return "".join(
        f'<span class="{html.escape(s["segment"])}" title="{html.escape(s["segment"])} tokens '
        f'{s["start"]}–{s["end"]}, loss_mask={s["loss_mask"]}">{html.escape(s["text"])}</span>'
        for s in spans
    )


def render_html(records: Iterable[dict], title: str = "agentrl trajectories") -> str:
    body = "\n".join(render_record(r) for r in records)
    legend = (
        '<p class="legend"><span class="model">model tokens (trained)</span>'
        '<span class="observation">observation tokens</span></p>'
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{legend}{body}</body></html>"
    )


def read_dump(path: str | Path, limit: int | None = None) -> list[dict]:
    records = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from None
            if limit is not None and len(records) >= limit:
                break
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", help="JSONL written by agentrl.agent.dump.dump_trajectories")
    parser.add_argument("--out", help="HTML file to write (default: the dump path with .html)")
    parser.add_argument("--limit", type=int, default=None, help="render at most this many trajectories")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.dump).with_suffix(".html")
    out.write_text(
        render_html(read_dump(args.dump, args.limit), title=Path(args.dump).name), encoding="utf-8"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
