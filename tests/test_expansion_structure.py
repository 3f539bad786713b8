"""Structure and right-context checks of S²LCT expansions: the patterns a hand reading of the
regenerated suite found after the agreement checks (issue #9, item 4)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.capabilities.fill import expand, load_fill_model
from lingtest.tasks.capabilities.masks import MASK, Masked
from lingtest.tasks.capabilities.validation import tag
from lingtest.tasks.capabilities.wellformed import agreement_error, context_drops, structure_error

SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"

# Seed words with the [inserted] ones bracketed; True: a reader rejects it. The bad ones are
# taken from the suite (session-3 and session-4 readings); the good ones too.
CASES = [
    # the second blind reading after the volume change (issue #24)
    ("Oliver Stone 's conspiracy thriller JFK was [about] long , intricate , star-studded", True),
    ("consistently intelligent and [highly] sickeningly savage , but I think", True),
    ("Bray is completely at sea ; [there] with nothing but a Savage Garden music video", True),
    ("but I think that the [most] result is something quite fresh and delightful .", True),
    ("the film might have been more satisfying if it had , [more] in fact , been fleshed out", True),
    ("but I think that [our] murder By Numbers is like a couple of mediocre films", True),
    ("told by Hollywood , and much [else] more ordinary for it ? yes", True),
    ("Do I think that [first] ... somehow manages to escape the shackles ? no", True),
    ("Do I think that [by] but they fascinate in their recklessness ? no", True),
    ("a moratorium on treacly [billion] films about inspirational prep-school professors", True),
    ("Do I think that those eternally devoted [past] to the insanity of Black ? no", True),
    ("the bottom line is the [latest] piece works brilliantly .", False),
    ("Do I agree that it almost [always] feels as if the movie is more interested", False),
    ("the director seems to take pleasure in misery and at the [very] same time", False),
    ("This is not [necessarily] the kind of movie where the big scene is a man", False),
    ("make for a [really] bad film ? no", False),
    ("it cost [about] 20 million dollars", False),
    ("it cost [two] million dollars", False),
    ("Do I agree that never [again] capitalizes on this concept ? no", False),
    ("the ending is [deeply] sad .", False),
    ("Do I agree that the catch [here] is that they 're stuck with a script ? no", False),
    ("bring their characters [closer] to life", False),
    ("a [very] nicely made film", False),
    # the blind reading of the 40 random examples after the volume change (issue #24)
    ("I agreed that this movie is so [much] bad , that it 's almost worth seeing", True),
    ("but I think that [actual] the result is something quite fresh and delightful .", True),
    ("Do I think that [most] ... somehow manages to escape the shackles ?", True),
    ("the ongoing efforts of Cube [two] , and his skinny buddy Mike Epps", True),
    ("has done an amazing job of getting [three] realistic performances from his cast", False),
    ("offering itself up in [various] subtle plot maneuvers", False),
    ("Screenwriter Dan Schneider substitute volume and [their] primary colors for humor", False),
    ("Bray is [more] completely at sea ; he has no clue", False),
    ("Do I agree that [that] it 's good ? yes", True),
    ("I thought that [to] a Movie to Forget , but it was n't .", True),
    ("[As] there can be no other explanation .", True),
    ("[In] this is not a harrowing movie .", True),
    ("I like pancakes to go with [either] [in] it ? no", True),
    ("runs through Balzac and the Little [Red] [Lighthouse] Chinese Seamstress that transforms", True),
    ("the most irresponsible picture [in] ever released by a major film studio", True),
    ("the depersonalization of [of] modern life", True),
    ("This is n't a picture that [many] [people] Maik , the firebrand , would be envious of", True),
    ("I agreed that [for] as saccharine as it is disposable , but it was n't .", True),
    ("saying that [of] the mood , look and tone of the film fit the storyline", True),
    ("the choice of material to convey [and] [convey] it , but it was n't .", True),
    ("Do I think that [by] High Crimes miscasts nearly every leading character ? no", True),
    ("I thought that almost [every] [third] everything else is wan , but it was n't .", True),
    ("I agreed with saying that [the] Gollum 's ' performance ' is incredible", True),
    ("a movie paced [by] you could have seen it coming", True),
    ("that 's [about] because it is funny", True),
    ("Do I agree that some Like It Hot [Will] on the Hardwood proves once again", True),
    ("I did n't find much fascination in the [game] swinging , but I did n't .", True),
    ("is there a [place] group of more self-absorbed women", True),
    ("he insisted on the [very] film , a [dull] drama", False),
    ("Do I think that this [one] [and] 90-minute dud could pass ? no", True),
    ("Illuminating if [to] overly talky documentary .", True),
    ("I think that the film is [the] very good .", True),
    ("Do I think that what kids will [eventually] discover is a new collectible ? yes", False),
    ("I certainly ca n't recommend [or] [suggest] it , but", False),
    ("Do I think that what [these] kids will discover is a new collectible ? yes", False),
    ("the choice of [a] [different] material to convey it", False),
    ("we never really see her blossom as an [actual] actress", False),
    ("Do I agree that the [two] elements were all there", False),
    ("going to a [single] dinner party", False),
    ("by avoiding [their] eye contact and walking slowly away", False),
    ("picture we 've [long] been watching for decades", False),
    ("after the first 10 minutes , the [other] movie sinks into an abyss", False),
    ("Do I think that the zoom [feature] ? no", False),
    ("he has no clue about creating [or] [making] a movie", False),
    ("the performances of [the] four main actresses bring their characters to life", False),
    ("the film is [in] the end a mess", False),
    ("Do I agree that is there a group of more self-absorbed women than the mother and [the] daughters ? yes", False),
    ("Do I agree that the actors must be good to recite some [parts] of this laughable dialogue", False),
    ("when [exactly] are they like humans , only hairier", False),
    ("Films are made of [many] little moments .", False),
    ("This is not [the] cruel , misanthropic stuff with only weak claims", False),
    ("Boring and [a] meandering narrative .", False),
    ("a muddy psychological thriller rife with [moral] miscalculations , but now I like it .", False),
]


@pytest.fixture(scope="module")
def lm():
    return load_fill_model(SMOLLM, offline=True)


def test_structure_rules_on_read_expansions(nlp):
    words = [text.split() for text, _ in CASES]
    inserted = [[i for i, w in enumerate(ws) if w.startswith("[")] for ws in words]
    tagged = tag([[w.strip("[]") for w in ws] for ws in words], nlp)
    flagged = [structure_error(t, ins) or agreement_error(t, ins)
               for t, ins in zip(tagged, inserted)]
    wrong = [text for (text, bad), got in zip(CASES, flagged) if got != bad]
    assert wrong == []


def test_token_logprobs_sum_to_the_whole_text_score(lm):
    texts = ["The movie was released in the summer.", "Do I think that it's good? yes"]
    for (offsets, logp), total in zip(lm.token_logprobs(texts), lm.score(texts)):
        assert len(offsets) == len(logp) and np.all(np.diff(offsets) > 0)
        assert float(logp.sum()) == pytest.approx(float(total), abs=1e-3)


def test_context_drop_measures_what_follows_the_insertion(lm):
    seed = "The movie was released in the summer of 2002 and everyone loved it."
    same, good, broken, appended = context_drops(lm, seed, [
        seed, "The movie was finally released in the summer of 2002 and everyone loved it.",
        "The movie was of released in the summer of 2002 and everyone loved it.",
        seed + " Yes"])
    assert same == 0.0 and appended == 0.0  # nothing after the insertion
    assert good > -6.0 > broken
    assert broken < good - 5


def test_expand_applies_the_right_context_check(lm, nlp):
    masked = Masked(("The", "movie", "was", MASK, "released", "in", "the", "summer", "."),
                    (3,), ("RB",), ("VP", ("VBD", "VP"), ("VBD", "RB", "VP")), 2, (0, 3))
    polarity = pd.DataFrame({"word": ["good"], "pos": ["ADJ"], "polarity": ["positive"]})
    # k=20: of the first five words only "about" is an adverb, and "was about released"
    # is refused as a preposition standing as an adverb; "also" and "originally" stay
    free = expand([masked], lm, nlp, polarity, k=20, max_keep=5)
    assert free and free.report()["rejected_context"] == 0
    none_left = expand([masked], lm, nlp, polarity, k=20, max_keep=5,
                       min_right_context_logprob=50.0)
    assert len(none_left) == 0
    assert none_left.report()["rejected_context"] == free.report()["valid"]
