import pytest

from lightfoot_pipeline.ingest.normalise import clean_surface, normalise_name, normalise_predicate, normalise_type


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Person - centered therapy", "person-centered therapy"),
        ("  The   Beatles ", "the beatles"),
        ("U.S.", "u.s"),
        ('"Paris,"', "paris"),
        ("C++", "c++"),
        ("Foo (bar)", "foo (bar)"),
        ("Paris)", "paris"),
        ("Straße", "strasse"),
        ("ＡＢＣ", "abc"),  # full-width letters fold (NFKC)
        ("Viswanathan–Ramamoorthy", "viswanathan-ramamoorthy"),
        ("Jan Philip Solovej", "jan philip solovej"),
        ("—", ""),
        ("   ", ""),
    ],
)
def test_normalise_name(raw, expected):
    assert normalise_name(raw) == expected


def test_normalisation_is_idempotent():
    for raw in ["Person - centered therapy", "The U.S.", "«Quoted» name", "A / B testing"]:
        once = normalise_name(raw)
        assert normalise_name(once) == once


def test_types_fold_to_the_generic_type():
    assert normalise_type(None) == "entity"
    assert normalise_type("  Person ") == "person"
    assert normalise_type("Sports Team") == "sports_team"
    assert normalise_type("spaceship", allowed=("person", "entity")) == "entity"


def test_predicate_and_surface():
    assert normalise_predicate(" Was  Born In. ") == "was born in"
    assert clean_surface("  Jan   Philip\u00a0Solovej ") == "Jan Philip Solovej"
