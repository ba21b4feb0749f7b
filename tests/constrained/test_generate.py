"""generate(): schema or pydantic model in, validated objects out, on a real model (SmolLM2)."""

from __future__ import annotations

from typing import Literal

import jsonschema
import pydantic
import pytest

from constrained.errors import BudgetTooSmallError
from constrained import generate

pytestmark = pytest.mark.model


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    country: str = pydantic.Field(max_length=24)
    population_millions: int = pydantic.Field(ge=0, le=50)
    size: Literal["small", "medium", "large"]


PROMPT = "<|im_start|>user\nDescribe Paris as JSON.<|im_end|>\n<|im_start|>assistant\n"


def test_pydantic_model_in_validated_instance_out(smollm2_model):
    [city] = generate(smollm2_model, City, PROMPT, max_tokens=80)
    assert isinstance(city, City)
    assert city.size in ("small", "medium", "large") and 0 <= city.population_millions <= 50


def test_dict_schema_gives_validated_json_values_n_times_with_seeds(smollm2_model):
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"enum": ["art", "food", "history"]}, "maxItems": 3}},
        "required": ["tags"],
        "additionalProperties": False,
    }
    first = generate(smollm2_model, schema, PROMPT, n=3, temperature=1.0, seed=11, max_tokens=40)
    assert len(first) == 3
    for value in first:
        jsonschema.validate(value, schema)
    assert generate(smollm2_model, schema, PROMPT, n=3, temperature=1.0, seed=11, max_tokens=40) == first


def test_a_budget_below_the_shortest_document_is_refused_up_front(smollm2_model):
    with pytest.raises(BudgetTooSmallError):
        generate(smollm2_model, City, PROMPT, max_tokens=3)
