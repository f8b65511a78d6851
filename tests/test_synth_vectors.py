"""Embeddings started while the model is answering are the ones the text gets on its own."""

from __future__ import annotations

from harness.llm.embeddings import embed
from synth.vectors import TextVectors

TEXTS = [
    "Cancel order O-1002, please.",
    "Please cancel my order O-1002 and refund it to the card I paid with.",
    "Update my default address to 9 Bay St, Austin, TX.",
]


async def test_early_and_late_vectors_are_each_texts_own() -> None:
    vectors = TextVectors()
    try:
        vectors.add(TEXTS[1])  # started early, as an accepted candidate would be
        found = await vectors.embed(TEXTS)
    finally:
        await vectors.aclose()
    alone = [(await embed([text]))[0] for text in TEXTS]
    assert found == alone
    assert found[0] != found[2]


async def test_closing_stops_what_is_still_pending() -> None:
    vectors = TextVectors()
    for text in TEXTS:
        vectors.add(text)
    await vectors.aclose()
    again = await vectors.embed(TEXTS[:1])  # a closed instance starts afresh
    await vectors.aclose()
    assert again == [(await embed([TEXTS[0]]))[0]]
