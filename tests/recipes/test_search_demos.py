"""SFT demonstrations for real questions: planning (gold in retrieved docs, two searches for
two-hop questions) and the search-balanced choice of what the warm start trains on."""

from __future__ import annotations

from agentrl.recipes.search_demos import DemoPlan, balanced_by_searches, plan_demonstrations, script_turns

CORPUS = {
    "who founded acme": [
        {"id": "1", "contents": '"Acme"\nAcme was founded by Jane Roe in 1901.'},
        {"id": "2", "contents": '"Roadrunner"\nA bird.'},
    ],
    "where was the founder of acme born": [
        {"id": "1", "contents": '"Acme"\nAcme was founded by Jane Roe in 1901.'},
    ],
    "Jane Roe": [{"id": "3", "contents": '"Jane Roe"\nJane Roe was born in Springfield.'}],
    "is acme older than zeta": [{"id": "1", "contents": '"Acme"\nYes, older; founded in 1901.'}],
    "what colour is the sky": [{"id": "4", "contents": '"Sky"\nThe sky is blue by day.'}],
}


def retrieve(queries: list[str]) -> list[list[dict]]:
    """The documents of a fixed little corpus, by query (what the retriever returns is the input
    of the planner; the real retriever is exercised in the recipe test)."""
    return [CORPUS.get(q, []) for q in queries]


def record(i: str, question: str, golds: list[str], dataset: str = "nq") -> dict:
    return {"id": i, "question": question, "golden_answers": golds, "dataset": dataset}


def test_a_one_hop_question_is_kept_only_when_a_gold_answer_is_in_the_documents():
    plans = plan_demonstrations(
        [
            record("a", "who founded acme", ["J. Roe", "Jane Roe"]),
            record("b", "what colour is the sky", ["green"]),
        ],
        retrieve,
        {},
        topk=3,
    )
    assert [(p.record["id"], p.queries, p.answer) for p in plans] == [
        ("a", ("who founded acme",), "Jane Roe")
    ]


def test_a_two_hop_question_searches_the_supporting_title_the_first_search_missed():
    plans = plan_demonstrations(
        [record("h", "where was the founder of acme born", ["Springfield"], "hotpotqa")],
        retrieve,
        {"h": ["Acme", "Jane Roe"]},
        topk=3,
    )
    assert len(plans) == 1
    assert plans[0].queries == ("where was the founder of acme born", "Jane Roe")
    assert plans[0].answer == "Springfield"
    turns = script_turns(plans[0])
    assert len(turns) == 3 and "<search> Jane Roe </search>" in turns[1]
    assert turns[-1].endswith("<answer> Springfield </answer>")


def test_hotpotqa_without_supporting_titles_and_yes_no_answers_are_not_demonstrated():
    plans = plan_demonstrations(
        [
            record("x", "where was the founder of acme born", ["Springfield"], "hotpotqa"),
            record("y", "is acme older than zeta", ["yes"], "hotpotqa"),
        ],
        retrieve,
        {"y": ["Acme", "Zeta"]},
        topk=3,
    )
    assert plans == []


def test_the_warm_start_mix_is_balanced_over_search_counts_where_the_data_allow():
    examples = [f"one{i}" for i in range(5)] + [f"two{i}" for i in range(50)]
    searches = [1] * 5 + [2] * 50
    chosen = balanced_by_searches(examples, searches, limit=20, seed=0)
    assert len(chosen) == 20
    assert sum(e.startswith("one") for e in chosen) == 5, "all of the rare kind"
    assert len(set(chosen)) == 20
    even = balanced_by_searches(examples[:5] + examples[5:10], [1] * 5 + [2] * 5, limit=6, seed=0)
    assert sorted(e[:3] for e in even) == ["one"] * 3 + ["two"] * 3
    assert balanced_by_searches(examples, searches, limit=20, seed=0) == chosen


def test_a_plan_answers_with_the_gold_string_found():
    plan = DemoPlan(record("a", "q", ["x"]), ("q",), "Jane Roe")
    assert (
        script_turns(plan)[-1]
        == "<think> The documents give the answer. </think>\n<answer> Jane Roe </answer>"
    )


def test_only_questions_whose_search_returns_a_gold_answer_are_answerable():
    from agentrl.recipes.search_demos import answerable

    kept = answerable(
        [
            record("a", "who founded acme", ["Jane Roe"]),
            record("b", "what colour is the sky", ["green"]),
            record("c", "is acme older than zeta", ["yes"]),
            record("d", "what colour is the sky", ["blue"]),
        ],
        retrieve,
        topk=3,
    )
    assert [r["id"] for r in kept] == ["a", "d"]
