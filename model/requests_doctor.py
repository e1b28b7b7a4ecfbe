"""The management requests of the stuck-message doctor (docs/doctor.md);
model/requests.py lists them with the others."""

from __future__ import annotations

from typing import Annotated

import msgspec

from model.request_base import Request

# -- the doctor (docs/doctor.md) --------------------------------------------------------

# A threshold in seconds: from 0 to a year (a larger one finds nothing and is a typo).
Seconds = Annotated[float, msgspec.Meta(ge=0, le=366 * 24 * 3600)]
# A finding's id is KIND/NODE/VHOST/SUBJECT, its vhost and subject names of 255 bytes at most.
MAX_FINDING_ID = 1024


class NodeFacts(Request, kw_only=True, tag="node_facts"):
    """What the node knows that the doctor needs: its queues holding or consuming
    something, its links and what it keeps for peers, consumers holding unacked
    deliveries, and its ``[mesh]`` settings (``node: "*"``: every node's)."""


class Diagnosis(Request, kw_only=True, tag="diagnosis", omit_defaults=True):
    """The stuck-message doctor: the asked node gathers every node's ``node_facts``
    and answers the findings (``node`` is ignored). A backlog is stranded after
    ``waiting_s``, doubts are old after ``in_doubt_s``, unacked deliveries after
    ``unacked_s``; ``older_than_s`` sets all of them at once. One not given is the
    asked node's ``[doctor]`` threshold.

    A threshold not given is left out of the JSON, not sent as null: a node from before
    ``[doctor]`` declares them as numbers with defaults, and refuses a null."""

    older_than_s: Seconds | None = None
    waiting_s: Seconds | None = None
    in_doubt_s: Seconds | None = None
    unacked_s: Seconds | None = None


class ApplyRemedy(Request, kw_only=True, tag="apply_remedy"):
    """Do the remedy of the doctor's finding whose id is ``finding``: the asked node
    diagnoses the mesh again (every threshold 0, so the finding is there while its
    problem lasts), then sends the remedy's own request (a move, redistribute, forget,
    close_connection, purge, browse or delete_definition) in the asker's name, audited
    as that action ("doctor FINDING: " in its result). A remedy that drops or
    disconnects something needs ``confirm``. The reply is the remedy's own (its action
    and result). ``node`` is ignored. Admin."""

    finding: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FINDING_ID)]
    confirm: bool = False
