"""Lumos QA tools: the action syntax, the offline backend (BM25 + extractive reader), plugging in another,
and hostile model text run against the bundled world."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalign.formats.lumos import TOOL_PREAMBLES, grounder_prompt
from coalign.tools import executor, qa
from coalign.tools.executor import MAX_VALUE_CHARS, Trace, execute
from coalign.tools.maths import ToolError
from coalign.tools.qa import LocalQA, extract_answer, qa_tools, terms
from coalign.tools.qa_world import bundled_world

PAGES = {
    "Orvel Guild": (
        "The Orvel Guild is a guild of craftspeople with its headquarters in the city of Brennholt.",
        "The Orvel Guild was founded in 1821 by Kalone Vastrid.",
        "The Orvel Guild has 4,300 employees.",
    ),
    "Kalone Vastrid": (
        "Kalone Vastrid is a painter known for bridges.",
        "Kalone Vastrid was born in 1790 in the city of Brennholt.",
        "Kalone Vastrid is 182 centimetres tall.",
    ),
    "Brennholt": (
        "Brennholt is a city in the country of Velmora. It is known for its old market.",
        "Brennholt was founded in 1460.",
        "Brennholt has a population of 48,200.",
    ),
    "Mount Tesk": ("Mount Tesk is a mountain in the country of Velmora.", "Mount Tesk is 4,210 metres tall."),
}


@pytest.fixture
def corpus(monkeypatch: pytest.MonkeyPatch) -> LocalQA:
    backend = LocalQA(PAGES)
    monkeypatch.setitem(executor.DOMAINS, "qa", qa_tools(lambda: backend))
    return backend


def test_lumos_chain_fetches_a_fact(corpus: LocalQA) -> None:
    trace = execute(
        "R1 = KnowledgeQuery(Orvel Guild); R2 = ParagraphRetrieve(R1, Query: When was the Orvel Guild founded?); "
        "R3 = QA([R2], Question: When was the Orvel Guild founded?)",
        domain="qa",
    )
    assert trace.error is None
    assert trace.steps[0].outputs["R1"] == "\n".join(PAGES["Orvel Guild"])
    assert trace.steps[1].outputs["R2"] == "The Orvel Guild was founded in 1821 by Kalone Vastrid."
    assert trace.answer == "1821"


def test_a_bridge_names_the_earlier_answer_by_reference(corpus: LocalQA) -> None:
    trace = execute(
        "R1 = KnowledgeQuery(Orvel Guild); R2 = ParagraphRetrieve(R1, Query: Who founded the Orvel Guild?); "
        "R3 = QA([R2], Question: Who founded the Orvel Guild?); R4 = KnowledgeQuery(R3); "
        "R5 = ParagraphRetrieve(R4, Query: How tall is R3?); R6 = QA([R5], Question: How tall is R3?); "
        "R7 = KnowledgeQuery(Brennholt); R8 = ParagraphRetrieve(R7, Query: When was Brennholt founded?); "
        "R9 = QA([R8], Question: When was Brennholt founded?); R10 = Calculator(R6 > R9)",
        domain="qa",
    )
    values = {name: value for step in trace.steps for name, value in step.outputs.items()}
    assert (values["R3"], values["R6"], values["R9"]) == ("Kalone Vastrid", "182", "1460")
    assert values["R5"] == "Kalone Vastrid is 182 centimetres tall."
    assert trace.answer == "no"


def test_qa_compares_two_contexts_for_an_or_question(corpus: LocalQA) -> None:
    trace = execute(
        "R1 = KnowledgeQuery(Brennholt); R2 = ParagraphRetrieve(R1, Query: When was Brennholt founded?); "
        "R3 = KnowledgeQuery(the Orvel Guild); R4 = ParagraphRetrieve(R3, Query: When was the Orvel Guild founded?); "
        "R5 = QA([R2, R4], Question: Which was founded later, Brennholt or the Orvel Guild?)",
        domain="qa",
    )
    assert trace.answer == "Orvel Guild"


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("When was the Orvel Guild founded?", "1821"),
        ("Who founded the Orvel Guild?", "Kalone Vastrid"),
        ("In which city does the Orvel Guild have its headquarters?", "Brennholt"),
        ("How many employees does the Orvel Guild have?", "4,300"),
        ("Where was Kalone Vastrid born?", "Brennholt"),
        ("When was Kalone Vastrid born?", "1790"),
        ("How tall is Kalone Vastrid?", "182"),
        ("In which country is Brennholt?", "Velmora"),
        ("What is the population of Brennholt?", "48,200"),
        ("How tall is Mount Tesk?", "4,210"),
        ("Which was founded first, the Orvel Guild or Brennholt?", "Brennholt"),
        ("Which was founded later, the Orvel Guild or Brennholt?", "Orvel Guild"),
        ("Which is shorter, Mount Tesk or Kalone Vastrid?", "Kalone Vastrid"),  # "shorter" reads the heights
        ("Which is taller, Mount Tesk or Kalone Vastrid?", "Mount Tesk"),
        # "older" reads the dates; Brennholt's own sentence wins over "born ... in the city of Brennholt"
        ("Which is older, the Orvel Guild or Brennholt?", "Brennholt"),
    ],
)
def test_extractive_reader_on_a_whole_corpus(question: str, answer: str) -> None:
    context = "\n".join(p for page in PAGES.values() for p in page)
    if " or " not in question:  # wh- questions read one page, as after KnowledgeQuery
        context = "\n".join(next(page for title, page in PAGES.items() if title.split()[-1] in question))
    assert extract_answer(context, question) == answer


@pytest.mark.parametrize(
    ("context", "question", "problem"),
    [
        ("Brennholt was founded in 1460.", "Who painted the Velmora bridge?", "no answer"),
        ("Brennholt was founded in 1460.", "Where is it, Brennholt or Velmora?", "how to compare"),
        ("Brennholt was founded in 1460.", "Which was founded first, Brennholt or Velmora?", "no value for 'Velmora'"),
        ("A was founded in 1460. B was founded in 1460.", "Which was founded first, A or B?", "same value"),
    ],
)
def test_reader_refuses_rather_than_guessing(context: str, question: str, problem: str) -> None:
    with pytest.raises(ToolError, match=problem):
        extract_answer(context, question)


def test_page_lookup_by_title_then_bm25() -> None:
    backend = LocalQA(PAGES)
    assert backend.page("the ORVEL guild.") == list(PAGES["Orvel Guild"])  # case, article, punctuation aside
    assert backend.page("Tesk") == list(PAGES["Mount Tesk"])  # not a title: the best BM25 page
    assert backend.page("painter Vastrid") == list(PAGES["Kalone Vastrid"])
    with pytest.raises(ToolError, match="no page matches 'Zorvath Keep'"):
        backend.page("Zorvath Keep")


def test_retrieve_ranks_paragraphs_by_bm25_and_keeps_top_k() -> None:
    paragraphs = list(PAGES["Kalone Vastrid"])
    assert LocalQA(PAGES).retrieve(paragraphs, "How tall is Kalone Vastrid?") == [paragraphs[2]]
    two = LocalQA(PAGES, top_k=2).retrieve(paragraphs, "When was the painter born?")
    assert len(two) == 2 and set(two) == {paragraphs[0], paragraphs[1]}


def test_terms_drop_question_words_and_meet_across_suffixes() -> None:
    assert terms("Who founded the Orvel Guild?") == ["found", "orvel", "guild"]
    assert terms("Which is taller?") == terms("tall")
    assert terms("48,200 people") == ["48200", "people"]


@pytest.mark.parametrize(
    ("formula", "value"),
    [("1821 > 1460", "yes"), ("(182) < (1460)", "yes"), ("4,300 >= 4,301", "no"), ("2 = 2", "yes"), ("6 / 4", "1.5")],
)
def test_calculator_answers_comparisons_yes_or_no_and_computes_otherwise(formula: str, value: str) -> None:
    assert qa.calculator(formula) == (value,)


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        ("R1 = Calculator(Brennholt > 3)", "numbers on both sides"),
        ("R1 = ParagraphRetrieve(some text)", "ParagraphRetrieve takes (context, Query: question)"),
        ("R1 = QA([some text], Query: Who?)", "QA takes ([context, ...], Question: question)"),
        ("R1 = KnowledgeQuery( )", "KnowledgeQuery takes a query"),
        ("R1 = Code(def f(): pass)", "Code is not supported"),
        ("R1 = Search(Brennholt)", "unknown tool 'Search'"),
    ],
)
def test_malformed_actions_are_recorded_not_raised(corpus: LocalQA, actions: str, error: str) -> None:
    trace = execute(actions, domain="qa")
    assert trace.answer is None and error in trace.error


def test_another_backend_plugs_in_behind_the_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a Wikipedia + LLM backend would do: the tools only call page, retrieve and answer."""
    calls = []

    class Recorded:
        def page(self, query: str) -> list[str]:
            calls.append(("page", query))
            return ["first paragraph", "second paragraph"]

        def retrieve(self, paragraphs, query: str) -> list[str]:
            calls.append(("retrieve", tuple(paragraphs), query))
            return list(paragraphs[-1:])

        def answer(self, context: str, question: str) -> str:
            calls.append(("answer", context, question))
            return "forty-two"

    backend: qa.QABackend = Recorded()
    monkeypatch.setitem(executor.DOMAINS, "qa", qa_tools(lambda: backend))
    trace = execute("R1 = KnowledgeQuery(X); R2 = ParagraphRetrieve(R1, Query: q?); R3 = QA([R2], Question: q?)", "qa")
    assert trace.answer == "forty-two"
    assert calls == [
        ("page", "X"),
        ("retrieve", ("first paragraph", "second paragraph"), "q?"),
        ("answer", "second paragraph", "q?"),
    ]


def test_the_bundled_domain_reads_the_bundled_world() -> None:
    from coalign.tools.qa_world import bundled_world

    person = bundled_world().of_kind("person")[0]
    trace = execute(f"R1 = KnowledgeQuery({person.name})", domain="qa")
    assert trace.answer == "\n".join(bundled_world().pages[person.name])


def test_the_preamble_is_lumos_wording_and_lists_every_tool() -> None:
    preamble = TOOL_PREAMBLES["qa"]
    assert preamble.startswith("The available action list is 'KnowledgeQuery', 'ParagraphRetrieve', 'QA', ")
    for name in qa.TOOLS:
        assert f"'{name}'" in preamble and f"{name}(" in preamble
    assert "Subgoals to be grounded: Subgoal 1: Find it" in grounder_prompt("Q?", "Subgoal 1: Find it", "qa")


@pytest.mark.parametrize(
    "actions",
    [
        "R1 = KnowledgeQuery({long})",
        "R1 = ParagraphRetrieve(Brennholt was founded in 1460., Query: {long})",
        "R1 = QA([Brennholt was founded in 1460.], Question: {long})",
    ],
)
def test_a_query_longer_than_a_question_is_refused(corpus: LocalQA, actions: str) -> None:
    fits = execute(actions.format(long="Brennholt " * 199), domain="qa")  # 1,989 characters once stripped
    assert "query too long" not in (fits.error or "")
    refused = execute(actions.format(long="Brennholt " * 201), domain="qa")
    assert refused.error.endswith(f"query too long (2009 characters, limit {qa.MAX_QUERY_CHARS})")


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (
            "Which was founded first, the Orvel Guild or Brennholt?",
            ("Which was founded first", "the Orvel Guild", "Brennholt"),
        ),
        ("Who is taller, A, B or C ?", ("Who is taller, A", "B", "C")),  # the options follow the last comma
        ("Which is older, salt or pepper or sugar?", ("Which is older", "salt", "pepper or sugar")),
        ("Which is older, Oregon or Orlando?", ("Which is older", "Oregon", "Orlando")),  # "or" only as a word
        ("Which is older, salt or pepper", None),  # no question mark
        ("Which is older, salt and pepper?", None),
        ("salt or pepper?", None),  # no comma
        (", salt or pepper?", None),  # nothing asked
    ],
)
def test_an_or_question_splits_into_what_is_asked_and_two_options(question: str, parts: tuple | None) -> None:
    assert qa._choice(question) == parts


def test_an_or_question_of_any_length_splits_in_linear_time() -> None:
    """The former one-regex split took 44 s on the first question and minutes on the second."""
    for question in [
        "a, " + "or " * 30_000,
        "a, " + " " * 40_000 + "or" + " " * 40_000 + "b",
        "a, b" + " or" * 30_000 + "?",
    ]:
        start = time.process_time()  # CPU time: a shared CPU must not fail a linear split
        qa._choice(question)
        assert time.process_time() - start < 0.5


# --------------------------------------------------------------------------- hostile model text (bundled world)

PERSON = bundled_world().of_kind("person")[0].name
HOSTILE_QA = {
    "import in a query": "R1 = KnowledgeQuery(__import__('os').system('ls'))",
    "dunder walk in a query": "R1 = KnowledgeQuery(().__class__.__bases__[0].__subclasses__())",
    "format string in a question": f"R1 = KnowledgeQuery({PERSON}); R2 = QA([R1], Question: {{0.__class__}} %s%n?)",
    "code": "R1 = Code(import os; os.system('ls'))",
    "comparison injection": "R1 = Calculator(__import__('os') > 1)",
    "huge comparison": "R1 = Calculator(9^9^9 > 1)",
    "unicode digits in a comparison": "R1 = Calculator(\u0661\u0668\u0662\u0661 > 1460)",
    "fullwidth query": "R1 = KnowledgeQuery(\uff36\uff45\uff52\uff45\uff4c)",
    "bidi and zero-width": f"R1 = KnowledgeQuery(\u202e{PERSON}\u200b)",
    "nul bytes": f"R1 = KnowledgeQuery({PERSON}\x00); R2 = QA([R1\x00], Question: \x00?)",
    "nul query": "R1 = KnowledgeQuery(" + "\x00" * 1000 + ")",
    "long query": "R1 = KnowledgeQuery(" + "word " * 19_000 + ")",
    "one megabyte query": "R1 = KnowledgeQuery(" + "a" * 1_000_000 + ")",
    "one megabyte context": "R1 = QA(" + "A" * 1_000_000 + ", Question: Who?)",
    "long or question": "R1 = QA(x, Question: a, " + "or " * 600 + "?)",
    "deep brackets": f"R1 = QA({'[' * 40_000}{PERSON} was born in 1830.{']' * 40_000}, Question: When was he born?)",
    "marker confusion": "R1 = ParagraphRetrieve(, Query: , Query: , Query: x)",
    "many paragraphs": "R1 = ParagraphRetrieve(" + "x\n" * 45_000 + ", Query: x y z)",
    "newline injection": f"R1 = KnowledgeQuery({PERSON})\nR2 = Code(rm -rf /)",
    "self reference": "R1 = KnowledgeQuery(R1)",
    "unset reference": "R1 = QA([R7], Question: Who?)",
    "empty context": "R1 = QA([], Question: Who?)",
    "reference bomb": f"R1 = KnowledgeQuery({PERSON}); R2 = QA([{', '.join(['R1'] * 5000)}], Question: When?)",
    # each retrieval joins 50 copies of the last into longer paragraphs, until the substitution limit stops it
    "growing references": f"R1 = KnowledgeQuery({PERSON}); "
    + "; ".join(f"R{i} = ParagraphRetrieve([{', '.join([f'R{i - 1}'] * 50)}], Query: born)" for i in range(2, 60)),
    "thousand queries": "; ".join(f"R{i} = KnowledgeQuery({PERSON})" for i in range(1, 1001)),
    "tool name injection": "R1 = __import__(os)",
    "a 5,000-digit value": "R1 = QA(A has " + "1" * 5000 + " men. B has 5 men, Question: Which has more, A or B?)",
}
HOSTILE_QA_LEGAL = {  # hostile-looking but answerable: the answers stay small
    "bidi and zero-width": "\n".join(bundled_world().pages[PERSON]),
    "deep brackets": "1830",
    "marker confusion": ", Query: , Query:",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_QA))
def test_hostile_qa_text_gives_a_trace_with_an_error_quickly(name: str) -> None:
    start = time.process_time()  # CPU time: the work done, whatever else the machine runs
    trace = execute(HOSTILE_QA[name], domain="qa")
    elapsed = time.process_time() - start
    if name in HOSTILE_QA_LEGAL:
        assert (trace.answer, trace.error) == (HOSTILE_QA_LEGAL[name], None)
    else:
        assert trace.answer is None and trace.error
    assert all(len(value) <= MAX_VALUE_CHARS for step in trace.steps for value in step.outputs.values())
    json.dumps(trace.to_json())
    assert elapsed < 2.0, f"{name} took {elapsed:.2f} s"


def test_paragraph_retrieve_ranks_up_to_its_paragraph_limit_and_refuses_one_more() -> None:
    """The limit, not the machine's load, decides: at the limit it answers, past it the error says why."""
    limit = qa.MAX_PARAGRAPHS
    lines = ["filler"] * (limit - 1) + [f"{PERSON} was born in 1830."]
    at_limit = execute("R1 = ParagraphRetrieve(" + "\n".join(lines) + ", Query: born)", domain="qa")
    assert (at_limit.answer, at_limit.error) == (lines[-1], None)
    past = execute("R1 = ParagraphRetrieve(" + "\n".join(["filler", *lines]) + ", Query: born)", domain="qa")
    assert past.answer is None
    assert past.error == f"step 1: ParagraphRetrieve: {limit + 1:,} paragraphs to rank (limit {limit:,})"


QA_PIECES = ["R1 = ", "R2 = ", "R1", "R2", "KnowledgeQuery(", "ParagraphRetrieve(", "QA(", "Calculator(", ")",
             "; ", ", Query: ", ", Question: ", "[", "]", ", ", " or ", "?", "\n", " ", PERSON, "born", "1830", ">",
             "When was ", "Which was born first, "]  # fmt: skip
qa_like = st.lists(st.sampled_from(QA_PIECES), max_size=30).map("".join)


def _consistent(trace: Trace) -> bool:
    """An answer exactly when no step failed, and every step has outputs or an error, never both."""
    steps_ok = all((step.error is None) == bool(step.outputs) for step in trace.steps)
    return steps_ok and (trace.answer is None) == (trace.error is not None)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), qa_like))
def test_any_text_gives_a_qa_trace(text: str) -> None:
    for actions in (text, f"R1 = KnowledgeQuery({text})", f"R1 = QA({text})", f"R1 = ParagraphRetrieve({text})"):
        trace = execute(actions, domain="qa")
        assert isinstance(trace, Trace) and _consistent(trace)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_any_context_and_question_give_a_qa_trace(context: str, question: str) -> None:
    chain = f"R1 = KnowledgeQuery({PERSON}); R2 = ParagraphRetrieve(R1, Query: {question}); "
    chain += f"R3 = QA([R2, {context}], Question: {question}); R4 = Calculator(R3 > 1000)"
    trace = execute(chain, domain="qa")
    assert isinstance(trace, Trace) and _consistent(trace)
