"""Offline tasks with label-space semantics for federated distillation, and the partitioner that
gives a distillation scenario its clients, its server-held transfer set and its test set.

Datasets
--------
``vader_lexicon`` (ordinal, 5 levels, real data)
    Words of vaderSentiment's ``vader_lexicon.txt`` (7,506 entries, each with 10 human valence
    ratings in [-4, 4]). Label = the mean rating binned into 5 ordinal levels (strong negative ..
    strong positive; edges configurable). Features = the word's vector from a gensim Word2Vec
    trained (seeded, ``workers=1``) on gensim's bundled Lee background corpus; only lexicon words
    in the Word2Vec vocabulary are kept. Label coordinates: 1-D, levels 0..4.
``valence_arousal`` (2-D label coordinates, synthetic features)
    Five emotion classes placed in Russell's valence-arousal plane at the coordinates the paper
    takes from Ahn et al. (2010): anger (-0.4, 0.8), happiness (0.9, 0.2), no emotion (0, 0),
    sadness (-0.9, -0.4), surprise (0.4, 0.9). Features are Gaussian around the class's
    coordinates embedded in ``d`` dimensions by a fixed random orthonormal map, so classes close
    in the label plane are also confusable in feature space. This is a synthetic stand-in for the
    paper's ERC data (no ERC corpus ships offline).
(``diabetes`` and ``digits`` already exist in :mod:`testbed.data.datasets`.)

Partitioner ``distill_split``
    Splits rows into a held-out ``test`` party, a ``transfer`` party (the server's unlabeled
    transfer set) and the clients (label-skewed with Dirichlet(alpha)). With ``audit_target``, an
    ``audit`` party (server data) gets ``audit_rows`` of that client's training rows (members,
    which the client also keeps) and ``audit_rows`` rows of its share that it never trains on
    (non-members): the membership experiment's candidates, appended to the transfer set by the
    protocol (the server legitimately holds them): the transfer and audit parties are public
    (:meth:`DistillSplit.public_parties`), so the privacy guard does not protect them.
"""

from __future__ import annotations

import os

import numpy as np
from pydantic import Field, ValidationInfo, model_validator

from testbed.data.datasets import Dataset, DatasetPlugin
from testbed.data.partitions import DirichletConfig, DirichletLabel, PartitionerPlugin, PartyRows
from testbed.data.text import Word2VecParams, word2vec
from testbed.errors import DataError
from testbed.registry import DATASETS, PARTITIONERS, PluginConfig, check_parties, scenario_parties

__all__ = [
    "VALENCE_AROUSAL",
    "DistillSplit",
    "ValenceArousal",
    "VaderLexicon",
    "vader_lexicon_path",
]

#: Ahn et al. (2010), as used in the paper (Sec. 6, "Label-space"): (valence, arousal).
VALENCE_AROUSAL = {
    "anger": (-0.4, 0.8),
    "happiness": (0.9, 0.2),
    "no_emotion": (0.0, 0.0),
    "sadness": (-0.9, -0.4),
    "surprise": (0.4, 0.9),
}


def vader_lexicon_path() -> str:
    import vaderSentiment  # vaderSentiment: the sentiment data only

    return os.path.join(os.path.dirname(vaderSentiment.__file__), "vader_lexicon.txt")


def _read_vader() -> dict[str, float]:
    out: dict[str, float] = {}
    with open(vader_lexicon_path(), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 4:
                continue
            ratings = [float(v) for v in parts[3].strip("[] ").split(",")]
            out[parts[0]] = float(np.mean(ratings))
    return out


class VaderConfig(PluginConfig):
    vector_size: int = Field(32, gt=0, description="Word2Vec dimension")
    w2v_epochs: int = Field(40, gt=0, description="Word2Vec training epochs on the Lee corpus")
    min_count: int = Field(2, ge=1, description="Word2Vec min_count")
    window: int = Field(5, gt=0)
    edges: list[float] = Field(
        [-1.5, -0.5, 0.5, 1.5],
        min_length=4,
        max_length=4,
        description="bin edges of the mean rating (5 ordinal levels)",
    )
    standardize: bool = True


@DATASETS.register
class VaderLexicon(DatasetPlugin):
    """vaderSentiment lexicon words (5 ordinal valence levels) with Lee-corpus Word2Vec features."""

    name = "vader_lexicon"
    Config = VaderConfig

    def load(self, rng):
        cfg = self.config
        # the shared, deterministic, disk-cached Lee-corpus Word2Vec (testbed.data.text)
        wv = word2vec(
            Word2VecParams(
                vector_size=cfg.vector_size,
                window=cfg.window,
                min_count=cfg.min_count,
                epochs=cfg.w2v_epochs,
                seed=int(rng.integers(2**31 - 1)),
            )
        )
        lex = _read_vader()
        words = sorted(w for w in lex if w in wv.key_to_index)
        if len(words) < 20:
            raise DataError("vader_lexicon: fewer than 20 lexicon words in the Word2Vec vocabulary")
        X = np.stack([wv[w] for w in words]).astype(np.float64)
        if cfg.standardize:
            X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
        rating = np.array([lex[w] for w in words])
        y = np.searchsorted(np.asarray(cfg.edges), rating, side="right").astype(np.int64)
        return Dataset(
            X,
            y,
            self.name,
            {
                "label_coords": [[float(i)] for i in range(5)],
                "label_names": ["strong_neg", "weak_neg", "neutral", "weak_pos", "strong_pos"],
                "source": "vaderSentiment vader_lexicon.txt x gensim Word2Vec(lee_background.cor)",
                "words": len(words),
            },
        )


class ValenceArousalConfig(PluginConfig):
    n_per_class: list[int] = Field(
        [240, 240, 240, 240, 240], min_length=5, max_length=5, description="rows per class"
    )
    d: int = Field(16, ge=2, description="feature dimension")
    scale: float = Field(2.0, gt=0, description="class means = scale * embedded coordinates")
    noise: float = Field(1.0, gt=0, description="isotropic feature noise std")


@DATASETS.register
class ValenceArousal(DatasetPlugin):
    """Synthetic 5-emotion task whose label coordinates are the valence-arousal plane (Ahn et al.)."""

    name = "valence_arousal"
    Config = ValenceArousalConfig

    def load(self, rng):
        cfg = self.config
        coords = np.array(list(VALENCE_AROUSAL.values()))
        Q, _ = np.linalg.qr(rng.normal(size=(cfg.d, 2)))  # fixed orthonormal embedding d x 2
        Xs, ys = [], []
        for c, n in enumerate(cfg.n_per_class):
            mean = cfg.scale * Q @ coords[c]
            Xs.append(mean + cfg.noise * rng.normal(size=(n, cfg.d)))
            ys.append(np.full(n, c))
        return Dataset(
            np.vstack(Xs),
            np.concatenate(ys).astype(np.int64),
            self.name,
            {
                "label_coords": coords.tolist(),
                "label_names": list(VALENCE_AROUSAL),
                "source": "synthetic; label coordinates from Ahn et al. (2010) via the paper",
            },
        )


#: rows every client of distill_split gets at least (the Dirichlet split is redrawn until then)
MIN_CLIENT_ROWS = 10


class DistillSplitConfig(PluginConfig):
    transfer_fraction: float = Field(0.3, gt=0, lt=1, description="rows for the transfer set")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="rows for the test set")
    alpha: float = Field(
        0.5,
        gt=0,
        description="Dirichlet label skew among clients (each client gets at least 10 rows)",
    )
    transfer: str = Field("transfer", description="party holding the server's transfer set")
    test: str = Field("test", description="party holding the server's test set")
    audit: str = Field("audit", description="party holding the membership candidates")
    audit_target: str | None = Field(
        None, description="client whose membership is audited (needs the audit party)"
    )
    audit_rows: int = Field(0, ge=0, description="members (and as many non-members) to draw")

    @property
    def server_parties(self) -> list[str]:
        """The parties holding the server's data: transfer, test and, with an audit, audit."""
        return [self.transfer, self.test] + ([self.audit] if self.audit_target else [])

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        if self.transfer_fraction + self.test_fraction >= 0.95:
            raise ValueError("transfer_fraction + test_fraction must leave rows for the clients")
        if (self.audit_target is None) != (self.audit_rows == 0):
            raise ValueError("audit_target and audit_rows > 0 go together")
        # the parties split() needs (checked when validated with the scenario, PluginConfig)
        server = self.server_parties
        check_parties(server, info)
        parties = scenario_parties(info)
        if parties is not None:
            clients = [p for p in parties if p not in server]
            if not clients:
                raise ValueError(f"no client party: {', '.join(parties)} all hold server data")
            if self.audit_target is not None and self.audit_target not in clients:
                raise ValueError(f"audit_target {self.audit_target!r} is not a client party")
        return self


@PARTITIONERS.register
class DistillSplit(PartitionerPlugin):
    """Test set, server transfer set, label-skewed clients and an optional membership audit set."""

    name = "distill_split"
    needs_labels = True  # label-skewed clients (Dirichlet)
    Config = DistillSplitConfig

    def public_parties(self, parties):
        """The transfer set is sent to every client, and the audit candidates with it."""
        cfg = self.config
        return [cfg.transfer] + ([cfg.audit] if cfg.audit_target is not None else [])

    def party_rows(self, n, parties, class_rows=None):
        cfg = self.config
        n_test, n_tr, rest = self._sizes(n)  # the clients' Dirichlet split of rest: random
        server = {cfg.test: n_test, cfg.transfer: n_tr}
        if cfg.audit_target is not None:
            server[cfg.audit] = 2 * cfg.audit_rows
        rows = {p: server.get(p, rest) for p in parties}
        # the audit's members stay in the target's rows: counted twice
        return PartyRows(rows, n + cfg.audit_rows)

    def _sizes(self, n: int) -> tuple[int, int, int]:
        """Rows of the test set, of the transfer set and left for the clients in a dataset of
        ``n`` rows."""
        cfg = self.config
        n_test, n_tr = int(round(cfg.test_fraction * n)), int(round(cfg.transfer_fraction * n))
        return n_test, n_tr, max(n - n_test - n_tr, 0)

    def _too_few(self, clients: list[str], rest: int, n: int) -> str:
        cfg = self.config
        return (
            f"partition distill_split: could not give each of the {len(clients)} clients "
            f"({', '.join(clients)}) {MIN_CLIENT_ROWS} rows (the minimum) from the "
            f"{rest} of {n} rows left after test_fraction={cfg.test_fraction:g} and "
            f"transfer_fraction={cfg.transfer_fraction:g}, with label skew "
            f"alpha={cfg.alpha:g}; use more rows, fewer clients, smaller fractions or a "
            "larger alpha"
        )

    def check_rows(self, n, parties):
        cfg = self.config
        clients = [p for p in parties if p not in cfg.server_parties]
        _, _, rest = self._sizes(n)
        if clients and rest < len(clients) * MIN_CLIENT_ROWS:
            return ("name",), self._too_few(clients, rest, n)
        most = rest - (len(clients) - 1) * MIN_CLIENT_ROWS  # the audit target's largest share
        if clients and cfg.audit_target is not None and 3 * cfg.audit_rows > most:
            return ("params", "audit_rows"), (
                f"partition distill_split: audit_rows={cfg.audit_rows} needs 3x as many rows "
                f"in {cfg.audit_target!r}, which gets at most {most} of the {rest} client rows"
            )
        return None

    def split(self, ds, parties, rng):
        cfg = self.config
        server = cfg.server_parties
        for p in server:
            if p not in parties:
                raise DataError(
                    f"partition distill_split: party {p!r} is missing from data.parties"
                )
        clients = [p for p in parties if p not in server]
        if not clients:
            raise DataError("partition distill_split: no client parties")
        if cfg.audit_target is not None and cfg.audit_target not in clients:
            raise DataError(
                f"partition distill_split: audit_target {cfg.audit_target!r} is not a client"
            )
        perm = rng.permutation(ds.n)
        n_test, n_tr, _ = self._sizes(ds.n)
        test, transfer, rest = perm[:n_test], perm[n_test : n_test + n_tr], perm[n_test + n_tr :]
        sub = Dataset(ds.X[rest], None if ds.y is None else ds.y[rest], ds.name)
        try:
            inner = DirichletLabel(
                DirichletConfig(alpha=cfg.alpha, min_size=MIN_CLIENT_ROWS)
            ).split(sub, clients, rng)
        except DataError:  # the inner split's message names dirichlet, which the user never set
            raise DataError(self._too_few(clients, rest.size, ds.n)) from None
        out = {c: np.sort(rest[idx]) for c, idx in inner.items()}
        if cfg.audit_target is not None:
            # members and non-members are both uniform draws from the target's own share, so
            # they are exchangeable: the audit measures membership, not the target's label mix
            share = rng.permutation(out[cfg.audit_target])
            m = cfg.audit_rows
            if 3 * m > share.size:
                raise DataError(
                    f"partition distill_split: audit_rows={m} needs 3x as many rows; "
                    f"{cfg.audit_target!r} has {share.size}"
                )
            held_out, kept = share[:m], share[m:]
            members = kept[:m]
            out[cfg.audit_target] = np.sort(kept)
            out[cfg.audit] = np.sort(np.concatenate([members, held_out]))
        out[cfg.transfer] = np.sort(transfer)
        out[cfg.test] = np.sort(test)
        return out
