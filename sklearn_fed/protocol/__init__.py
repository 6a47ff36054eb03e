"""What crosses the wire, and the two roles that exchange it.

Every estimator of sklearn-fed is a protocol: a **client role** (a site: its
own rows in, a reply out), a **server role** (replies in, a model and the next
round's tasks out) and the messages between them. ``fit(X, y, clients=...)``
is an in-process run of exactly these roles; a deployment runs the same code
with the messages travelling as bytes (see :doc:`/deploying`).

- :class:`Frame`, :func:`encode`, :func:`decode`: the one wire format
  (versioned, schema-carrying, checksummed or HMAC-authenticated, no pickle).
- :class:`Server`, :class:`Client`: the roles, subclassed per estimator family
  (:class:`BlockwiseClient` for answers that are reductions over rows).
- :class:`SitePolicy`: what a site agrees to compute and release (disclosure
  rules applied to every reply, from what each role declares:
  :class:`CountedValues`, :class:`CountedColumns`, :class:`ColumnExtremes`,
  :class:`CountedTable`, :class:`CountedLabels`, :class:`ScoreBins`).
- :class:`FeatureSchema`: the features a task expects.
- :func:`run_rounds`: the one round loop; a :class:`Transport` carries each
  round (:class:`BytesTransport`: sites in this process through bytes).
- :class:`CommunicationLedger`: bytes sent, from real message sizes.
- :func:`encode_values`, :func:`encode_state`: label sets and fitted
  attributes on the wire; :func:`nest`: a step's message inside a pipeline's.
"""

from ._disclosure import (
    ColumnExtremes,
    CountedColumns,
    CountedLabels,
    CountedTable,
    CountedValues,
    ScoreBins,
)
from ._errors import InvalidClientMessage, TaskRefused
from ._ledger import CommunicationLedger, fedavg_bytes
from ._policy import SitePolicy, simulated_policy
from ._roles import BlockwiseClient, Client, FederatedMixin, FoldedReplies, Server
from ._runtime import BytesTransport, RowsElsewhere, Transport, run_rounds
from ._schema import FeatureSchema, check_site_data, match_columns
from ._simulate import atomic, run_simulation, simulate_through_bytes
from ._values import decode_state, decode_values, encode_state, encode_values
from ._wire import (
    Frame,
    SymmetricMatrix,
    decode,
    encode,
    label_key,
    nest,
    plain_label,
    sorted_labels,
    unnest,
)

__all__ = [
    "BlockwiseClient",
    "BytesTransport",
    "Client",
    "ColumnExtremes",
    "CommunicationLedger",
    "CountedColumns",
    "CountedLabels",
    "CountedTable",
    "CountedValues",
    "FeatureSchema",
    "FederatedMixin",
    "FoldedReplies",
    "Frame",
    "InvalidClientMessage",
    "RowsElsewhere",
    "ScoreBins",
    "Server",
    "SitePolicy",
    "SymmetricMatrix",
    "TaskRefused",
    "Transport",
    "atomic",
    "check_site_data",
    "decode",
    "decode_state",
    "decode_values",
    "encode",
    "encode_state",
    "encode_values",
    "fedavg_bytes",
    "label_key",
    "match_columns",
    "nest",
    "plain_label",
    "run_rounds",
    "run_simulation",
    "simulate_through_bytes",
    "simulated_policy",
    "sorted_labels",
    "unnest",
]
