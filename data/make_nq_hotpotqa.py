#!/usr/bin/env python
"""Build the merged NQ + HotpotQA train/test parquet files (the Search-R1 training mix).

    python data/make_nq_hotpotqa.py --out runs/data/nq_hotpotqa [--test-fraction 0.2 --seed 0]

Search-R1 trains on the NQ and HotpotQA *train* splits, which are not in the shared data
beside the checkout (see ../shared/data/README.md, "Gaps"). This script therefore makes a
seeded train/test split of the evaluation questions that are available:

- nq/test.jsonl (3610 questions, the NQ-open test set), and
- hotpotqa/dev.jsonl restricted to the 1325 questions whose supporting paragraphs are all
  in the shared corpus (`all_supporting_in_corpus == true`); `--hotpotqa-all` keeps all 7405.

Questions that normalise to the same text always land on the same side, so train and test
share no question. Numbers from this split are NOT comparable with published Search-R1
results, which evaluate on the full test sets after training on the official train sets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentrl.data.qa import QADataError, read_question_records, split_train_test, to_training_rows, write_rows

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"  # beside the checkout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (train.parquet, test.parquet)")
    ap.add_argument("--shared", type=Path, default=SHARED, help="shared data folder")
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--hotpotqa-all", action="store_true", help="keep HotpotQA questions without gold paragraphs"
    )
    args = ap.parse_args(argv)
    try:
        nq = read_question_records(args.shared / "nq" / "test.jsonl")
        hotpot = read_question_records(args.shared / "hotpotqa" / "dev.jsonl")
        if not args.hotpotqa_all:
            hotpot = [r for r in hotpot if r.get("all_supporting_in_corpus") is True]
        for source, recs in (("nq", nq), ("hotpotqa", hotpot)):
            for r in recs:
                r["dataset"] = source
        train, test = split_train_test(nq + hotpot, args.test_fraction, args.seed)
        out = Path(args.out)
        write_rows(to_training_rows(train, "train"), out / "train.parquet")
        write_rows(to_training_rows(test, "test"), out / "test.parquet")
    except (QADataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def counts(rows: list[dict]) -> dict[str, int]:
        return {s: sum(r["dataset"] == s for r in rows) for s in ("nq", "hotpotqa")}

    print(json.dumps({"train": counts(train), "test": counts(test), "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
