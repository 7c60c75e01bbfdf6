"""Write ``corpus.txt``, the text the MegaScope demo model learns from (deterministic).

    python mapp/scope/data/make_corpus.py            # rewrites corpus.txt next to this file

Everything here is made up from templates (no downloaded or copyrighted text). It is chosen
to give a small byte-level model structure worth looking at:

- names introduced early and used again later (attention to an earlier name; "indirect
  object" sentences such as "Mia and Leo went to the park. Leo gave a ball to Mia.");
- words repeated verbatim (copying and induction: "The secret word is zunt. ... zunt.");
- fixed facts (a banana is yellow) asked and answered;
- lists and counting (days, months, numbers) and small sums, where the next token is
  determined by the previous ones.

The paragraphs are shuffled; every paragraph ends with a blank line.

What the demo's short training (600 steps) learns: the templates, spelling, the facts, the
lists and the names of the lists above. Copying a made-up word it has seen only in the prompt
(an induction head) starts to show only at about twice that length: the secret words are
there for the attention patterns, and for longer runs.
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 16
TARGET_BYTES = 420_000
OUT = Path(__file__).with_name("corpus.txt")

NAMES = ["Anna", "Tom", "Mia", "Leo", "Sara", "Ben", "Lily", "Max", "Emma", "Sam", "Nora", "Jack",
         "Ella", "Omar", "Rosa", "Ivan", "Zoe", "Paul", "Lucy", "Hugo"]
PLACES = ["park", "shop", "beach", "school", "garden", "library", "market", "river", "zoo", "farm"]
OBJECTS = ["ball", "book", "apple", "kite", "hat", "cake", "map", "cup", "toy", "flower", "letter", "drum"]
ANIMALS = ["dog", "cat", "bird", "rabbit", "horse", "fish", "duck", "goat"]
PET_NAMES = ["Rex", "Bella", "Pip", "Coco", "Milo", "Daisy", "Bolt", "Nala", "Ziggy", "Pepper"]
HIDING = ["a tree", "the bed", "a box", "the table", "a bush", "the stairs", "a chair", "the bridge"]
FEELINGS = ["happy", "glad", "tired", "proud", "calm"]
COLORS = {"banana": "yellow", "apple": "red", "grass": "green", "sky": "blue", "snow": "white",
          "coal": "black", "orange": "orange", "lemon": "yellow", "cherry": "red", "leaf": "green",
          "sea": "blue", "milk": "white", "plum": "purple", "carrot": "orange"}
SOUNDS = {"dog": "woof", "cat": "meow", "cow": "moo", "duck": "quack", "sheep": "baa", "owl": "hoot",
          "bird": "tweet", "horse": "neigh"}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve"]
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def an(noun: str) -> str:
    """The noun with its indefinite article."""
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def two_names(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    return a, b


def gift_story(rng: random.Random) -> str:
    """Indirect object: the one who receives is the name not repeated."""
    a, b = two_names(rng)
    place, obj = rng.choice(PLACES), rng.choice(OBJECTS)
    template = rng.choice([
        f"{a} and {b} went to the {place}. {b} gave {an(obj)} to {a}.",
        f"When {a} and {b} went to the {place}, {a} gave {an(obj)} to {b}.",
        f"{a} and {b} were at the {place}. {b} had {an(obj)}. {b} gave the {obj} to {a}. {a} said thank you to {b}.",
        f"After school, {a} and {b} walked to the {place}. {a} found {an(obj)} and showed it to {b}.",
    ])
    return template


def pet_story(rng: random.Random) -> str:
    """A name, a pet's name, and both used again several sentences later."""
    who, animal, pet = rng.choice(NAMES), rng.choice(ANIMALS), rng.choice(PET_NAMES)
    place, place2 = rng.sample(PLACES, 2)
    hiding, feeling = rng.choice(HIDING), rng.choice(FEELINGS)
    return (f"{who} had {an(animal)} named {pet}. Every day {who} took {pet} to the {place}. "
            f"One day {pet} ran away. {who} looked for {pet} at the {place2} and found {pet} under "
            f"{hiding}. {who} was {feeling}, and {pet} was {feeling} too.")


def secret_word(rng: random.Random) -> str:
    """A made-up word seen once, then copied: only attention to the first use predicts it."""
    word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(1, 2))) + \
        rng.choice(CONSONANTS)
    a, b = two_names(rng)
    return rng.choice([
        f"The secret word is {word}. {a} said {word}, and {b} said {word} too.",
        f"{a} told {b} a new word: {word}. {b} wrote {word} on a card. The card said {word}.",
        f"Say it again: {word}, {word}, {word}.",
    ])


def color_facts(rng: random.Random) -> str:
    things = rng.sample(sorted(COLORS), 3)
    lines = [f"Q: What color is the {t}? A: The {t} is {COLORS[t]}." for t in things]
    return "\n".join(lines)


def animal_sounds(rng: random.Random) -> str:
    animals = rng.sample(sorted(SOUNDS), 3)
    return " ".join(f"The {a} says {SOUNDS[a]}." for a in animals)


def sums(rng: random.Random) -> str:
    lines = []
    for _ in range(4):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        lines.append(rng.choice([f"{a} + {b} = {a + b}", f"{a} plus {b} is {a + b}."]))
    return "\n".join(lines)


def sequence(rng: random.Random) -> str:
    """A run of a well-known list, from a random start."""
    kind = rng.choice(["days", "months", "count", "words", "letters"])
    if kind == "days":
        start = rng.randrange(7)
        items = [DAYS[(start + i) % 7] for i in range(rng.randint(3, 7))]
        return f"The days go {', '.join(items)}."
    if kind == "months":
        start = rng.randrange(12)
        items = [MONTHS[(start + i) % 12] for i in range(rng.randint(3, 6))]
        return f"Months: {', '.join(items)}."
    if kind == "count":
        start = rng.randint(1, 40)
        return "Count: " + ", ".join(str(start + i) for i in range(rng.randint(4, 8))) + "."
    if kind == "words":
        start = rng.randint(0, 6)
        return "We count " + ", ".join(NUMBER_WORDS[start:start + rng.randint(3, 6)]) + "."
    start = rng.randint(0, 18)
    return "Letters: " + " ".join(chr(ord("a") + start + i) for i in range(rng.randint(4, 8))) + "."


def shopping(rng: random.Random) -> str:
    """A list, then a question whose answer is copied from it."""
    who = rng.choice(NAMES)
    items = rng.sample(OBJECTS, 3)
    pick = rng.randrange(3)
    order = ["first", "second", "third"][pick]
    return (f"{who} made a list: {items[0]}, {items[1]}, {items[2]}. "
            f"The {order} thing on the list was the {items[pick]}.")


GENERATORS = [(gift_story, 4), (pet_story, 3), (secret_word, 3), (color_facts, 2), (animal_sounds, 1),
              (sums, 2), (sequence, 3), (shopping, 2)]


def make(seed: int = SEED, target_bytes: int = TARGET_BYTES) -> str:
    """The corpus text: paragraphs from the generators above, by weight, until target_bytes."""
    rng = random.Random(seed)
    funcs = [f for f, w in GENERATORS for _ in range(w)]
    paragraphs, size = [], 0
    while size < target_bytes:
        text = rng.choice(funcs)(rng)
        paragraphs.append(text)
        size += len(text) + 2
    return "\n\n".join(paragraphs) + "\n"


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.write_text(make())
    print(f"wrote {out} ({out.stat().st_size} bytes)")
