"""simcluster.divisors: the degrees named as the fix of a 'must divide' error."""

from simcluster.divisors import divisors, one_of


def test_divisors_are_every_divisor_ascending_filtered_by_fits():
    # 36 = 2^2 * 3^2 has (2+1)(2+1) = 9 divisors; 6 = sqrt(36) is listed once
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(1) == [1]
    assert divisors(32, lambda d: 24 % d == 0) == [1, 2, 4, 8]
    # 10^9 = 2^9 * 5^9: 10 x 10 divisors, found without a billion divisions
    assert len(divisors(10**9)) == 100


def test_one_of_reads_as_a_list_with_or():
    assert one_of([1, 2, 4, 8]) == "1, 2, 4 or 8"
    assert one_of([1, 2]) == "1 or 2"
    assert one_of([1]) == "1"
