"""Embeddings started while the model is answering are the ones the text gets on its own."""

from __future__ import annotations

import asyncio

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


async def test_a_text_gets_the_same_vector_in_any_batch() -> None:
    texts = [f"Book table {n} for {'a long family dinner with grandparents and ' * (n % 5)}tonight." for n in range(24)]
    alone = [(await embed([text]))[0] for text in texts]
    together = await embed(texts)
    shuffled = await embed(list(reversed(texts)))
    assert together == alone  # bit for bit, not merely close
    assert list(reversed(shuffled)) == alone
    assert len({len(text.split()) for text in texts}) == 5  # lengths that pad to different shapes


async def test_texts_added_while_a_batch_runs_get_their_own_vectors() -> None:
    vectors = TextVectors()
    texts = [f"Refund order O-{n} to the original card." + " Thanks!" * n for n in range(12)]
    try:
        for text in texts:
            vectors.add(text)
            await asyncio.sleep(0)
        found = await vectors.embed(texts)
    finally:
        await vectors.aclose()
    assert found == [(await embed([text]))[0] for text in texts]
