"""Lease, lock and election input is checked as docs/LEASES.md states it (pure functions of
http_api/lease_input.py), and the OpenAPI document's patterns say the same."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_api import lease_input
from http_api.encoding import MAX_VERSION
from http_api.openapi import openapi_document
from http_api.openapi_leases import FENCING
from node.errors import InvalidRequest
from node.service.lease_types import Fence


def refused(code: str, call: Any, *args: Any) -> str:
    with pytest.raises(InvalidRequest) as error:
        call(*args)
    assert error.value.code == code, error.value.message
    return error.value.message


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("jobs/compactor=7", Fence("jobs/compactor", 7)),
        ("  a=0 ", Fence("a", 0)),
        (f"x.y:z@w-1_={MAX_VERSION}", Fence("x.y:z@w-1_", MAX_VERSION)),
        ("n" * 200 + "=12", Fence("n" * 200, 12)),
    ],
)
def test_a_fencing_header_names_a_lock_and_its_token(header: str, expected: Fence) -> None:
    assert lease_input.fence(header) == expected


def test_no_fencing_header_is_no_fence() -> None:
    assert lease_input.fence(None) is None


@pytest.mark.parametrize(
    "header",
    [
        "",
        "=",
        "jobs",
        "jobs=",
        "=5",
        "jobs=-1",
        "jobs=1.0",
        "jobs=x",
        "jobs=²",
        "a=b=3",  # split on the last "=": the name "a=b" is not a lock name
        "jobs =3",
        "jöbs=3",
        "n" * 201 + "=1",
        f"jobs={MAX_VERSION + 1}",
    ],
)
def test_a_malformed_fencing_header_is_invalid_fencing(header: str) -> None:
    message = refused("invalid_fencing", lease_input.fence, header)
    assert "Rkv-Fencing" in message


@pytest.mark.parametrize("name", ["a", "jobs/compactor", "A-Z.a_z:0/9@-", "x" * 200, "...", "a/.b"])
def test_lock_names_are_1_to_200_of_the_documented_characters(name: str) -> None:
    assert lease_input.lock_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "x" * 201, "a b", "jobs\n", "é", "a=b", "a%2F", "a*", "/", "..", "a/./b", "a//b", "a/"],
)
def test_other_lock_names_are_invalid_lock_name(name: str) -> None:
    refused("invalid_lock_name", lease_input.lock_name, name)


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet="aZ09._:/@- =é\n%", max_size=210))
def test_lock_names_are_accepted_exactly_as_the_documented_pattern_says(name: str) -> None:
    parameter = openapi_document()["paths"]["/v1/locks/{name}"]["get"]["parameters"][0]
    pattern = re.compile(parameter["schema"]["pattern"])
    try:
        lease_input.lock_name(name)
        accepted = True
    except InvalidRequest:
        accepted = False
    assert accepted == (pattern.fullmatch(name) is not None), name


@settings(max_examples=300, derandomize=True)
@given(
    st.text(alphabet="ab/=0189- ", max_size=30)
    | st.from_regex(r"[ab]{1,3}=9{18,20}", fullmatch=True)
)
def test_fencing_headers_are_accepted_as_the_documented_pattern_says(header: str) -> None:
    pattern = re.compile(FENCING["schema"]["pattern"])  # on every write (test_openapi.py)
    try:
        lease_input.fence(header)
        accepted = True
    except InvalidRequest:
        accepted = False
    if pattern.fullmatch(header) is None:
        assert not accepted, header
    else:  # within the pattern, only a token past 2**63 - 1 is refused
        assert accepted == (int(header.strip().rpartition("=")[2]) <= MAX_VERSION), header


@pytest.mark.parametrize(("value", "seconds"), [(1, 1), (30, 30), (30.0, 30), (100, 100)])
def test_a_ttl_is_an_integer_from_1_to_the_maximum(value: object, seconds: int) -> None:
    assert lease_input.ttl(value, 100) == seconds


@pytest.mark.parametrize("value", [0, -1, 101, 1.5, "30", None, True, [], math.inf, math.nan])
def test_any_other_ttl_is_invalid_ttl(value: object) -> None:
    message = refused("invalid_ttl", lease_input.ttl, value, 100)
    assert "--max-lease-ttl" in message


@pytest.mark.parametrize("text", ["0", "101", "-5", "1.5", "", "x", "\uff11"])  # a fullwidth 1
def test_a_ttl_parameter_is_checked_the_same_way(text: str) -> None:
    refused("invalid_ttl", lease_input.ttl_text, text, 100)
    assert lease_input.ttl_text("100", 100) == 100


@pytest.mark.parametrize("value", [1, 4711, 4711.0, MAX_VERSION])
def test_a_lease_id_is_a_positive_integer(value: object) -> None:
    assert lease_input.lease_id(value) == int(value)  # type: ignore[call-overload]
    assert lease_input.lease_id_text(str(int(value))) == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [0, -1, 1.5, "7", None, False, MAX_VERSION + 1])
def test_other_lease_ids_are_refused(value: object) -> None:
    refused("invalid_request", lease_input.lease_id, value)


@pytest.mark.parametrize("text", [None, "", "0", "-3", "7.0", "abc", "٣"])
def test_other_lease_id_texts_are_refused(text: str | None) -> None:
    refused("invalid_request", lease_input.lease_id_text, text)


def test_a_keepalive_batch_is_1_to_10000_lease_ids_in_order() -> None:
    assert lease_input.lease_ids({"ids": [3, 1, 3]}) == [3, 1, 3]
    assert len(lease_input.lease_ids({"ids": list(range(1, 10_001))})) == 10_000
    body: object
    for body in (
        {"ids": []},
        {"ids": list(range(1, 10_002))},
        {"ids": [1, 0]},
        {"ids": "1"},
        {"ids": [1], "more": 1},
        [1, 2],
        {},
    ):
        refused("invalid_request", lease_input.lease_ids, body)


def test_a_lock_wait_is_0_to_the_maximum_and_defaults_to_10_s_capped() -> None:
    assert lease_input.lock_wait({}, 300) == 10.0
    assert lease_input.lock_wait({}, 4) == 4.0
    assert lease_input.lock_wait({"timeout": 0}, 300) == 0.0
    assert lease_input.lock_wait({"timeout": 2.5}, 300) == 2.5
    assert lease_input.lock_wait({"timeout": 300}, 300) == 300.0
    for value in (-0.1, 300.5, 10**400, math.inf, math.nan, "5", None, True):
        message = refused("invalid_request", lease_input.lock_wait, {"timeout": value}, 300)
        assert "--max-lock-wait" in message


def test_an_election_value_is_utf8_text_of_at_most_4096_bytes() -> None:
    assert lease_input.election_value("node-a") == b"node-a"
    assert lease_input.election_value("é" * 2048) == "é".encode() * 2048
    for value in ("é" * 2048 + "x", "\ud800", 5, None, b"x"):
        refused("invalid_request", lease_input.election_value, value)


def test_a_body_has_its_required_fields_and_no_others() -> None:
    body = {"lease": 1, "timeout": 2}
    assert lease_input.json_object(body, {"lease"}, {"timeout"}, "shape") is body
    bad: object
    for bad in ({"timeout": 2}, {"lease": 1, "other": 2}, [], "x", None):
        refused("invalid_request", lease_input.json_object, bad, {"lease"}, {"timeout"}, "shape")
