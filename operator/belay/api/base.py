"""The base of every custom resource model: camelCase on the wire, strict types, frozen."""

from __future__ import annotations

from pydantic import AliasGenerator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        # As the apiserver does: "3" is not a number, 3 is not a string.
        strict=True,
    )
