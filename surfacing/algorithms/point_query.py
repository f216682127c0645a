"""factual:point-query over the graph: which entities a query names, and how relevant their mentions are.

The point query is graph-only: a short lookup ("Caroline", "show Bob Smith", "list
JWT") is answered from the graph around the entity it names instead of from vector search, which would
drown a single entity in loosely similar text. Conversation ingestion keeps one ``entity`` memory per
entity key (``subject`` = the key from ``memories.algorithms.entities``) with a MENTIONS edge from every
turn that names it, so the candidates are the entity memory and the memories joined to it by MENTIONS
(or MENTIONED_IN) edges.

Keys: the entities ``extract_entities`` finds in the query, then the whole query as one key once a
leading lookup word (list, show, get, find, all) and "the" are dropped. The second catches the most
common point query, a bare name: "Caroline" alone is a capitalised word starting a sentence, which the
extractor does not take for a name.

Relevance (in [0, 1], multiplied into the composite like any relevance): the entity memory 1.0 (the
query names it exactly); a mention ``damping ** hops`` (0.5 at one hop with the default
``spread_damping``, the score spreading gives a neighbour of a fully relevant seed), or its own lexical
score when higher, so a mention that also matches the query's words is never ranked below one that
does not.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import numpy.typing as npt

from graph.algorithms import edge_type_code
from memories.algorithms.entities import extract_entities

__all__ = [
    "ENTITY_RELEVANCE",
    "MENTION_EDGE_CODES",
    "entity_keys",
    "mention_relevance",
]

ENTITY_RELEVANCE = 1.0
MENTION_EDGE_CODES: frozenset[int] = frozenset({edge_type_code("MENTIONS"), edge_type_code("MENTIONED_IN")})
"""Edge types that join an entity to the memories naming it (either direction)."""

_DROPPED_WORDS = frozenset({"list", "show", "get", "find", "all", "the"})
_MAX_KEY_CHARS = 200  # Memory.subject holds 200 characters; a longer phrase cannot be an entity key.


def _key(text: str) -> str:
    # The normalisation of entity keys: NFKC, lower case, single spaces.
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def entity_keys(query: str) -> list[str]:
    """Entity keys ``query`` may name, most specific first, without duplicates (see the module docstring)."""
    keys = [e.key for e in extract_entities(query)]
    words = query.replace(",", " ").split()
    while words and words[0].lower() in _DROPPED_WORDS:
        words = words[1:]
    phrase = _key(" ".join(words))
    if phrase:
        keys.append(phrase)
    return [k for k in dict.fromkeys(keys) if len(k) <= _MAX_KEY_CHARS]


def mention_relevance(lexical: npt.ArrayLike, hops: npt.ArrayLike, damping: float) -> npt.NDArray[np.float64]:
    """``max(lexical, damping ** hops * ENTITY_RELEVANCE)`` per memory reached from a named entity.

    ``lexical`` is the normalised lexical score (0 for memories the full-text search did not return),
    ``hops`` the distance from the entity (0 for the entity memory itself).
    """
    lex = np.asarray(lexical, dtype=np.float64)
    graph = np.power(float(damping), np.asarray(hops, dtype=np.float64)) * ENTITY_RELEVANCE
    return np.maximum(lex, graph)
