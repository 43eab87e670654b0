"""The enums print as their names, as the Go types do, and stay their wire numbers."""

from kvoffload import Code, GetStatus, Outcome, Presence


def test_enums_print_as_names_and_compare_as_numbers():
    assert str(Outcome.STORED) == "STORED"
    assert f"{GetStatus.NOT_FOUND}" == "NOT_FOUND"
    assert "%s" % Presence.IN_FLIGHT == "IN_FLIGHT"
    assert f"{Code.QUOTA:d}" == str(int(Code.QUOTA))
    assert f"{GetStatus.FOUND:>7}" == "  FOUND" and f"{GetStatus.FOUND:s}" == "FOUND"
    assert Outcome.STORED == 1 and Outcome(1) is Outcome.STORED
