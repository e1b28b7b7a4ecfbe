"""meshgate.config: the [doctor] table (the doctor's thresholds when a diagnosis request
gives none, its sampler's period and growth window) and how the node uses them."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import msgspec
import pytest
from twisted.internet import task

from gateway.auth import Authorizer
from gateway.broker.vhosts import VirtualHosts
from gateway.store.memory import MemoryStore
from management.doctor import DEFAULT_THRESHOLDS, Thresholds
from management.doctor_history import WINDOW_S
from management.doctor_node import SAMPLE_S, thresholds_of
from management.events import EventLog
from meshgate.admin_cli import COMMANDS, add_commands
from meshgate.config import DoctorConfig, load_config
from meshgate.node import Node
from model.requests import Diagnosis, decode_request
from tests.unit.config_support import error, load


def test_the_defaults_are_the_doctors_own():
    assert load_config(None).doctor == DoctorConfig()
    assert Thresholds.of(DoctorConfig()) == DEFAULT_THRESHOLDS
    assert (DoctorConfig().sample_s, DoctorConfig().window_s) == (SAMPLE_S, WINDOW_S)


def test_every_key_parses_and_a_request_gives_only_what_it_says(tmp_path: Path):
    doctor = load(tmp_path, """
        [doctor]
        waiting_s = 5
        in_doubt_s = 7.5
        unacked_s = 600
        paused_s = 30
        durable_gone_s = 86400
        stalled_s = 120
        sample_s = 2.5
        window_s = 60
        """).doctor
    assert doctor == DoctorConfig(waiting_s=5.0, in_doubt_s=7.5, unacked_s=600.0, paused_s=30.0,
                                  durable_gone_s=86400.0, stalled_s=120.0, sample_s=2.5, window_s=60.0)
    defaults = Thresholds.of(doctor)
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


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("sample_s", "0.5", "must be from 1 to 3600 seconds, got 0.5"),
    ("sample_s", "3601", "must be from 1 to 3600 seconds"),
    ("sample_s", "nan", "must be from 1 to 3600 seconds"),
    ("sample_s", '"10s"', "expected a number of seconds, got"),
    ("window_s", "0", "must be more than 0 and at most 86400 seconds (a day), got 0"),
    ("window_s", "86401", "at most 86400 seconds"),
    ("window_s", "true", "expected a number of seconds, got"),
    ("window_s", "5", "must be at least sample_s (10): growth is judged between two samples, got 5"),
])
def test_a_bad_sample_period_or_window_is_refused_naming_the_key(tmp_path: Path, key: str, value: str, problem: str):
    message = error(tmp_path, f"[doctor]\n{key} = {value}\n")
    assert message.startswith(f"doctor.{key}: ") and problem in message, message


def test_the_node_gives_the_sampler_its_period_and_window(tmp_path: Path):
    config = load(tmp_path, "[doctor]\nsample_s = 3\nwindow_s = 45\nunacked_s = 7\n")
    clock = task.Clock()
    node = Node(dataclasses.replace(config, data_dir=str(tmp_path / "data")), clock)
    node.identity = {"id": "a" * 32, "boots": 1}
    node.vhosts = VirtualHosts(MemoryStore(), clock=clock)
    node._start_management(node.vhosts.default, EventLog("a" * 32, clock), Authorizer((), enabled=False))
    assert node.management is not None
    sampler = node.management.doctor.sampler
    try:
        assert (sampler.period, sampler.dead_letters.window_s) == (3.0, 45.0)
        assert node.management.doctor_thresholds.unacked_s == 7.0
    finally:
        sampler.stop()


class DiagnosisBeforeDoctorTable(msgspec.Struct, kw_only=True, tag="diagnosis"):
    """The diagnosis request of a node from before [doctor]: thresholds are numbers."""

    older_than_s: float | None = None
    waiting_s: float = 60.0
    in_doubt_s: float = 60.0
    unacked_s: float = 300.0


def cli_request(*options: str):
    """The request ``meshgate doctor OPTIONS`` sends (its parser and maker, as admin_cli.run)."""
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    make_request = COMMANDS["doctor"][3]
    return make_request(parser.parse_args(["doctor", *options]))


def test_the_cli_leaves_out_the_thresholds_not_given_and_the_node_gives_its_own():
    encoded = msgspec.json.encode(cli_request())
    assert msgspec.json.decode(encoded) == {"action": "diagnosis"}
    assert msgspec.json.decode(encoded, type=DiagnosisBeforeDoctorTable) == DiagnosisBeforeDoctorTable()
    defaults = Thresholds.of(DoctorConfig(waiting_s=5.0, unacked_s=45.0))
    assert thresholds_of(decode_request(encoded), defaults) == defaults

    waiting = msgspec.json.encode(cli_request("--waiting", "5m"))
    assert msgspec.json.decode(waiting) == {"action": "diagnosis", "waiting_s": 300.0}
    assert thresholds_of(decode_request(waiting), defaults) == dataclasses.replace(defaults, waiting_s=300.0)
