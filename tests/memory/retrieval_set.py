"""A labelled retrieval set for memory recall, written for this product: what team
members tell their assistant about themselves, and the questions that need it.

Forty people with six facts each (240 memories). Questions come in two kinds:

- paraphrases: the question shares the person's name with six of their memories but
  none of the fact's own words ("What does Priya like to drink?" for "Priya always
  orders a flat white ..."): text alone finds the person, meaning finds the fact;
- exact terms: a locker code or a pet's name, which only text matches reliably.

``memories()`` gives (key, content); ``questions()`` gives (question, key of the
memory that answers it). Deterministic: no randomness.
"""

from __future__ import annotations

NAMES = [
    "Priya",
    "Tomasz",
    "Aiko",
    "Mateo",
    "Fatima",
    "Lars",
    "Chidi",
    "Ingrid",
    "Rafael",
    "Mei",
    "Oskar",
    "Leila",
    "Dmitri",
    "Sofia",
    "Kwame",
    "Hannah",
    "Yusuf",
    "Elena",
    "Bjorn",
    "Amara",
    "Jonas",
    "Nadia",
    "Kenji",
    "Lucia",
    "Omar",
    "Greta",
    "Thabo",
    "Clara",
    "Ravi",
    "Zofia",
    "Emeka",
    "Astrid",
    "Diego",
    "Noor",
    "Felix",
    "Ines",
    "Hiroshi",
    "Maren",
    "Tariq",
    "Vera",
]
DRINKS = [
    "a flat white",
    "jasmine green tea",
    "sparkling water with lime",
    "a double espresso",
    "rooibos",
    "hot chocolate",
    "an oat milk latte",
    "peppermint tea",
]
PETS = [
    ("cat", "Biscuit"),
    ("dog", "Pepper"),
    ("parrot", "Kiwi"),
    ("rabbit", "Mochi"),
    ("tortoise", "Sheldon"),
    ("hamster", "Nugget"),
    ("dog", "Juniper"),
    ("cat", "Saffron"),
]
CITIES = ["Lisbon", "Gdansk", "Osaka", "Valparaiso", "Accra", "Tromso", "Montreal", "Tbilisi"]
ALLERGENS = ["peanuts", "shellfish", "gluten", "sesame", "dairy", "kiwi fruit", "soy", "eggs"]
HOBBIES = [
    "rock climbing",
    "sailing on the lake",
    "pottery classes",
    "trail running",
    "birdwatching",
    "playing the cello",
    "woodworking",
    "salsa dancing",
]

FACTS = {
    "drink": "{name} always orders {drink} when we go to the cafe.",
    "pet": "{name} has a {pet} named {petname} at home.",
    "city": "{name} relocated to {city} last spring and works remotely from there.",
    "allergy": "{name} is allergic to {allergen}; keep it out of team lunches.",
    "code": "{name}'s locker code at the office is {code}.",
    "hobby": "On weekends {name} spends the time {hobby}.",
}
PARAPHRASES = {
    "drink": ["What beverage should I get for {name}?", "What does {name} like to drink?"],
    "pet": ["Does {name} own any animals?", "What kind of animal lives with {name}?"],
    "city": ["Where is {name} based these days?", "Which town did {name} move to?"],
    "allergy": ["What food can {name} not eat?", "Is there anything {name} must avoid eating?"],
    "hobby": ["What does {name} do for fun on Saturdays?", "Which leisure activity does {name} enjoy?"],
}


def _values(i: int) -> dict[str, str]:
    pet, petname = PETS[(i * 3) % len(PETS)]
    return {
        "name": NAMES[i],
        "drink": DRINKS[i % len(DRINKS)],
        "pet": pet,
        "petname": f"{petname}{'' if i < 8 else i}",
        "city": CITIES[(i * 5) % len(CITIES)],
        "allergen": ALLERGENS[(i * 7) % len(ALLERGENS)],
        "hobby": HOBBIES[(i * 3 + 1) % len(HOBBIES)],
        "code": f"LK-{4000 + i * 37}-{chr(65 + i % 26)}",
    }


def memories() -> list[tuple[str, str]]:
    out = []
    for i in range(len(NAMES)):
        values = _values(i)
        for fact, template in FACTS.items():
            out.append((f"{i}:{fact}", template.format(**values)))
    return out


def questions() -> list[tuple[str, str]]:
    out = []
    kinds = list(PARAPHRASES)
    for i in range(len(NAMES)):
        values = _values(i)
        # Two paraphrases per person, rotating over the facts.
        for n in range(2):
            fact = kinds[(i + n * 2) % len(kinds)]
            out.append((PARAPHRASES[fact][(i + n) % 2].format(**values), f"{i}:{fact}"))
        # One exact term: the locker code, or the pet's name.
        if i % 2 == 0:
            out.append((f"Whose locker is {values['code']}?", f"{i}:code"))
        else:
            out.append((f"Who does {values['petname']} belong to?", f"{i}:pet"))
    return out
