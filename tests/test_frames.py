"""Changes written in other words (mdmem.search.frames): ``Priya lives in Berlin`` then ``Priya relocated to
Lisbon`` group by their subject and frame; look-alikes (another person, another project, a value that is not
a name, a different thing used, a pronoun) never do; a value said again is one version."""

from __future__ import annotations

import pytest

from mdmem.files.supersession import Supersession
from mdmem.search.frames import frames_of
from mdmem.search.grouping import implicit_supersessions

D1, D2, D3 = "memory/2026-03-01.md", "memory/2026-06-15.md", "memory/2026-10-02.md"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("- Priya Okafor lives in Berlin", "- Priya Okafor is back in Lisbon"),
        ("- Priya lives in Berlin", "- Priya relocated to New York"),
        ("- [09:00] Priya is based in Berlin", "- [10:00] Priya has settled in Lisbon for now"),
        ("- Priya moved to Berlin", "- Priya moved back to Lisbon"),
        ("- Bruno works at Globex", "- Bruno started a new job at Initech"),
        ("- Bruno works for Globex", "- Bruno joined Initech last week"),
        ("- Bruno was hired by Globex", "- Bruno accepted an offer from Initech"),
        ("- The Atlas project uses Jenkins for builds", "- The Atlas project switched its builds to Drone"),
        ("- Atlas uses Postgres for storage", "- Atlas migrated its storage to CockroachDB"),
        ("- The team uses Slack", "- The team switched to Discord"),
        ("- Atlas uses Jenkins for builds", "- Atlas moved builds to Drone"),
        ("- I live in Porto", "- I moved to Lyon"),
        ("- Caroline: I live in Ohio", "- Caroline: I moved to Sweden"),
    ],
)
def test_a_change_in_other_words_groups_newer_first(old: str, new: str) -> None:
    lines = [(D1, 3, old), (D3, 3, new)]
    want = [Supersession("", 0, D1, 3, D3, 3, "2026-10-02")]
    assert implicit_supersessions(lines) == want
    assert implicit_supersessions(lines[::-1]) == want


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("- Priya lives in Berlin", "- Bob relocated to Lisbon"),  # two people
        ("- Priya Okafor lives in Berlin", "- Priya Silva moved to Lisbon"),  # two people, one first name
        ("- The Atlas project uses Jenkins for builds", "- The Orion project switched its builds to Drone"),
        ("- Atlas uses Jenkins for builds", "- Atlas uses Jira for tickets"),  # two things used
        ("- Atlas uses Jenkins for builds", "- Atlas switched to Drone"),  # which one changed is not said
        ("- Priya lives in Berlin", "- Priya works at Globex"),  # two frames
        ("- Priya lives in Berlin", "- Priya moved to a new flat"),  # not a name
        ("- Bruno works at Globex", "- Bruno joined the call late"),
        ("- She lives in Berlin", "- She moved to Lisbon"),  # a pronoun: could be anyone
        ("- Priya lives in Berlin", "- Priya moved to Lisbon for a conference with the whole sales team"),
        ("- Priya lives in Berlin", "- Did Priya move to Lisbon?"),  # a question
        ("- Priya visited Berlin", "- Priya flew to Lisbon"),  # trips, not where she lives
        ("- Priya's sister lives in Berlin", "- Priya relocated to Lisbon"),  # another subject
    ],
)
def test_look_alikes_in_other_words_never_group(a: str, b: str) -> None:
    assert implicit_supersessions([(D1, 3, a), (D3, 3, b)]) == []


def test_a_value_said_again_is_one_version_superseded_whole() -> None:
    lines = [
        (D1, 3, "- Priya lives in Berlin"),
        (D2, 3, "- Priya is back in Berlin"),  # the same value, other words: still Berlin
        (D3, 3, "- Priya relocated to Lisbon"),
    ]
    assert set(implicit_supersessions(lines)) == {
        Supersession("", 0, D1, 3, D3, 3, "2026-10-02"),
        Supersession("", 0, D2, 3, D3, 3, "2026-10-02"),
    }


def test_a_chain_in_mixed_words_follows_the_dates() -> None:
    lines = [
        (D3, 4, "- Tomas started a new job at Initech"),
        (D1, 4, "- Tomas works at Soylent"),
        (D2, 4, "- Tomas joined Stark"),
        ("memory/2026-01-10.md", 2, "- Tomas started a new job at Aperture"),
    ]
    got = {(s.old_path, s.new_path) for s in implicit_supersessions(lines)}
    assert got == {
        ("memory/2026-01-10.md", D1),
        (D1, D2),
        (D2, D3),
    }


def test_frames_of_names_subject_frame_and_value() -> None:
    (frame,) = frames_of("- [09:07] The Meridian-2 project switched its builds to GitLab")
    assert (frame.subject, frame.name, frame.value) == (("the", "meridian-2", "project"), "uses:builds", ("gitlab",))
    assert frames_of("Priya moved to a new flat") == ()
    assert frames_of("He moved to Berlin") == ()
