"""Agent Lumos QA tools (KnowledgeQuery, ParagraphRetrieve, QA, Calculator, Code), run offline.

Action syntax, as in Lumos's QA annotations and evaluation scripts (allenai/lumos `data/incontext.py`,
`eval/hotpotqa/run_eval.py`):

    R1 = KnowledgeQuery(Zorvath Keep)
    R2 = ParagraphRetrieve(R1, Query: When was Zorvath Keep founded?)
    R3 = QA([R2], Question: When was Zorvath Keep founded?)
    R7 = Calculator(R6 > R3)

ParagraphRetrieve's query follows `, Query: ` and QA's question follows `, Question: ` (the last
such marker, since the substituted context comes first); QA's contexts are a bracketed list of
`R#` (brackets optional). The executor substitutes each `R#` by its value before a tool runs.
Where we differ from Lumos, and why:
- A value is text: KnowledgeQuery gives the page's paragraphs one per line, ParagraphRetrieve the
  chosen ones the same way, QA the bare answer (Lumos: "Question: ...; Answer: X"), so later
  actions and the metrics read the answer itself.
- Calculator compares numbers and answers "yes" or "no". Lumos's annotations write `= True`, but its
  StrategyQA script turns the last value into yes/no with GPT-3.5 ("Must answer yes/no.") before
  looking for "yes"; with no such reader here the comparison says yes/no itself. Otherwise it is
  the maths Calculator (the same parser: model text is never evaluated).
- Code is listed, as in Lumos's tool list, and refused (model text is never run).
- The reader raises a ToolError instead of answering "No answer", so the trace says why.
- A query or question over `MAX_QUERY_CHARS` is refused: model text is hostile input, and the
  ranking and reading costs grow with it (contexts are bounded by the executor's input limit).
  So is a ParagraphRetrieve over more than `MAX_PARAGRAPHS` paragraphs: 45,000 one-letter lines
  cost BM25 0.2-0.3 s of CPU, a quarter of the call's time limit, so a busy machine timed out where
  an idle one answered; a refusal is the same whatever the load.

The knowledge comes from a `QABackend`. The embedded default, `LocalQA` over the bundled world
(`coalign.tools.qa_world`), finds pages by title or BM25, ranks paragraphs with BM25 and answers
with `extract_answer`, a deterministic reader made for that world's templated sentences. For paper-
scale runs, implement the three methods over Wikipedia and an LLM and register the tools:

    executor.DOMAINS["qa"] = qa_tools(lambda: WikipediaQA(...))

where `page` looks the query up in a Wikipedia dump index (or the search API, as Lumos does, keeping
its first ~40 sentences), `retrieve` ranks with DPR as Lumos does (or reuses `LocalQA.retrieve`'s
BM25, top 5 as in Lumos), and `answer` asks an LLM with Lumos's QA prompt ("Please answer the
following question according to the context. Please answer with one brief entity, beginning with
'Answer: '...") and returns the text after "Answer: ". The factory is called once, at first use.
Each tool call gets `executor.ACTION_TIMEOUT_S` (1 s) of wall-clock time: raise it for remote calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from functools import cache
from typing import Protocol

from rank_bm25 import BM25Plus

from coalign.formats.answers import squad_normalize
from coalign.tools import maths
from coalign.tools.maths import ToolError
from coalign.tools.qa_world import bundled_world

QUERY_MARK = ", Query: "
QUESTION_MARK = ", Question: "
MAX_QUERY_CHARS = 2_000  # a KnowledgeQuery query, a ParagraphRetrieve query or a QA question (contexts may be long)
MAX_PARAGRAPHS = 1_000  # one ParagraphRetrieve's choices (Lumos ranks ~40 sentences of one page)

Tool = Callable[[str], tuple[str, ...]]


class QABackend(Protocol):
    """Where the QA tools get knowledge and answers (the offline default: `LocalQA`)."""

    def page(self, query: str) -> list[str]:
        """KnowledgeQuery: the paragraphs of the page that best matches the query (an entity name)."""
        ...

    def retrieve(self, paragraphs: Sequence[str], query: str) -> list[str]:
        """ParagraphRetrieve: the paragraphs most relevant to the query, best first."""
        ...

    def answer(self, context: str, question: str) -> str:
        """QA: a short answer to the question read from the context; ToolError when it holds none."""
        ...


# --------------------------------------------------------------------------- text

_STOPWORDS = frozenset(
    "a an the is are was were be been of in on at to for by with and or which what who whom whose when where how "
    "does do did has have had it its that this as from many much there".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ing", "ed", "er", "est", "es", "s")


def _stem(word: str) -> str:
    """A crude suffix strip so `founded`/`founder`, `taller`/`tall`, `climbed`/`climb` meet."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Content words of a text, lowercased and stemmed, in order (what BM25 and the reader compare)."""
    return [_stem(w) for w in _WORD.findall(text.lower().replace(",", "")) if w not in _STOPWORDS]


_SENTENCE_END = re.compile(r"(?<=[.!?])[\s,]+|\n+")  # `[R2, R4]` joins paragraphs with ", "


def _sentences(context: str) -> list[str]:
    return [s.strip(" ,;[]") for s in _SENTENCE_END.split(context) if s.strip(" ,;[]")]


def _paragraphs(context: str) -> list[str]:
    return [line.strip() for line in context.strip().strip("[]").splitlines() if line.strip()]


# --------------------------------------------------------------------------- the extractive reader

_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b")
MAX_NUMBER_CHARS = 100
_NUMBER = re.compile(r"\b[0-9]{1,3}(?:,[0-9]{3})+\b|\b[0-9]+(?:\.[0-9]+)?\b")
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.I)
_OR = re.compile(r"(?<=\s)or(?=\s)")
# comparative word -> (pick the larger value?, compares dates?)
_COMPARATIVES: dict[str, tuple[bool, bool]] = {
    **dict.fromkeys(("first", "earlier", "earliest", "older", "oldest", "sooner"), (False, True)),
    **dict.fromkeys(("later", "last", "latest", "younger", "youngest", "newer", "newest"), (True, True)),
    **dict.fromkeys(("taller", "higher", "larger", "bigger", "more", "greater", "longer"), (True, False)),
    **dict.fromkeys(("shorter", "lower", "smaller", "fewer", "less"), (False, False)),
}
# comparatives that name their measure only by implication ("Who is shorter" asks about height)
_MEASURED = {
    **dict.fromkeys(("taller", "shorter", "higher", "lower"), "tall height"),
    **dict.fromkeys(("older", "oldest", "younger", "youngest", "newer", "newest"), "born founded"),
}


def _answer_kind(question: str) -> str:
    """The kind of span a question wants ("year", "number" or "name"), from its wording."""
    q = question.lower().strip()
    if q.startswith("when") or "what year" in q or "which year" in q:
        return "year"
    if q.startswith("how ") or "population" in q or "number of" in q:
        return "number"
    return "name"


def _span(sentence: str, kind: str, question: str) -> str | None:
    """The first span of the wanted kind that the question does not already say."""
    asked = set(terms(question))
    if kind in ("year", "number"):
        pattern = _YEAR if kind == "year" else _NUMBER
        return next((m[0] for m in pattern.finditer(sentence) if m[0] not in question), None)
    for match in _NAME.finditer(sentence):
        name = _LEADING_ARTICLE.sub("", match[0])
        words = terms(name)
        if words and not set(words) <= asked:
            return name
    return None


def _ranked(sentences: list[str], words: set[str]) -> list[str]:
    """Sentences sharing words with the question, most shared first (ties keep context order)."""
    scored = [(len(words & set(terms(s))), i, s) for i, s in enumerate(sentences)]
    return [s for score, _, s in sorted(scored, key=lambda x: (-x[0], x[1])) if score > 0]


def _choice(question: str) -> tuple[str, str, str] | None:
    """(ask, A, B) of "ask, A or B?": the options follow the last comma and part at their first "or".

    Splits, not one regex: a pattern of lazy groups around the comma and the "or" backtracks for a time
    that grows with a power of the length (44 s on 90,000 characters of "or or ..."), inside one C call
    that no timer can stop.
    """
    ask, comma, options = question.rpartition(",")
    options = options.strip()
    if not comma or not ask or not options.endswith("?"):
        return None
    options = options[:-1].rstrip()
    split = _OR.search(options)
    if split is None:
        return None
    return ask, options[: split.start()].strip(), options[split.end() :].strip()


def _value(text: str) -> Fraction:
    digits = text.replace(",", "")
    if len(digits) > MAX_NUMBER_CHARS:  # Fraction() parses through int(), which stops at 4,300 digits
        raise ToolError(f"a number in the context is too long to compare ({len(digits)} characters)")
    return Fraction(digits)


def _choose(sentences: list[str], ask: str, options: tuple[str, str]) -> str:
    """Which of two options has the larger or smaller value named by `ask` ("Which was founded first")."""
    words = ask.lower().split()
    comparative = next((w for w in words if w in _COMPARATIVES), None)
    if comparative is None:
        raise ToolError(f"cannot tell how to compare from {ask!r}")
    larger, dated = _COMPARATIVES[comparative]
    attribute = set(terms(f"{ask} {_MEASURED.get(comparative, '')}"))
    values = []
    for option in options:
        mention = re.compile(rf"\b{re.escape(option)}\b", re.I)
        about = [s for s in sentences if mention.match(_LEADING_ARTICLE.sub("", s))]  # sentences it begins
        others = [s for s in sentences if mention.search(s) and s not in about]
        ranked = _ranked(about, attribute) + _ranked(others, attribute)
        spans = (_span(s, "year" if dated else "number", option) for s in ranked)
        found = next((span for span in spans if span is not None), None)
        if found is None:
            raise ToolError(f"the context gives no value for {option!r}")
        values.append(_value(found))
    if values[0] == values[1]:
        raise ToolError(f"{options[0]!r} and {options[1]!r} have the same value")
    return options[(values[1] > values[0]) == larger]


def extract_answer(context: str, question: str) -> str:
    """A short answer span from the context: a year, a number or a name, or the option of an
    "A or B?" question whose value wins the comparison ("Which was founded first, A or B?").

    The sentence sharing most content words with the question is read first; an answer never
    repeats what the question says. Made for the bundled world's templated sentences; a real
    corpus needs an LLM reader (see the module docstring).
    """
    sentences = _sentences(context)
    choice = _choice(question.strip())
    if choice is not None:
        ask, first, second = choice
        return _choose(sentences, ask, (_LEADING_ARTICLE.sub("", first), _LEADING_ARTICLE.sub("", second)))
    kind = _answer_kind(question)
    for sentence in _ranked(sentences, set(terms(question))):
        span = _span(sentence, kind, question)
        if span is not None:
            return span
    raise ToolError(f"no answer to {question!r} in the context")


# --------------------------------------------------------------------------- the offline backend


class LocalQA:
    """A local corpus of pages: title or BM25 page lookup, BM25 paragraph ranking, `extract_answer`."""

    def __init__(self, pages: Mapping[str, Sequence[str]], top_k: int = 1) -> None:
        """`top_k` paragraphs come back from ParagraphRetrieve (the bundled pages hold one fact per
        paragraph, so one suffices; Lumos keeps 5 of a Wikipedia page)."""
        if not pages:
            raise ValueError("a corpus needs at least one page")
        self.titles = list(pages)
        self.pages = {title: list(paragraphs) for title, paragraphs in pages.items()}
        self.by_title = {squad_normalize(title): title for title in self.titles}
        self.page_terms = [terms(" ".join([title, *self.pages[title]])) or [""] for title in self.titles]
        self.index = BM25Plus(self.page_terms)
        self.top_k = top_k

    def page(self, query: str) -> list[str]:
        """The page titled `query` (case, punctuation and articles aside), else the best BM25 match."""
        title = self.by_title.get(squad_normalize(query))
        if title is not None:
            return self.pages[title]
        words = terms(query)
        scores = self.index.get_scores(words) if words else []
        best = max(range(len(self.titles)), key=lambda i: (scores[i], -i)) if words else 0
        if not set(words) & set(self.page_terms[best]):
            raise ToolError(f"no page matches {query!r}")
        return self.pages[self.titles[best]]

    def retrieve(self, paragraphs: Sequence[str], query: str) -> list[str]:
        if not paragraphs:
            raise ToolError("ParagraphRetrieve got no paragraphs to choose from")
        scores = BM25Plus([terms(p) or [""] for p in paragraphs]).get_scores(terms(query))
        order = sorted(range(len(paragraphs)), key=lambda i: (-scores[i], i))
        return [paragraphs[i] for i in order[: self.top_k]]

    def answer(self, context: str, question: str) -> str:
        return extract_answer(context, question)


@cache
def bundled_backend() -> LocalQA:
    """`LocalQA` over the bundled world's pages, built at first use (well under a second)."""
    return LocalQA(bundled_world().pages)


# --------------------------------------------------------------------------- tools


def _query(text: str) -> str:
    """The query or question, stripped; refused when longer than a question can be, which also bounds
    the work that ranking and reading it costs."""
    text = text.strip()
    if len(text) > MAX_QUERY_CHARS:
        raise ToolError(f"query too long ({len(text)} characters, limit {MAX_QUERY_CHARS})")
    return text


def _split(argument: str, mark: str, tool: str, usage: str) -> tuple[str, str]:
    context, found, text = argument.rpartition(mark)
    if not found or not context.strip() or not text.strip():
        raise ToolError(f"{tool} takes {usage}")
    return context, _query(text)


def calculator(argument: str) -> tuple[str]:
    """Calculator(formula): "yes"/"no" for a comparison of numbers (`R6 > R3`), else the maths Calculator."""
    holds = maths.comparison(argument)
    return maths.calculator(argument) if holds is None else ("yes" if holds else "no",)


def qa_tools(backend: Callable[[], QABackend]) -> dict[str, Tool]:
    """The Lumos QA tool set over the backend that `backend()` returns (called at each use; cache it)."""

    def knowledge_query(argument: str) -> tuple[str]:
        if not argument.strip():
            raise ToolError("KnowledgeQuery takes a query (an entity name)")
        return ("\n".join(backend().page(_query(argument))),)

    def paragraph_retrieve(argument: str) -> tuple[str]:
        context, query = _split(argument, QUERY_MARK, "ParagraphRetrieve", "(context, Query: question)")
        paragraphs = _paragraphs(context)
        if len(paragraphs) > MAX_PARAGRAPHS:
            raise ToolError(f"{len(paragraphs):,} paragraphs to rank (limit {MAX_PARAGRAPHS:,})")
        return ("\n".join(backend().retrieve(paragraphs, query)),)

    def qa(argument: str) -> tuple[str]:
        context, question = _split(argument, QUESTION_MARK, "QA", "([context, ...], Question: question)")
        return (backend().answer(context.strip().strip("[]"), question),)

    return {
        "KnowledgeQuery": knowledge_query,
        "ParagraphRetrieve": paragraph_retrieve,
        "QA": qa,
        "Calculator": calculator,
        "Code": maths.code,
    }


TOOLS: dict[str, Tool] = qa_tools(bundled_backend)
