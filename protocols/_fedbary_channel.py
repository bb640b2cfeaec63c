"""FedBary's typed channel (:mod:`testbed.exchange.schema`): what it sends and releases."""

from __future__ import annotations

from testbed.exchange.schema import (
    Array,
    Choice,
    Maybe,
    MeasureOf,
    Message,
    Num,
    Parties,
    Party,
    PerParty,
    Record,
)

#: the server's measures and each client's gamma with its distance (any support size: K, or the
#: validation set's; any dimension: labelled rows are augmented)
FEDBARY_MESSAGES = {
    "fedbary.gamma_init": Message(MeasureOf("*", "*")),
    "fedbary.gamma": Message(Record(gamma=MeasureOf("*", "*"), distance=Num())),
    "fedbary.eta_q": Message(MeasureOf("*", "*")),
    "fedbary.final": Message(Record(gamma=MeasureOf("*", "*"), distance=Num())),
}
#: the distances and contributions per client, the bound's history, the solvers used, the
#: detection scores each client keeps
FEDBARY_RELEASED = {
    "estimates": Record({"distance_{party}": Num(), "contribution_{party}": Num()}),
    "history": Record(bound=Array()),
    "outputs": Record(
        clients=Parties(),
        validation=Maybe(Party()),
        support_size=Num("i"),
        ranking=Parties(),
        farthest=Party(),
        solvers=Record(
            {
                "{party}": Choice("ot.emd", "linear_sum_assignment"),
                "detection": Choice("ot.emd (dual potentials)"),
            }
        ),
        barycenter=Array("f", ("*", "*")),
    ),
    "detection": Record(client=PerParty(Array())),
}
