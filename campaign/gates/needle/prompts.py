"""Needle prompts: random-word filler with keys hidden at known depths, as a pure function of a seed.

Three variants per rung:
- ``single``: one key at a seeded depth; asked for by its label.
- ``multi``: five keys at 10, 30, 50, 70 and 90% depth; all five asked for, in order.
- ``decoy``: the real key among four decoys that share its prefix (``4821-7730`` among ``4821-....``),
  each under its own label; asked for the real label only, and any decoy in the reply fails it.

The filler is words drawn from a fixed list by ``random.Random(seed).random()`` (the one part of
``random`` whose sequence Python guarantees across versions), so every case is new text: a prefix
cache cannot help, and the same seed gives the same prompt on every machine. The first N words of a
seed's stream do not depend on N, so sizing a prompt only moves its end and the needles' positions.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["VARIANTS", "NeedleCase", "build_case", "case_seed", "check_reply"]

VARIANTS = ("single", "multi", "decoy")
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
PREAMBLE = ("Below is a text of random words. Hidden in it are sentences that give magic numbers. "
            "Read it, then answer the question after it.\n\n")
LABELS = ("Orion", "Lyra", "Vega", "Draco", "Hydra", "Cygnus", "Aquila", "Perseus", "Carina", "Pavo", "Lupus",
          "Corvus")
WORDS = tuple("""
able acid aged also area army away baby back ball band bank base bath bear beat bell belt bend best bird
blow blue boat body bone book boot born boss both bowl burn bush busy cake calm camp card care cart case
cash cast cell chat chip city clay club coal coat code cold comb cook cool copy corn cost crew crop dark
dawn deal dear deep desk dial diet dirt dish dock door dose down draw drop drum dust duty earn east easy
edge else even ever face fact fair fall farm fast fear feed feel file fill film find fine fire firm fish
flag flat flow folk food foot fork form fort free frog fuel full game gate gift girl glad glue goal gold
golf good gray grow hair half hall hand hang hard harm hate head heal heap hear heat hell help herb hero
hide high hill hint hold hole home hook hope horn host hour huge hunt idea inch iron item jazz join joke
jump jury keen keep kick kind king kite knee knot lady lake lamp land lane last late lawn lead leaf lean
left lens life lift like lime line link lion list load loan lock loft long look loop lord loud love luck
mail main make mall many mark mask meal meat menu mild milk mill mind mine mint miss mood moon moss most
move much nail name navy neck need nest news next nice noon norm nose note oven pace pack page pain pair
palm park part pass path peak pear pick pile pine pink pipe plan play plot plug poem pole pond pool port
post pour pull pump pure push race rack rail rain rank rare rate read rear rent rest rice rich ride ring
rise risk road rock role roof room root rope rose rule rush safe sail salt sand save seat seed self sell
ship shoe shop shot show sick side sign silk sing sink site size skin slow snow soap sock soft soil song
soup sour spot star stay step stem stir suit swim tail tale talk tall tank tape task team tent term test
text tide tile time tiny tool tour town tree trip tube tune turn twin type unit used vast verb very view
vine vote wage wait walk wall warm wash wave weak wear week well west wide wild wind wine wing wire wise
wish wolf wood wool word work yard yarn year zone
""".split())


@dataclass(frozen=True)
class NeedleCase:
    variant: str
    seed: int
    filler_words: int
    messages: list[dict[str, Any]]
    expected: list[str]  # keys the reply must contain (multi: in this order)
    decoys: list[str] = field(default_factory=list)  # keys it must not contain
    labels: list[str] = field(default_factory=list)
    depths: list[float] = field(default_factory=list)

    def tags(self) -> dict[str, Any]:
        return {"variant": self.variant, "seed": self.seed, "filler_words": self.filler_words,
                "expected": self.expected, "decoys": self.decoys, "labels": self.labels, "depths": self.depths}


def case_seed(gate_seed: int, rung: int, variant: str, attempt: int) -> int:
    """A fresh seed per (rung, variant, attempt): a retry is new text, not the same prompt again."""
    digest = hashlib.sha256(f"campaign-needle/{gate_seed}/{rung}/{variant}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def _pick(rng: random.Random, items: tuple[Any, ...] | list[Any]) -> Any:
    return items[int(rng.random() * len(items))]


def _key(rng: random.Random, prefix: int | None = None) -> str:
    head = prefix if prefix is not None else 1000 + int(rng.random() * 9000)
    return f"{head}-{1000 + int(rng.random() * 9000)}"


def _needle(label: str, key: str) -> str:
    return f"The magic number for {label} is {key}."


def build_case(variant: str, seed: int, filler_words: int) -> NeedleCase:
    if variant not in VARIANTS:
        raise ValueError(f"unknown needle variant {variant!r}")
    rng = random.Random(seed)
    labels = list(LABELS)
    chosen: list[str] = []
    while len(chosen) < 5:
        label = _pick(rng, labels)
        labels.remove(label)
        chosen.append(label)
    if variant == "single":
        keys, depths, asked = [_key(rng)], [round(0.1 + 0.8 * rng.random(), 3)], 0
        chosen = chosen[:1]
    elif variant == "multi":
        keys = []
        while len(keys) < 5:
            key = _key(rng)
            if key[:4] not in {k[:4] for k in keys}:
                keys.append(key)
        depths, asked = list(DEPTHS), -1
    else:
        real = _key(rng)
        keys = [real]
        while len(keys) < 5:
            key = _key(rng, int(real[:4]))
            if key not in keys:
                keys.append(key)
        order = list(range(5))
        for i in range(4, 0, -1):  # Fisher-Yates on random(): stable across Python versions
            j = int(rng.random() * (i + 1))
            order[i], order[j] = order[j], order[i]
        keys = [keys[i] for i in order]  # the real key lands at a seeded depth among the decoys
        chosen = [chosen[i] for i in order]
        depths, asked = list(DEPTHS), order.index(0)
    words = _filler(random.Random(seed ^ 0x5EED), filler_words)
    needles = (_needle(label, key) for label, key in zip(chosen, keys, strict=False))
    inserts = sorted(zip((round(d * filler_words) for d in depths), needles, strict=False), key=lambda pair: pair[0])
    pieces: list[str] = []
    cursor = 0
    for position, sentence in inserts:
        pieces += words[cursor:position] + [sentence]
        cursor = position
    pieces += words[cursor:]
    text = " ".join(pieces)
    if variant == "multi":
        question = "The text gives five magic numbers. List all five in the order they appear, one per line."
        expected, decoys = keys, []
    else:
        question = f"What is the magic number for {chosen[asked]}? Reply with the number only."
        expected, decoys = [keys[asked]], [k for i, k in enumerate(keys) if i != asked]
    content = f"{PREAMBLE}{text}\n\nQuestion: {question}"
    return NeedleCase(variant=variant, seed=seed, filler_words=filler_words,
                      messages=[{"role": "user", "content": content}], expected=expected, decoys=decoys,
                      labels=chosen, depths=depths)


def _filler(rng: random.Random, count: int) -> list[str]:
    words = []
    for index in range(count):
        word = _pick(rng, WORDS)
        if index % 10 == 0:
            word = word.capitalize()
        if index % 10 == 9:
            word += "."
        words.append(word)
    return words


def check_reply(variant: str, expected: list[str], decoys: list[str], reply: str) -> tuple[bool, str]:
    """Pass or fail, with the reason, from the reply text alone."""
    if not reply.strip():
        return False, "empty reply"
    if variant == "multi":
        cursor = 0
        for index, key in enumerate(expected):
            found = reply.find(key, cursor)
            if found < 0:
                where = "missing" if key not in reply else "out of order"
                return False, f"key {index + 1} of {len(expected)} ({key}) {where}"
            cursor = found + len(key)
        return True, "all five keys, in order"
    if expected[0] not in reply:
        return False, f"key {expected[0]} not in reply"
    named = [d for d in decoys if d in reply]
    if named:
        return False, f"reply also names decoy {named[0]}"
    return True, "key found" + (", no decoy" if decoys else "")
