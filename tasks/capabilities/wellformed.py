"""Well-formedness checks of S²LCT expansions (issue items 3–4): which fills are whole words,
never neutral, grammatical around the inserted word, and confident enough.

Why: a causal LM's word-start token can be a word piece ("made out o"), a POS-correct word can
still break a/an or number agreement ("An Same guy", "one performances"), and negators or
focus words change what a sentence asserts while carrying no lexicon polarity. The checks
look at the inserted words and their neighbours only: a seed's own oddities are not ours.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tasks.capabilities.fill import Candidate, Tagged

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
        if tags[i] in ("IN", "TO") and nxt not in OBJECT_NEXT:
            return True
        if (tags[i] == "NNS" and nxt == "VBZ") or (tags[i] in ("NN", "NNP") and nxt == "VBP"):
            return True
    return False


def agreement_error(tagged: "Tagged", inserted: Sequence[int]) -> bool:
    """Whether an inserted word dangles (``dangling_error``) or takes part in a broken a/an
    or determiner–noun agreement: a/an before the next word; a singular (plural) determiner or "one" before a plural
    (singular) head noun, the head being the first noun after modifiers."""
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
        if tagged.tag[i] not in ("DT", "CD", "PDT"):
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
    return False


def below_floor(candidates: "list[Candidate]", seed_score: float, floor: float | None
                ) -> list[bool]:
    """Per candidate, whether (its score − the seed's) / inserted words is below ``floor``."""
    if floor is None:
        return [False] * len(candidates)
    return [(c.score - seed_score) / max(len(c.words), 1) < floor for c in candidates]
