"""The highest segment present (``LocalBase._top``: a gap below it is a missing segment, not the log's
end) is found without parsing every name of a long log's directory; any other name set is read as before."""

from __future__ import annotations

from objstore.storage.log.local_state import top_segment


def test_the_greatest_ten_digit_name_is_the_greatest_segment():
    names = [f"{n:010d}.seg" for n in (1, 2, 17, 9)] + [f"{n:010d}.idx" for n in (1, 2, 99)] + ["checkpoint", "witness", "idx-verified"]
    assert top_segment(names) == 17


def test_other_names_are_read_as_before():
    assert top_segment([]) == 1
    assert top_segment(["checkpoint"]) == 1
    assert top_segment(["0000000001.seg", "abcdefghij.seg", "0000000002.seg"]) == 2
    assert top_segment(["0000000009.seg", "00000000010.seg"]) == 10
    assert top_segment(["0000000003.seg", "5.seg"]) == 5
