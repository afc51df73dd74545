"""Readers: ``public``, ``nobody`` and ``*`` are reserved words, never group names, for documents
and for principals alike."""

from __future__ import annotations

import pytest

from lightfoot_pipeline.ingest.readers import ReadersError, parse_groups, principal_groups, readers_of_text
from lightfoot_pipeline.permissions.principals import Principal, principal_of


@pytest.mark.parametrize("value, groups", [
    (["nobody"], ()), ("Nobody", ()), ([], ()), ("", ()),
    (["public"], ("public",)), (["legal", "PUBLIC"], ("legal", "public")), ("hr, legal", ("hr", "legal")),
])
def test_a_documents_readers_read_the_reserved_words_as_everyone_and_no_one(value, groups):
    assert parse_groups(value, "here") == groups


@pytest.mark.parametrize("value, message", [
    (["*"], r"here: '\*' is a reserved word \(the operator, who reads every document\)"),
    (["nobody", "legal"], "here: 'nobody' means no reader and cannot be named beside 'legal'"),
    ("public,nobody", "here: 'nobody' means no reader and cannot be named beside 'public'"),
])
def test_a_reserved_word_that_would_say_two_things_or_the_operator_is_refused_among_readers(value, message):
    with pytest.raises(ReadersError, match=message):
        parse_groups(value, "here")


@pytest.mark.parametrize("groups", [["nobody"], ["staff", "public"], "Public", "legal,NOBODY"])
def test_no_principal_is_of_the_group_public_or_nobody(groups):
    with pytest.raises(ReadersError, match="is a reserved word"):
        principal_of(groups, "someone")
    with pytest.raises(ReadersError, match="is a reserved word"):
        principal_groups(groups, "--as")


def test_the_operator_is_a_principal_of_star_and_reads_what_nobody_may():
    assert principal_of("*,legal").groups == ("*", "legal")
    assert principal_of("*").may_read(parse_groups(["nobody"], "here"))


def test_nobody_stored_as_a_group_before_it_was_reserved_is_no_reader():
    """A store written when ``nobody`` was an ordinary group keeps the string: it reads as no one."""
    assert readers_of_text("nobody") == () and readers_of_text("legal,nobody") == ("legal",)
    assert not Principal("holder", ("nobody",)).may_read(readers_of_text("nobody"))
    assert readers_of_text(None) == ("public",) and readers_of_text("") == ()
