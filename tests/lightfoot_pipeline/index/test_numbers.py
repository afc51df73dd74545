import pytest

from lightfoot_pipeline.index.numbers import number_signature, numbers_agree
from lightfoot_pipeline.ingest.normalise import normalise_name


def _agree(a: str, b: str) -> bool:
    return numbers_agree(normalise_name(a), normalise_name(b))


@pytest.mark.parametrize(
    "a, b",
    [
        # The wrongly merged names.
        ("August 9, 1945", "August 6, 1945"),
        ("August 9, 1945", "8 May 1945"),
        ("August 9, 1945", "12 January 1945"),
        ("35th Chess Olympiad", "36th Chess Olympiad"),
        ("36th Chess Olympiad", "41st Chess Olympiad"),
        ("November 1", "26 November"),
        # A date against its year, a month against another, a decade against its first year.
        ("August 1945", "1945"),
        ("May 1945", "August 1945"),
        ("August 9", "September 8"),
        ("1990s", "1990"),
        # Roman numerals, ordinal words, numbers against none.
        ("World War I", "World War II"),
        ("World War II", "World War"),
        ("Henry VIII", "Henry VII"),
        ("Super Bowl XLV", "Super Bowl XL"),
        ("First Battle of Bull Run", "Second Battle of Bull Run"),
        ("Apollo 11", "Apollo 13"),
        ("Apollo 11", "Apollo"),
        ("Boeing 747", "Boeing 737"),
    ],
)
def test_names_with_other_numbers_disagree(a, b):
    assert not _agree(a, b)
    assert not _agree(b, a)


@pytest.mark.parametrize(
    "a, b",
    [
        ("August 9, 1945", "9 August 1945"),
        ("August 9, 1945", "Aug. 9, 1945"),
        ("August 9, 1945", "1945-08-09"),
        ("35th Chess Olympiad", "the 35th chess olympiad"),
        ("21st century", "twenty-first century"),
        ("First World War", "1st World War"),
        ("World War II", "Second World War"),
        ("1,000 Guineas", "1000 Guineas Stakes"),
        ("James Bond 007", "James Bond 7"),
        ("Barack Obama", "President Obama"),
        ("Theresa May", "Theresa May's government"),
        ("March", "April"),  # a month word alone is not a number
        ("Xi Jinping", "Jinping"),  # a numeral-looking first word is a word
    ],
)
def test_names_with_the_same_numbers_agree(a, b):
    assert _agree(a, b)
    assert _agree(b, a)


@pytest.mark.parametrize(
    "name, signature",
    [
        ("august 9, 1945", "1945 9 m8"),
        ("26 november", "26 m11"),
        ("41st chess olympiad", "41"),
        ("world war ii", "2"),
        ("world war i", "1"),
        ("henry v", "5"),
        ("super bowl xlv", "45"),
        ("twenty-first century", "21"),
        ("3.50 euro", "3.5"),
        ("version 2.0.1", "2.0.1"),
        ("f-16 fighting falcon", "16"),
        ("1990s", "1990s"),
        ("the beatles", ""),
        ("i, robot", ""),  # a one-letter numeral only as the last word
        ("dc comics", ""),
    ],
)
def test_signatures(name, signature):
    assert number_signature(name) == signature
