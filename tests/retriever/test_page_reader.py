"""The page reader: ``POST /open_page`` over a real server subprocess, and the ``open_page`` tool.

The server serves an index of a slice of the shared corpus (three whole KILT pages, the NQ
gold passages at its head, a title that occurs in two runs); what it returns is compared
with pages assembled here, straight from that corpus file, by the rule the docs state: a
page is a run of consecutive passages with one title, its text their texts joined by one
space, windows counted in ``str.split`` words.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.ports import free_port
from agentrl.tools.retrieval.client import RetrieverClient
from agentrl.tools.retrieval.page_reader import PageReaderTool
from retriever.build_index import main as build_index
from retriever.config import ServerConfig
from retriever.corpus import DocStore, iter_corpus, write_docstore
from retriever.index import open_backend
from retriever.pages import PageIndex
from retriever.process import RetrieverProcess
from retriever.server import RetrieverService, create_app

MAX_WORDS, MAX_ITEMS, MAX_CHARS = 300, 8, 200
KILT_PAGES = 3


@dataclass
class Page:
    title: str
    ids: list[str]
    texts: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.texts)


def corpus_pages(path: Path) -> list[Page]:
    """The pages of a corpus file, assembled here (not by the code under test)."""
    pages: list[Page] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        passage = json.loads(line)
        first, newline, rest = passage["contents"].partition("\n")
        title = first.strip().strip('"')
        if not pages or pages[-1].title != title:
            pages.append(Page(title, [], []))
        pages[-1].ids.append(passage["id"])
        pages[-1].texts.append(rest if newline else first)
    return pages


def _slice_of_the_shared_corpus(source: Path, out: Path) -> None:
    lines = source.read_text(encoding="utf-8").splitlines()
    titles = [json.loads(ln)["contents"].split("\n", 1)[0] for ln in lines]
    keep = set(range(120))  # NQ gold passages: one-passage pages
    first_kilt = next(i for i, ln in enumerate(lines) if '"id": "kilt-' in ln)
    seen: list[str] = []
    for i in range(first_kilt, len(lines)):
        if titles[i] not in seen:
            seen.append(titles[i])
        if len(seen) > KILT_PAGES:
            break
        keep.add(i)
    runs: dict[str, list[int]] = {}  # title -> the first row of each of its runs
    for i, title in enumerate(titles):
        if i == 0 or titles[i - 1] != title:
            runs.setdefault(title, []).append(i)
    twice = next(t for t in titles[200:] if len(runs[t]) == 2)
    for start in runs[twice]:
        end = start
        while titles[end] == twice:
            end += 1
        keep.update(range(start, end + 1))  # the run and the passage after it, which ends it
    out.write_text("".join(lines[i] + "\n" for i in sorted(keep)), encoding="utf-8")


@pytest.fixture(scope="module")
def page_corpus(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(corpus file, index dir): a BM25 index of a slice of the shared corpus."""
    root = tmp_path_factory.mktemp("pages")
    corpus = root / "corpus.jsonl"
    _slice_of_the_shared_corpus(shared_data / "corpus" / "wiki_mini.jsonl", corpus)
    index = root / "index"
    assert build_index(["--corpus", str(corpus), "--backend", "bm25", "--out", str(index), "--quiet"]) == 0
    return corpus, index


@pytest.fixture(scope="module")
def page_server(page_corpus: tuple[Path, Path]) -> Iterator[RetrieverProcess]:
    _, index = page_corpus
    limits = ("--max-page-words", str(MAX_WORDS), "--max-pages-per-request", str(MAX_ITEMS))
    log = index.parent / "server.log"
    server = RetrieverProcess(
        index,
        log_path=log,
        extra_args=(*limits, "--max-query-chars", str(MAX_CHARS), "--default-page-words", "50"),
        access_log=str(log.with_suffix(".access.jsonl")),
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pages(page_corpus: tuple[Path, Path]) -> list[Page]:
    return corpus_pages(page_corpus[0])


def _post(url: str, body: bytes | dict) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "/open_page", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _open(url: str, *items: dict) -> list[dict]:
    status, body = _post(url, {"pages": list(items)})
    assert status == 200, body
    return body["result"]


def _read_whole(url: str, first: dict, length: int) -> list[dict]:
    windows, offset = [], 0
    while offset is not None:
        (window,) = _open(url, {**first, "offset": offset, "length": length})
        windows.append(window)
        offset = window["next_offset"]
    return windows


# --- byte-exact text --------------------------------------------------------------------------


def test_the_windows_of_every_page_concatenate_to_its_corpus_text_byte_for_byte(page_server, pages):
    """Every page of the corpus, opened by its first passage's id, read 37 words at a time."""
    assert len(pages) > 120 and max(len(p.ids) for p in pages) > 20
    for page in pages:
        windows = _read_whole(page_server.url, {"id": page.ids[0]}, 37)
        assert "".join(w["text"] for w in windows) == page.text
        words = page.text.split()
        for w in windows:
            assert w["title"] == page.title and w["total_words"] == len(words)
            assert w["text"].split() == words[w["offset"] : w["offset"] + w["words"]]
        covered = [cid for w in windows for cid in w["chunk_ids"]]
        assert list(dict.fromkeys(covered)) == page.ids


def test_a_title_opens_its_page_and_a_passage_id_opens_the_page_at_that_passage(page_server, pages):
    page = max(pages, key=lambda p: len(p.ids))  # a whole KILT article, > 20 passages
    windows = _read_whole(page_server.url, {"title": f' "{page.title}" '}, MAX_WORDS)
    assert "".join(w["text"] for w in windows) == page.text and len(windows) > 5
    assert all(w["id_offset"] is None for w in windows)
    k = 7
    before = sum(len(t.split()) for t in page.texts[:k])
    (by_id,) = _open(
        page_server.url, {"id": page.ids[k], "offset": before, "length": len(page.texts[k].split())}
    )
    assert by_id["id_offset"] == before and by_id["chunk_ids"] == [page.ids[k]]
    assert by_id["text"] == page.texts[k] + " "  # the passage, then the space before the next word


def test_a_title_in_two_runs_opens_the_first_and_each_runs_id_opens_its_own(page_server, pages):
    twice = [p for p in pages if sum(q.title == p.title for q in pages) == 2]
    first, second = twice[0], twice[1]
    assert first.title == second.title
    (by_title,) = _open(page_server.url, {"title": first.title, "length": MAX_WORDS})
    assert by_title["title_pages"] == 2 and by_title["chunk_ids"][0] == first.ids[0]
    (by_id,) = _open(page_server.url, {"id": second.ids[-1], "length": MAX_WORDS})
    assert by_id["chunk_ids"][-1] == second.ids[-1] and by_id["text"].startswith(second.texts[0])


def test_unknown_ids_and_titles_are_not_found_results_beside_the_found_ones(page_server, pages):
    short = next(p for p in pages if len(p.text.split()) < 50)  # the server's default window: 50 words
    found, no_id, no_title = _open(
        page_server.url, {"title": short.title}, {"id": "no-such-id"}, {"title": "No Such Title"}
    )
    assert found["found"] is True and found["text"] == short.text and found["next_offset"] is None
    assert no_id == {"found": False, "error": "no passage with id 'no-such-id'"}
    assert no_title == {"found": False, "error": "no page titled 'No Such Title'"}


def test_an_offset_past_the_end_of_a_page_is_an_empty_window(page_server, pages):
    page = pages[0]
    total = len(page.text.split())
    (past,) = _open(page_server.url, {"id": page.ids[0], "offset": total + 5, "length": 10})
    assert past["text"] == "" and past["words"] == 0 and past["next_offset"] is None
    assert past["total_words"] == total and past["chunk_ids"] == []


def test_the_page_index_is_built_once_and_reported_by_health(page_server, pages):
    health = page_server.health()
    assert health["pages"]["pages"] == len(pages)
    assert health["pages"]["titles"] == len({p.title for p in pages})


def test_windows_tile_a_page_with_empty_untitled_and_oddly_spaced_passages(tmp_path: Path) -> None:
    """Corpus shapes the shared corpus lacks: a passage with an empty text, one without a title
    line, runs of spaces at a passage's edges, a repeated id (the first opens), a quoted title."""
    contents = [
        ("p0", '"A"\nalpha beta'),
        ("p1", '"A"\n'),
        ("p2", '"A"\n  gamma   delta  '),
        ("p3", "no title line here"),
        ("p4", '"B "quoted" title"\none'),
        ("p5", '"A"\nsecond run'),
        ("p0", '"C"\nrepeated id'),
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": c}) + "\n" for i, c in contents))
    write_docstore(iter_corpus(corpus), tmp_path)
    index = PageIndex(DocStore(tmp_path))
    pages = corpus_pages(corpus)
    assert index.pages == len(pages) == 5 and index.titles == 4
    for number, page in enumerate(pages):
        words = page.text.split()
        for length in (1, 2, 3):
            offset, texts, spanned = 0, [], []
            while offset is not None:
                window = index.window(number, offset, length)
                assert window.text.split() == words[offset : offset + length]
                texts.append(window.text)
                spanned += window.chunk_ids
                offset = window.next_offset
            assert "".join(texts) == page.text
            assert set(spanned) <= set(page.ids)
    assert index.open(None, "A", 0, 9)["text"] == "alpha beta    gamma   delta  "
    assert index.open(None, 'B "quoted" title', 0, 9)["text"] == "one"
    assert index.open("p0", None, 0, 9)["title"] == "A"  # the first passage with that id
    assert index.open(None, "no title line here", 0, 9)["text"] == "no title line here"
    assert index.open("p5", None, 0, 9) | {"text": None} == {
        "found": True, "title": "A", "text": None, "offset": 0, "words": 2, "total_words": 2,
        "next_offset": None, "chunk_ids": ["p5"], "id_offset": 0, "title_pages": 2,
    }  # fmt: skip


# --- bad input: 4xx naming the field (the /retrieve abuse tests, for /open_page) ----------------

OK_ITEM = {"title": "x"}
BAD_INPUTS = [
    (b"{not json", "body"),
    (b'["pages"]', "body"),
    ({}, "pages"),
    ({"pages": {"title": "x"}}, "pages"),
    ({"pages": []}, "pages"),
    ({"pages": [OK_ITEM] * (MAX_ITEMS + 1)}, "pages"),
    ({"pages": [OK_ITEM], "topk": 3}, "topk"),
    ({"pages": ["Paris"]}, "pages[0]"),
    ({"pages": [{}]}, "pages[0]"),
    ({"pages": [{"offset": 3}]}, "pages[0]"),
    ({"pages": [{"title": "a", "id": "b"}]}, "pages[0]"),
    ({"pages": [{"title": "a", "page": 2}]}, "pages[0].page"),
    ({"pages": [{"title": 5}]}, "pages[0].title"),
    ({"pages": [{"title": None}]}, "pages[0].title"),
    ({"pages": [{"id": "   "}]}, "pages[0].id"),
    ({"pages": [{"title": "x" * (MAX_CHARS + 1)}]}, "pages[0].title"),
    ({"pages": [{"title": "x", "offset": -1}]}, "pages[0].offset"),
    ({"pages": [{"title": "x", "offset": "3"}]}, "pages[0].offset"),
    ({"pages": [{"title": "x", "offset": True}]}, "pages[0].offset"),
    ({"pages": [{"title": "x", "offset": 1.5}]}, "pages[0].offset"),
    ({"pages": [{"title": "x", "length": 0}]}, "pages[0].length"),
    ({"pages": [{"title": "x", "length": MAX_WORDS + 1}]}, "pages[0].length"),
    ({"pages": [{"title": "x", "length": 10**30}]}, "pages[0].length"),
    ({"pages": [{"title": "x", "length": None}]}, "pages[0].length"),
    ({"pages": [OK_ITEM, {"id": "y", "length": 0}]}, "pages[1].length"),
]


@pytest.mark.parametrize(("body", "field"), BAD_INPUTS)
def test_bad_input_gets_4xx_naming_the_field_then_the_server_still_serves(page_server, pages, body, field):
    status, err = _post(page_server.url, body)
    assert 400 <= status < 500, err
    assert err["field"] == field and err["error"]
    (ok,) = _open(page_server.url, {"title": pages[0].title})
    assert ok["found"] is True


def test_open_page_answers_503_while_loading_and_501_without_a_page_index(page_corpus) -> None:
    _, index = page_corpus
    backend = open_backend(index, "bm25")

    async def run() -> tuple[int, int, int]:
        gate = asyncio.Event()

        async def status_of(service: RetrieverService, wait_ready: bool) -> int:
            server = TestServer(create_app(service))
            await server.start_server()
            try:
                for _ in range(200 if wait_ready else 0):
                    if service.status == "ready":
                        break
                    await asyncio.sleep(0.02)
                async with aiohttp.ClientSession() as session:
                    url = str(server.make_url("/open_page"))
                    async with session.post(url, json={"pages": [{"title": "x"}]}) as resp:
                        return resp.status
            finally:
                gate.set()
                await server.close()

        loop = asyncio.get_running_loop()

        def slow_backend():  # the injected fault: a backend that is still loading
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(30)
            return backend

        config = ServerConfig(access_log=None)
        loading = await status_of(RetrieverService(config, slow_backend, load_pages=lambda: None), False)
        no_pages = await status_of(RetrieverService(config, lambda: backend), True)
        with_pages = await status_of(
            RetrieverService(config, lambda: backend, load_pages=lambda: PageIndex(DocStore(index))), True
        )
        return loading, no_pages, with_pages

    assert asyncio.run(run()) == (503, 501, 200)


# --- the tool ------------------------------------------------------------------------------------


def test_the_tool_reads_windows_through_the_dispatcher_in_one_request_for_calls_that_arrive_together(
    page_server, pages
) -> None:
    page = max(pages, key=lambda p: len(p.ids))
    tool = PageReaderTool(url=page_server.url + "/open_page", length=40, max_length=MAX_WORDS)
    dispatcher = ToolDispatcher([tool], "observe")
    access_log = page_server.log_path.with_suffix(".access.jsonl")
    before = access_log.read_text().count('"/open_page"')

    async def run():
        try:
            return await asyncio.gather(
                dispatcher.call("t1", "open_page", {"title": page.title}),
                dispatcher.call("t2", "open_page", {"id": page.ids[3], "offset": 40, "length": 25}),
                dispatcher.call("t3", "open_page", {"title": "No Such Title"}),
            )
        finally:
            await tool.close()

    first, second, missing = asyncio.run(run())
    words = page.text.split()
    total, fourth_starts = len(words), sum(len(t.split()) for t in page.texts[:3])
    assert first.result.text.startswith(f'Page "{page.title}", words 0-39 of {total} (next offset: 40).\n')
    assert first.result.text.split("\n", 1)[1].split() == words[:40]
    assert first.result.metrics == {"open_page/words": 40.0, "open_page/not_found": 0.0}
    assert second.result.text.split("\n", 1)[1].split() == words[40:65]
    assert f"the passage you opened starts at word {fourth_starts}" in second.result.text
    assert missing.result.text == "Error: no page titled 'No Such Title'."
    assert missing.result.metrics["open_page/not_found"] == 1.0
    records = [json.loads(ln) for ln in access_log.read_text().splitlines() if '"/open_page"' in ln]
    assert len(records) == before + 1 and records[-1]["queries"] == 3  # three calls, one request


def test_calls_off_the_schema_never_reach_the_server_and_a_dead_server_is_an_error_observation(
    page_server,
) -> None:
    tool = PageReaderTool(url=page_server.url, max_length=MAX_WORDS)
    dead = PageReaderTool(url=f"http://127.0.0.1:{free_port()}/open_page", timeout_s=0.5, max_retries=1)
    dispatcher = ToolDispatcher([tool], "observe")

    async def run():
        try:
            both = await dispatcher.call("t", "open_page", {"title": "a", "id": "b"})
            too_long = await dispatcher.call("t", "open_page", {"title": "a", "length": MAX_WORDS + 1})
            negative = await dispatcher.call("t", "open_page", {"title": "a", "offset": -1})
            down = await ToolDispatcher([dead], "observe").call("t", "open_page", {"title": "a"})
            return both, too_long, negative, down
        finally:
            await tool.close()
            await dead.close()

    both, too_long, negative, down = asyncio.run(run())
    assert both.invalid == too_long.invalid == negative.invalid == "schema"
    assert "length" in too_long.error and "offset" in negative.error
    assert down.result is None and dead.url in down.error and "unavailable" in down.error


def test_the_client_takes_the_endpoint_url_or_the_services_root(page_server) -> None:
    assert RetrieverClient(page_server.url + "/open_page").base_url == page_server.url
    assert RetrieverClient(page_server.url + "/retrieve/").base_url == page_server.url

    async def run():
        async with RetrieverClient(page_server.url) as client:
            return await client.open_pages([{"title": "No Such Title"}]), await client.open_pages([])

    assert asyncio.run(run()) == ([{"found": False, "error": "no page titled 'No Such Title'"}], [])
