#!/usr/bin/env python
"""Convert a QA jsonl file into Search-R1-style training rows (parquet or jsonl).

    python data/prepare_qa.py --input ../shared/data/nq/test.jsonl --source nq \\
        --split test --out runs/data/nq_test.parquet [--limit 500 --seed 0]

Input lines: {"id", "question", "golden_answers": [str, ...], ...}. A bad line stops the
conversion with the file, the line number and the field. The logic lives in
agentrl.data.qa so the trainer and evaluation use the same template and schema.
"""

from __future__ import annotations

import argparse
import sys

from agentrl.data.qa import QADataError, read_question_records, sample_records, to_training_rows, write_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="question jsonl")
    ap.add_argument(
        "--source", default=None, help="data_source of every row (default: each record's 'dataset')"
    )
    ap.add_argument("--split", required=True, help="value of extra_info.split, e.g. train or test")
    ap.add_argument("--out", required=True, help="output .parquet or .jsonl")
    ap.add_argument("--limit", type=int, default=None, help="keep a seeded random sample of this many rows")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --limit sample")
    args = ap.parse_args(argv)
    try:
        records = sample_records(read_question_records(args.input), args.limit, args.seed)
        path = write_rows(to_training_rows(records, args.split, args.source), args.out)
    except (QADataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(records)} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
