"""The base of every scenario section: unknown keys are errors, NaN and infinity are refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SectionBase(BaseModel):
    """A scenario section: a key it does not know is an error (named with a did-you-mean hint
    by ``loading``), and NaN or infinity is refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
