"""Well-formedness checks of S²LCT expansions (issue items 3–4): which fills are whole words,
never neutral, grammatical around the inserted word, and confident enough.

Why: a causal LM's word-start token can be a word piece ("made out o"), a POS-correct word can
still break a/an or number agreement ("An Same guy", "one performances"), and negators or
focus words change what a sentence asserts while carrying no lexicon polarity. The checks
look at the inserted words and their neighbours only: a seed's own oddities are not ours.
``structure_error`` holds the patterns a hand reading of the suite found after those checks
("Do I agree that that it's", "paced by you could", "In this is not", "the Gollum's
'performance'", "either in it"); ``context_drops`` measures what an insertion does to the
words after it, which the whole-sentence score mixes with the inserted word's own cost.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lingtest.tasks.capabilities.fill import Candidate
    from lingtest.tasks.capabilities.validation import Tagged
    from lingtest.tasks.models.causal_lm import CausalLM

# Negators, diminishers and focus words change what a sentence asserts: never a neutral fill.
NOT_NEUTRAL = frozenset("""not n't no never nor neither none nobody nothing nowhere without
cannot hardly barely scarcely rarely seldom only merely just simply too less least little few
fewer even still yet almost nearly somewhat slightly except but although though however
instead rather""".split())
SINGULAR_DETS = frozenset("a an one each every another this that either neither".split())
PLURAL_DETS = frozenset("""these those many several both few fewer various two three four five
six seven eight nine ten numerous""".split())
AN_EXCEPTIONS = frozenset("hour hours honest honestly honor honour honorable heir".split())
A_EXCEPTIONS = ("one", "once", "uni", "use", "usu", "eu", "ewe", "ubiq", "utop", "uran")
NOMINAL_NEXT = frozenset({"JJ", "JJR", "JJS", "NN", "NNS", "NNP", "NNPS", "CD", "VBG", "VBN",
                          "RB", "RBR", "RBS", "PRP$", "DT", "PDT", "HYPH", "``"})
OBJECT_NEXT = NOMINAL_NEXT | {"PRP", "WP", "WDT", "WRB", "EX", "IN", "TO", "POS"}
VERB_TAGS = frozenset({"VB", "VBP", "VBZ", "VBD", "MD"})
NOUN_MODIFIERS = frozenset({"JJ", "JJR", "JJS", "RB", "RBS", "RBR", "VBN", "VBG", "HYPH",
                            "CD", "NN", "NNP"})
PREPOSITIONS = frozenset({"IN", "TO"})
PROPER = frozenset({"NNP", "NNPS"})
MODIFIER_TAGS = frozenset({"DT", "PDT", "JJ", "JJR", "JJS", "NN", "NNS", "NNP", "NNPS", "CD",
                           "PRP$", "VBN", "VBG", "RB", "RBR", "RBS"})
NOUN_PHRASE_TAGS = frozenset({"DT", "PDT", "PRP", "PRP$", "JJ", "JJR", "JJS", "NN", "NNS",
                              "NNP", "NNPS", "CD", "POS", "HYPH"})
FINITE_VERBS = frozenset({"VBZ", "VBP", "VBD", "MD"})
ADVERBS = frozenset({"RB", "RBR", "RBS"})
# Pronouns that take no determiner or adjective before them ("every third everything").
BARE_PRONOUNS = frozenset("""everything something anything nothing everyone someone anyone
everybody somebody anybody nobody""".split())
PRENOMINAL = frozenset({"JJ", "JJR", "JJS", "RB", "RBR", "RBS", "VBN", "VBG", "HYPH", "CD",
                        ",", "CC", "``", "''"})
# Determiners that stand as a whole noun phrase ("all of", "this is", "both were").
STANDALONE_DETS = frozenset("all both each either neither this that these those some any "
                            "another".split())
PRECONJUNCTIONS = {"either": ("or",), "neither": ("nor",), "both": ("and",)}
# Inserted alone these need a second part ("as ... as", "so ... that", "such a ..."):
NEEDS_COMPLEMENT = frozenset("as so such".split())
DEGREE = frozenset("more most much less least very".split())
ADJECTIVES = frozenset({"JJ", "JJR", "JJS"})
MODIFIED_NEXT = frozenset({"NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS", "CD", "VBG", "VBN",
                           "HYPH", "``"})
MUCH_BEFORE = frozenset("more less too better worse fewer".split())
# Quantifiers spaCy may tag JJ that still need a plural head ("how many medical aid is").
QUANTIFIERS = frozenset("many several few fewer various numerous".split())
# Words inside a noun phrase: no determiner may follow them ("its gentle a story").
INSIDE_NP = frozenset({"JJ", "JJR", "JJS", "DT", "PDT", "PRP$", "CD", "POS"})
DETERMINERS = frozenset({"DT", "PDT", "PRP$"})
# Prepositions that spaCy tags RB in context ("JFK was about long", "devoted past to",
# "that by but"): as inserted adverbs they read as a preposition without its object.
PREPOSITION_ADVERBS = frozenset("""about above across after along around before behind below
beneath beside between beyond by down in inside near off on out outside over past round
through throughout under underneath up within without there""".split())
LARGE_NUMBERS = frozenset("hundred hundreds thousand thousands million millions billion "
                          "billions trillion dozen dozens".split())
# Function words that are capitalised mid-sentence only inside a title ("murder By Numbers").
TITLE_WORD_TAGS = frozenset({"IN", "DT", "CC", "TO", "PRP$"})


def is_whole_word(word: str, tags: Mapping[str, frozenset[str]] | None = None) -> bool:
    """Not a word piece: known to the lexicon (when given); one letter only for "a" / "I"."""
    if len(word) < 2 and word.lower() not in ("a", "i"):
        return False
    return tags is None or word.lower() in tags


def _article_fits(article: str, word: str) -> bool:
    """"a" before a consonant sound, "an" before a vowel sound (spelling heuristics)."""
    low = word.lower()
    if not low[:1].isalpha() or (word.isupper() and len(word) > 1):
        return True  # numbers, symbols, initialisms: sound unknown from spelling
    vowel = low[0] in "aeiou"
    if vowel and low.startswith(A_EXCEPTIONS):
        vowel = False
    if low in AN_EXCEPTIONS:
        vowel = True
    return vowel == (article.lower() == "an")


def dangling_error(tagged: "Tagged", inserted: Sequence[int]) -> bool:
    """Whether an inserted word is left without what it needs next: a determiner or number
    before no nominal ("manages the, with"), a preposition before a verb or nothing ("the
    performances of allow us"), a singular (plural) noun before a plural (singular) present
    verb ("feature films is")."""
    tags = tagged.tag
    for i in inserted:
        nxt = tags[i + 1] if i + 1 < len(tags) else "END"
        if tags[i] in ("DT", "PDT") and nxt not in NOMINAL_NEXT:
            return True
        if tags[i] in PREPOSITIONS and (nxt not in OBJECT_NEXT or nxt in PREPOSITIONS):
            return True
        if (tags[i] == "NNS" and nxt == "VBZ") or (tags[i] in ("NN", "NNP") and nxt == "VBP"):
            return True
    return False


def countable(noun: str, plurals: frozenset[str]) -> bool:
    """Whether ``noun`` has a plural among ``plurals`` (words seen tagged NNS): "story" →
    "stories", "film" → "films"; "mankind", "liberalism" have none and take no "a"."""
    low = noun.lower()
    forms = {low + "s", low + "es", low[:-1] + "ies" if low.endswith("y") else low + "s"}
    return bool(forms & plurals)


def agreement_error(tagged: "Tagged", inserted: Sequence[int],
                    plurals: frozenset[str] | None = None) -> bool:
    """Whether an inserted word dangles (``dangling_error``) or takes part in a broken a/an
    or determiner–noun agreement: a/an before the next word; a singular (plural) determiner or "one" before a plural
    (singular) head noun, the head being the first noun after modifiers; with ``plurals``
    (the words seen tagged NNS), a singular determiner inserted before a noun that has no
    plural there ("a mankind", "brand of a liberalism")."""
    if dangling_error(tagged, inserted):
        return True
    touched = set(inserted)
    toks = tagged.tokens
    for i, word in enumerate(toks[:-1]):
        low = word.lower()
        if low in ("a", "an") and (i in touched or i + 1 in touched) \
                and not _article_fits(low, toks[i + 1]):
            return True
        if low not in SINGULAR_DETS and low not in PLURAL_DETS:
            continue
        if tagged.tag[i] not in ("DT", "CD", "PDT") and low not in QUANTIFIERS:
            continue
        j = i + 1
        while j < len(toks) and tagged.tag[j] in NOUN_MODIFIERS and not (
                tagged.tag[j] in ("NN", "NNP") and (j + 1 == len(toks)
                                                    or not tagged.tag[j + 1].startswith("NN"))):
            j += 1
        if j >= len(toks) or not (i in touched or any(i < t <= j for t in touched)):
            continue
        head = tagged.tag[j]
        if (low in SINGULAR_DETS and head in ("NNS", "NNPS")) or \
                (low in PLURAL_DETS and head in ("NN", "NNP")):
            return True
        if plurals is not None and i in touched and low in SINGULAR_DETS and head == "NN" \
                and not countable(toks[j], plurals):
            return True
    return False


def structure_error(tagged: "Tagged", inserted: Sequence[int]) -> bool:
    """Whether an inserted word breaks the sentence's structure (``structure`` reason)."""
    toks = [t.lower() for t in tagged.tokens]
    tags = tagged.tag
    added = set(inserted)
    for i in inserted:
        word = toks[i]
        # a repeated neighbour: "of of", "that that", "convey and convey", "see it and it"
        if word.isalpha() and any(toks[j] == word for j in (i - 2, i - 1, i + 1, i + 2)
                                  if 0 <= j < len(toks) and j != i):
            return True
        right = next((j for j in range(i + 1, len(toks)) if j not in added), None)
        left = next((j for j in range(i - 1, -1, -1) if j not in added), None)
        nxt = tags[i + 1] if i + 1 < len(tags) else "END"
        # an invented name ("Some Like It Hot Will on the Hardwood"; "French" may stay)
        if tags[i] in PROPER or (i > 0 and tagged.tokens[i][:1].isupper() and word != "i"
                                 and not tags[i].startswith("JJ")):
            return True
        # a noun made into a compound modifier ("the game swinging", "a place group") or an
        # adverb before a noun ("the hollow inside state")
        if (tags[i] in ("NN", "NNS") or tags[i] in ADVERBS) and nxt in ("NN", "NNS", "VBG"):
            return True
        # unlike conjuncts around an inserted "and"/"or" ("this one and 90-minute dud")
        if tags[i] == "CC" and word not in PRECONJUNCTIONS and 0 < i < len(tags) - 1 \
                and tags[i - 1][:2] != tags[i + 1][:2]:
            return True
        # a modifier of a proper name or title: "the Gollum's", "many people Maik", "Little
        # Red ... Seamstress", "my Interview with the Assassin"
        if tags[i] in MODIFIER_TAGS and right is not None and (
                tags[right] in PROPER or (right > 0 and tagged.tokens[right][:1].isupper()
                                          and toks[right] != "i")):
            return True
        # a title whose capitalised function word follows ("our murder By Numbers")
        if tags[i] in MODIFIER_TAGS and any(
                j < len(toks) and tags[j] in TITLE_WORD_TAGS and tagged.tokens[j][:1].isupper()
                for j in (i + 1, i + 2)):
            return True
        # a preposition standing as an adverb ("was about long", "devoted past to the",
        # "at sea; there with nothing"); "about 20" stays
        if word in PREPOSITION_ADVERBS and tags[i] in ADVERBS | {"RP", "EX"} and nxt != "CD":
            return True
        # "billion films": a large number needs a number or "a" before it
        if word in LARGE_NUMBERS and (left is None or not (tags[left] == "CD"
                                                           or toks[left] in ("a", "one"))):
            return True
        # nothing is inserted before an ellipsis or a dash ("that first ... somehow")
        if right is not None and toks[right] in ("...", "--", "…"):
            return True
        # "the most result": "most"/"least" before a singular noun
        if word in ("most", "least") and nxt == "NN":
            return True
        # a comparative between a comma and a preposition ("had, more in fact, been")
        if tags[i] in ("RBR", "JJR") and nxt == "IN" and left is not None \
                and toks[left] == "," and toks[right] != "than":
            return True
        # "much else more ordinary": "else" closes a phrase, never modifies what follows
        if word == "else" and nxt in MODIFIED_NEXT | ADVERBS | DETERMINERS:
            return True
        # two -ly adverbs in a row ("highly sickeningly savage")
        if tags[i] in ADVERBS and word.endswith("ly") and any(
                0 <= j < len(toks) and j != i and tags[j] in ADVERBS and toks[j].endswith("ly")
                for j in (i - 1, i + 1)):
            return True
        # a word that needs its own complement ("written so as well", "so little moments")
        if word in NEEDS_COMPLEMENT:
            return True
        # an adjective, number or possessive needs what it modifies next ("Cube two,", "most
        # ... somehow"); an adjective never comes before a determiner ("actual the result")
        if tags[i] in ADJECTIVES | {"CD", "PRP$"} and nxt not in MODIFIED_NEXT | (
                {",", "CC"} if tags[i] in ADJECTIVES else set()):
            return True
        if tags[i] in ADJECTIVES and nxt in DETERMINERS:
            return True
        if tags[i] in ("RBR", "RBS") and (i + 1 == len(toks) or not toks[i + 1][:1].isalnum()):
            return True
        # "much" modifies comparatives only ("so much bad")
        if word == "much" and nxt not in ("JJR", "RBR") and (right is None or toks[right] not in
                                                             MUCH_BEFORE):
            return True
        # a second number or degree word ("two flagrantly four fake", "most much of it")
        if tags[i] == "CD" and any(tags[j] == "CD" for j in range(max(0, i - 3), i)):
            return True
        if word in DEGREE and right is not None and toks[right] in DEGREE | QUANTIFIERS:
            return True
        # nothing takes a modifier before "everything", "someone", ...
        if right is not None and toks[right] in BARE_PRONOUNS and tags[i] != "CC":
            return True
        # a determiner opens a noun phrase: never after an adjective, determiner or
        # possessive of one ("its gentle, touching a story", "of a the film")
        if tags[i] in DETERMINERS and left is not None and tags[left] in INSIDE_NP \
                and left == i - 1:
            return True
        # a determiner needs a noun to determine ("Boring and the meandering.")
        if tags[i] in ("DT", "PDT") and word not in STANDALONE_DETS:
            j = i + 1
            while j < len(tags) and tags[j] in PRENOMINAL:
                j += 1
            if j == len(tags) or not (tags[j].startswith("NN") or tags[j] in ("PRP", "CD")):
                return True
        if word in PRECONJUNCTIONS and not any(t in PRECONJUNCTIONS[word] for t in toks[i + 1:]):
            return True
        if tags[i] not in PREPOSITIONS:
            continue
        # a prepositional phrase (or "As"/"If" clause) opening the sentence or a "that" clause
        # ("that" as spaCy may tag it DT: "saying that of the mood"), or right after another
        # preposition or subordinator ("Illuminating if to overly talky")
        if left is None or toks[left] == "that" or tags[left] in PREPOSITIONS:
            return True
        if right is None:
            continue
        # "in ever released": a preposition before an adverb and then a verb
        if tags[right] in ADVERBS and right + 1 < len(tags) and tags[right + 1].startswith(("VB", "MD")):
            return True
        # "by you could", "by High Crimes miscasts": the object is the next verb's subject
        j = right
        while j < len(tags) and tags[j] in NOUN_PHRASE_TAGS and j - right < 6:
            j += 1
        if j > right and j < len(tags) and tags[j] in FINITE_VERBS:
            return True
    return False


def context_drops(model: "CausalLM", seed: str, texts: Sequence[str]) -> list[float]:
    """Per expansion text, log P(the words after its last insertion) less log P(the same words
    in the seed), each given everything before them (nats; ≤ 0 when the insertion makes the
    rest less likely). The shared tail is found as the longest common character suffix, cut
    at the first token start both texts share; no shared tail gives 0."""
    scored = model.token_logprobs([seed, *texts])
    seed_off, seed_lp = scored[0]
    seed_starts = set(seed_off.tolist())
    drops = []
    for text, (off, lp) in zip(texts, scored[1:]):
        shift = len(text) - len(seed)
        tail = 0
        while tail < min(len(text), len(seed)) and text[-1 - tail] == seed[-1 - tail]:
            tail += 1
        cut = len(text) - tail
        common = sorted(o - shift for o in off.tolist() if o >= cut and o - shift in seed_starts)
        if not common:
            drops.append(0.0)
            continue
        start = common[0]
        drops.append(float(np.sum(lp[off >= start + shift]) - np.sum(seed_lp[seed_off >= start])))
    return drops


def below_floor(candidates: "list[Candidate]", seed_score: float, floor: float | None
                ) -> list[bool]:
    """Per candidate, whether (its score − the seed's) / inserted words is below ``floor``."""
    if floor is None:
        return [False] * len(candidates)
    return [(c.score - seed_score) / max(len(c.words), 1) < floor for c in candidates]
