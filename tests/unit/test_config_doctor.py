"""meshgate.config: the [doctor] table (the doctor's thresholds when a diagnosis request
gives none) and how the management service uses them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from management.doctor import DEFAULT_THRESHOLDS, Thresholds
from management.doctor_node import thresholds_of
from meshgate.config import DoctorConfig, load_config
from model.requests import Diagnosis
from tests.unit.config_support import error, load


def test_the_defaults_are_the_doctors_own():
    assert load_config(None).doctor == DoctorConfig()
    assert Thresholds(**dataclasses.asdict(DoctorConfig())) == DEFAULT_THRESHOLDS


def test_every_key_parses_and_a_request_gives_only_what_it_says(tmp_path: Path):
    doctor = load(tmp_path, """
        [doctor]
        waiting_s = 5
        in_doubt_s = 7.5
        unacked_s = 600
        paused_s = 30
        durable_gone_s = 86400
        stalled_s = 120
        """).doctor
    assert doctor == DoctorConfig(waiting_s=5.0, in_doubt_s=7.5, unacked_s=600.0, paused_s=30.0,
                                  durable_gone_s=86400.0, stalled_s=120.0)
    defaults = Thresholds(**dataclasses.asdict(doctor))
    assert thresholds_of(Diagnosis(), defaults) == defaults
    assert thresholds_of(Diagnosis(unacked_s=9), defaults) == dataclasses.replace(defaults, unacked_s=9)
    assert thresholds_of(Diagnosis(older_than_s=0), defaults) == Thresholds(0, 0, 0, 0, 0, 0)


def test_an_override_sets_one_key(tmp_path: Path):
    assert load(tmp_path, "", {"doctor.unacked_s": 45}).doctor == DoctorConfig(unacked_s=45.0)


@pytest.mark.parametrize(("value", "problem"), [
    ("0", "must be more than 0 and at most 31622400 seconds (366 days), got 0"),
    ("-1", "must be more than 0"),
    ("nan", "must be more than 0"),
    ("inf", "must be more than 0"),
    ("31622401", "got 31622401"),
    ('"5m"', "expected a number of seconds, got"),
    ("true", "expected a number of seconds, got"),
])
def test_bad_thresholds_are_refused_naming_the_key(tmp_path: Path, value: str, problem: str):
    message = error(tmp_path, f"[doctor]\nwaiting_s = {value}\n")
    assert message.startswith("doctor.waiting_s: ") and problem in message, message


def test_an_unknown_key_is_refused(tmp_path: Path):
    assert "doctor.waiting" in error(tmp_path, "[doctor]\nwaiting = 5\n")
