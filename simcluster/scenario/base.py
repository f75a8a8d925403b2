"""The base of every scenario section: unknown keys are errors, NaN, infinity and booleans
given for numbers are refused."""

from __future__ import annotations

from pydantic import ConfigDict

from simcluster.strict_numbers import NumbersNotBooleans


class SectionBase(NumbersNotBooleans):
    """A scenario section: a key it does not know is an error (named with a did-you-mean hint
    by ``loading``), NaN or infinity is refused, and so is a boolean for a number."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
