"""The cost estimate admission, the measured speed and a key's charge count in."""

from embedgate.api.compute.requests.costs import items_cost, text_cost


def test_a_text_costs_its_estimated_tokens():
    assert text_cost("abcd" * 10) == 10 + 2
    assert text_cost(("abcd" * 3, "abcd" * 2)) == 5 + 3  # a pair has one more separator
    assert items_cost(["abcd", "abcd" * 2]) == (1 + 2) + (2 + 2)
